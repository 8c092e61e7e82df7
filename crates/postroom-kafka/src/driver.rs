//! Kafka (`kafka://host:port`): the workload's topics (routes, retry stages, redrive, parking,
//! delivery ledger) created through the admin API, and the transport over one idempotent
//! producer and a consumer group per consumer.
//!
//! The URL names one bootstrap broker; `?brokers=h2:9092,h3:9092` adds more, `?partitions=N`
//! and `?replication=N` set how created topics are made (defaults 1 and 1).

use crate::topology::{Consumers, admin, delete_groups, delete_topics};
use crate::{ConsumerTopics, KafkaConfig, KafkaTransport, Topology};
use postroom_core::driver::Endpoint;
use postroom_core::driver::{
    Driver, Planned, TopologyPlan, TransportDriver, cannot_reach, with_workload_consumers,
};
use postroom_core::driver::{TopologyFile, TransportSpec};
use postroom_core::{Error, Result};
use postroom_core::{Transport, async_trait};
use std::sync::Arc;

/// Opens Kafka transports.
#[derive(Clone, Copy, Debug, Default)]
pub struct KafkaDriver;

/// The Kafka settings a `kafka://` URL and a workload give.
pub fn config_of(broker: &Endpoint, spec: &TransportSpec) -> Result<KafkaConfig> {
    let url = url::Url::parse(broker.expose())
        .map_err(|e| Error::config(format!("broker {}: {e}", broker.redacted())))?;
    let host = url
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| Error::config(format!("broker {}: no host", broker.redacted())))?;
    if !matches!(url.path(), "" | "/") {
        return Err(Error::config(format!(
            "broker {}: a Kafka URL has no path (topic names come from the workload)",
            broker.redacted()
        )));
    }
    let mut brokers = vec![format!("{host}:{}", url.port().unwrap_or(9092))];
    if let Some(text) = &spec.topology_text {
        TopologyFile::only_neutral_keys(
            text,
            "Kafka",
            "topic settings come from the broker URL: ?partitions=N&replication=N",
        )?;
    }
    let w = &spec.workload;
    let mut config = KafkaConfig::new(String::new()).prefix(w.prefix.clone());
    for (key, value) in url.query_pairs() {
        let number = || {
            value
                .parse::<i32>()
                .ok()
                .filter(|n| *n >= 1)
                .ok_or_else(|| {
                    Error::config(format!(
                        "broker {}: {key} must be a whole number from 1 to {}, not {value:?}",
                        broker.redacted(),
                        i32::MAX
                    ))
                })
        };
        match key.as_ref() {
            "brokers" => brokers.extend(
                value
                    .split(',')
                    .filter(|b| !b.is_empty())
                    .map(str::to_string),
            ),
            "partitions" => config.partitions = number()?,
            "replication" => config.replication = number()?,
            other => {
                return Err(Error::config(format!(
                    "broker {}: unknown setting {other:?} (known: brokers, partitions, replication)",
                    broker.redacted()
                )));
            }
        }
    }
    config.brokers = brokers.join(",");
    if let Some(ladder) = &w.ladder {
        config.ladder = ladder.clone();
    }
    config.validate()?;
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
        &["kafka"]
    }

    fn url_help(&self) -> &'static str {
        "kafka://host:9092 (Kafka)"
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
    fn the_url_gives_brokers_and_topic_settings() {
        let e = Endpoint::broker("kafka://k1:9093?brokers=k2:9092,k3:9092&partitions=4").unwrap();
        let c = config_of(&e, &spec()).unwrap();
        assert_eq!(c.brokers, "k1:9093,k2:9092,k3:9092");
        assert_eq!((c.partitions, c.replication), (4, 1));
        assert_eq!(c.prefix, "shop");
        let plain = config_of(&Endpoint::broker("kafka://127.0.0.1").unwrap(), &spec()).unwrap();
        assert_eq!(plain.brokers, "127.0.0.1:9092");
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
            assert!(e.message().contains("?partitions=N"), "{e}");
        }
    }

    #[test]
    fn bad_settings_are_clear_errors() {
        for (url, needle) in [
            ("kafka://k?partitions=0", "partitions must be"),
            ("kafka://k?partitions=x", "partitions must be"),
            ("kafka://k?linger=5", "unknown setting"),
            ("kafka://k?partitions=2147483648", "from 1 to 2147483647"),
            ("kafka://k/topic", "no path"),
        ] {
            let e = config_of(&Endpoint::broker(url).unwrap(), &spec()).unwrap_err();
            assert!(e.message().contains(needle), "{url}: {e}");
        }
    }
}
