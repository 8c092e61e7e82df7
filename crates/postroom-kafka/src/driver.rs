//! Kafka (`kafka://host:port`): the workload's topics (routes, retry stages, redrive, parking,
//! delivery ledger) created through the admin API, and the transport over one idempotent
//! producer and a consumer group per consumer.
//!
//! The URL names one bootstrap broker; `?brokers=h2:9092,h3:9092` adds more, `?partitions=N`
//! and `?replication=N` set how created topics are made (defaults 3 and 1); `kafka+ssl://`,
//! `security_protocol`, `sasl_mechanism`, `cacertfile`, `certfile` and `keyfile` secure the
//! connection (`postroom_kafka::settings`).

use crate::topology::{Consumers, admin, delete_groups, delete_topics};
use crate::{ConsumerTopics, KafkaConfig, KafkaTransport, Topology};
use postroom_core::driver::Endpoint;
use postroom_core::driver::{
    Driver, Planned, TopologyPlan, TransportDriver, cannot_reach, with_workload_consumers,
};
use postroom_core::driver::{TopologyFile, TransportSpec};
use postroom_core::{Error, Result};
use postroom_core::{Transport, async_trait};
use crate::settings::{FileSettings, from_url, split_file};
use std::sync::Arc;

/// Opens Kafka transports.
#[derive(Clone, Copy, Debug, Default)]
pub struct KafkaDriver;

/// The Kafka settings a `kafka://` URL, the topology file's `[kafka]` table and a workload
/// give (parsed by `postroom_kafka::settings`).
pub fn config_of(broker: &Endpoint, spec: &TransportSpec) -> Result<KafkaConfig> {
    let usage = |e: Error| Error::config(format!("broker {}: {}", broker.redacted(), e.message()));
    let mut file = FileSettings::default();
    if let Some(text) = &spec.topology_text {
        let (kafka, rest) = split_file(text)?;
        TopologyFile::only_neutral_keys(
            &rest,
            "Kafka",
            "its own settings go in a [kafka] table or the broker URL",
        )?;
        file = kafka;
    }
    let w = &spec.workload;
    let mut config = from_url(broker.expose(), &file).map_err(usage)?;
    config.prefix = w.prefix.clone();
    if let Some(ladder) = &w.ladder {
        config.ladder = ladder.clone();
    }
    config.validate().map_err(usage)?;
    Ok(config)
}

fn consumers_of(spec: &TransportSpec) -> Consumers {
    with_workload_consumers(Consumers::default(), spec, |acc, name, routes| {
        acc.with(name, routes)
    })
}

impl Driver for KafkaDriver {
    fn name(&self) -> &'static str {
        "kafka"
    }

    fn schemes(&self) -> &'static [&'static str] {
        &["kafka", "kafka+ssl"]
    }

    fn url_help(&self) -> &'static str {
        "kafka://host:9092 or kafka+ssl:// (Kafka; ?sasl_mechanism=SCRAM-SHA-512 for SASL, the password from POSTROOM_BROKER_PASSWORD)"
    }
}

#[async_trait]
impl TransportDriver for KafkaDriver {
    async fn open(&self, endpoint: &Endpoint, spec: &TransportSpec) -> Result<Arc<dyn Transport>> {
        let config = config_of(endpoint, spec)?;
        // Reach the cluster first (its metadata, within seconds): a broker nobody answers at
        // is named now, not after the admin client's request timeout on the first topic.
        let topology = Topology::new(&config, consumers_of(spec))?;
        let existing = topology
            .existing()
            .await
            .map_err(|e| cannot_reach("Kafka", endpoint, e))?;
        if spec.fresh {
            // The workload's names belong to this run: its topics and groups start empty, so
            // that no record or offset of an earlier, interrupted run reaches this one.
            let ours: Vec<String> = existing
                .into_keys()
                .filter(|t| t.starts_with(&format!("{}.", config.prefix)))
                .collect();
            let mut groups = Vec::new();
            for c in &spec.workload.consumers {
                let names = ConsumerTopics::new(&config.prefix, &c.name);
                groups.push(format!("{}.reader", names.deliveries));
                groups.push(names.parking_group);
                groups.push(names.group);
            }
            let admin = admin(&config)?;
            delete_groups(&admin, &groups).await?;
            delete_topics(&admin, &ours).await?;
            topology.apply().await?;
        }
        Ok(Arc::new(KafkaTransport::new(config)?))
    }

    async fn topology(
        &self,
        endpoint: &Endpoint,
        spec: &TransportSpec,
    ) -> Result<Option<Box<dyn TopologyPlan>>> {
        let config = config_of(endpoint, spec)?;
        Ok(Some(Box::new(Planned(Topology::new(
            &config,
            consumers_of(spec),
        )?))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use postroom_core::driver::{TopologyFile, Workload};

    fn spec() -> TransportSpec {
        TransportSpec::of(Workload::new("shop", "5s".parse().unwrap()).consumer("c", &["a.b"]))
    }

    #[test]
    fn the_url_gives_brokers_topic_settings_and_the_workload() {
        let e = Endpoint::broker("kafka://k1:9093?brokers=k2:9092,k3:9092&partitions=4").unwrap();
        let c = config_of(&e, &spec()).unwrap();
        assert_eq!(c.brokers, "k1:9093,k2:9092,k3:9092");
        assert_eq!((c.partitions, c.replication), (4, 1));
        assert_eq!(c.prefix, "shop");
    }

    #[test]
    fn credentials_in_the_url_are_used_or_refused_never_dropped() {
        let e = Endpoint::broker("kafka://app:S3CRET-pw@k?sasl_mechanism=PLAIN").unwrap();
        let c = config_of(&e, &spec()).unwrap();
        assert_eq!(c.security.sasl.unwrap().username, "app");
        let e = Endpoint::broker("kafka://app@k").unwrap();
        let err = config_of(&e, &spec()).unwrap_err();
        assert!(err.message().contains("POSTROOM_BROKER_PASSWORD"), "{err}");
        let e = Endpoint::broker("kafka://app:S3CRET-pw@k").unwrap();
        let err = config_of(&e, &spec()).unwrap_err();
        assert!(!err.to_string().contains("S3CRET"), "{err}");
    }

    #[test]
    fn a_topology_file_gives_kafka_its_neutral_keys_and_nothing_else() {
        let k = Endpoint::broker("kafka://127.0.0.1").unwrap();
        let of = |text: &str| {
            config_of(
                &k,
                &TransportSpec::from_file(TopologyFile::parse(text).unwrap()),
            )
        };
        let c = of("prefix = \"shop\"\nladder = \"5s,30s\"\n[[consumers]]\nname = \"c\"\nbindings = [\"a.*\"]\n")
            .unwrap();
        assert_eq!(
            (c.prefix.as_str(), c.ladder.to_string()),
            ("shop", "5s,30s".into())
        );
        for (text, key) in [
            ("prefix = \"shop\"\nexchange = \"orders\"\n", "`exchange`"),
            ("laddr = \"5s\"\n", "`laddr`"),
            (
                "[[consumers]]\nname = \"c\"\npartitions = 4\n",
                "`consumers.partitions`",
            ),
        ] {
            let e = of(text).unwrap_err();
            assert!(e.message().contains(key), "{text}: {e}");
            assert!(e.message().contains("[kafka] table"), "{e}");
        }
    }
}
