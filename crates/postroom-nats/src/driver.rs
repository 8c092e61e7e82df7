//! NATS JetStream (`nats://`): the workload's streams and durables, planned and applied over
//! the JetStream API, and the transport over one connection.
//!
//! A topology file's neutral keys (`prefix`, `ladder`, `[[consumers]] name, bindings`) come
//! from the workload; every other key is one of postroom-nats's `NatsConfig` (`ack_wait`,
//! `max_deliver`, `max_ack_pending`, `backoff`, `max_delay`, `duplicate_window`, `storage`,
//! …, and a consumer's `partitions`). A key neither knows is refused by name.
//!
//! `tls://` (or `?tls=required`), `cacertfile`, `certfile`, `keyfile`, `password_file`,
//! `token_file`, `nkey_file` and `creds_file` secure the connection, in the URL's query or in
//! the file's `[nats]` table (`postroom_nats::security::settings`).

use crate::security::NatsTarget;
use crate::security::settings::{FileSettings, take_file_settings};
use crate::topology::reset::delete_workload;
use crate::{NatsConfig, NatsConnection, NatsTransport, Topology};
use postroom_core::driver::Endpoint;
use postroom_core::driver::TransportSpec;
use postroom_core::driver::{
    Driver, Planned, TopologyPlan, TransportDriver, cannot_reach, with_workload_consumers,
};
use postroom_core::{Error, Result};
use postroom_core::{Transport, async_trait};
use std::sync::Arc;

/// Opens NATS JetStream transports.
#[derive(Clone, Copy, Debug, Default)]
pub struct NatsDriver;

/// The NATS configuration of `spec`: its workload, the NATS keys of its topology file, and
/// what the workload implies (a ladder longer than `max_delay` raises it, a ladder with more
/// stages than `max_deliver` allows raises that, `spec.redelivery_after` is the `ack_wait`), each only
/// where the file does not set the key itself.
pub fn config_of(spec: &TransportSpec) -> Result<NatsConfig> {
    let w = &spec.workload;
    let (mut config, explicit) = match &spec.topology_text {
        Some(text) => from_text(text, spec)?,
        None => {
            let c = with_workload_consumers(NatsConfig::new(&w.prefix), spec, |c, name, routes| {
                c.with_consumer(name, routes)
            });
            (c, Vec::new())
        }
    };
    let set = |key: &str| explicit.iter().any(|k| k == key);
    if let Some(lease) = spec.redelivery_after
        && !set("ack_wait")
        && config.backoff.is_empty()
    {
        config.ack_wait = lease;
    }
    if let Some(ladder) = &w.ladder {
        let longest = ladder.delays().iter().copied().max().unwrap_or_default();
        if longest > config.max_delay {
            if set("max_delay") {
                return Err(Error::config(format!(
                    "topology file: the ladder's longest stage ({}) is longer than max_delay ({}): raise max_delay or shorten the ladder",
                    postroom_core::retry::ladder::format_duration(longest),
                    postroom_core::retry::ladder::format_duration(config.max_delay),
                )));
            }
            config.max_delay = longest;
        }
        // The first delivery, one per stage and one to spare.
        let needed = u32::try_from(ladder.len())
            .unwrap_or(u32::MAX)
            .saturating_add(2);
        if config.max_deliver < needed && !set("max_deliver") {
            config.max_deliver = needed;
        }
    }
    config
        .validate()
        .map_err(|e| Error::config(format!("NATS topology: {}", e.message())))?;
    Ok(config)
}

/// The configuration of a topology file's text, and the NATS keys it set explicitly.
fn from_text(text: &str, spec: &TransportSpec) -> Result<(NatsConfig, Vec<String>)> {
    let bad = |e: &dyn std::fmt::Display| Error::config(format!("topology file (NATS): {e}"));
    let mut table: toml::Table = toml::from_str(text).map_err(|e| bad(&e))?;
    table.remove("ladder");
    take_file_settings(&mut table)?;
    let explicit: Vec<String> = table.keys().cloned().collect();
    table.insert(
        "prefix".into(),
        toml::Value::String(spec.workload.prefix.clone()),
    );
    if let Some(consumers) = table.get_mut("consumers") {
        let Some(list) = consumers.as_array_mut() else {
            return Err(bad(&"consumers must be a list of [[consumers]] tables"));
        };
        for c in list {
            let Some(c) = c.as_table_mut() else {
                return Err(bad(&"each [[consumers]] entry must be a table"));
            };
            if c.contains_key("routes") {
                return Err(bad(
                    &"unknown field `routes` in [[consumers]]: a consumer's topics are `bindings`",
                ));
            }
            let bindings = c
                .remove("bindings")
                .unwrap_or(toml::Value::Array(Vec::new()));
            c.insert("routes".into(), bindings);
        }
    }
    let config: NatsConfig = toml::Value::Table(table).try_into().map_err(|e| bad(&e))?;
    Ok((config, explicit))
}

/// Where and how to connect: the broker URL's servers and settings with the topology file's
/// `[nats]` table. Errors name the broker by its redacted URL, never a secret.
pub fn target_of(endpoint: &Endpoint, spec: &TransportSpec) -> Result<NatsTarget> {
    let file = match &spec.topology_text {
        Some(text) => {
            let mut table: toml::Table = toml::from_str(text)
                .map_err(|e| Error::config(format!("topology file (NATS): {e}")))?;
            take_file_settings(&mut table)?
        }
        None => FileSettings::default(),
    };
    NatsTarget::from_url_and_file(endpoint.expose(), &file).map_err(|e| {
        Error::config(format!("broker {}: {}", endpoint.redacted(), e.message()))
            .scrubbed(|t| endpoint.scrub(t))
    })
}

async fn connect(endpoint: &Endpoint, spec: &TransportSpec) -> Result<NatsConnection> {
    let target = target_of(endpoint, spec)?;
    NatsConnection::connect_to(&target, "postroom")
        .await
        .map_err(|e| cannot_reach("NATS", endpoint, e))
}

impl Driver for NatsDriver {
    fn name(&self) -> &'static str {
        "nats"
    }

    fn schemes(&self) -> &'static [&'static str] {
        &["nats", "tls"]
    }

    fn url_help(&self) -> &'static str {
        "nats://host:4222 or tls://host:4222 (NATS JetStream; ?cacertfile=ca.pem for its CA, credentials in password_file, token_file, nkey_file or creds_file)"
    }
}

#[async_trait]
impl TransportDriver for NatsDriver {
    async fn open(&self, endpoint: &Endpoint, spec: &TransportSpec) -> Result<Arc<dyn Transport>> {
        let config = config_of(spec)?;
        let conn = connect(endpoint, spec).await?;
        if spec.fresh {
            // The workload's streams belong to this run: start from an empty server state, so
            // that no copy of an earlier, interrupted run is delivered into this one.
            delete_workload(&conn, &config.prefix).await?;
            Topology::new(conn.clone(), config.clone())?.apply().await?;
        }
        Ok(Arc::new(NatsTransport::new(conn, config)?))
    }

    async fn topology(
        &self,
        endpoint: &Endpoint,
        spec: &TransportSpec,
    ) -> Result<Option<Box<dyn TopologyPlan>>> {
        let config = config_of(spec)?;
        let conn = connect(endpoint, spec).await?;
        Ok(Some(Box::new(Planned(Topology::new(conn, config)?))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use postroom_core::driver::{TopologyFile, Workload};
    use std::time::Duration;

    fn file(text: &str) -> Result<NatsConfig> {
        config_of(&TransportSpec::from_file(TopologyFile::parse(text)?))
    }

    #[test]
    fn a_nats_url_with_a_path_or_unknown_settings_is_refused() {
        let spec = TransportSpec::of(Workload::new("shop", "5s".parse().unwrap()));
        let target = |url: &str| target_of(&Endpoint::broker(url).unwrap(), &spec);
        target("nats://127.0.0.1:4222").unwrap();
        target("nats://u:p@127.0.0.1:4222/").unwrap();
        let e = target("nats://u:s3cr3t@h:4222?max_deliver=3").unwrap_err();
        assert!(e.message().contains("\"max_deliver\""), "{e}");
        assert!(!e.message().contains("s3cr3t"), "{e}");
        let e = target("nats://h:4222/s").unwrap_err();
        assert!(e.message().contains("no path"), "{e}");
        // A token written as the user (the NATS client's own form) is refused, never shown.
        let e = target("nats://S3CRET-token@h:4222").unwrap_err();
        assert!(e.message().contains("no password"), "{e}");
        assert!(!e.to_string().contains("S3CRET"), "{e}");
    }

    #[test]
    fn the_nats_table_of_a_topology_file_secures_the_connection() {
        let text = "prefix = \"shop\"\n[nats]\ntls = \"required\"\n";
        let spec = TransportSpec::from_file(TopologyFile::parse(text).unwrap());
        let t = target_of(&Endpoint::broker("nats://h").unwrap(), &spec).unwrap();
        assert!(t.security.tls);
        assert_eq!(t.servers, ["tls://h:4222"]);
        assert_eq!(
            file(text).unwrap().prefix,
            "shop",
            "the table is not a topology key"
        );
        let e = file("prefix = \"shop\"\n[nats]\nack_wait = \"5s\"\n").unwrap_err();
        assert!(e.message().contains("unknown field `ack_wait`"), "{e}");
    }

    #[test]
    fn neutral_and_nats_keys_of_a_topology_file() {
        let c = file(
            "prefix = \"shop\"\nladder = \"5s,30s,5m\"\nack_wait = \"10s\"\nmax_ack_pending = 500\n\
             [[consumers]]\nname = \"inventory\"\nbindings = [\"order.created\", \"order.#\"]\npartitions = 4\n",
        )
        .unwrap();
        assert_eq!(c.prefix, "shop");
        assert_eq!(c.ack_wait, Duration::from_secs(10));
        assert_eq!(c.max_ack_pending, 500);
        let inv = c.consumer("inventory").unwrap();
        assert_eq!(inv.routes, ["order.created", "order.#"]);
        assert_eq!(inv.partitions, 4);
    }

    #[test]
    fn a_key_nats_does_not_know_is_refused_by_name() {
        let e = file("prefix = \"shop\"\nexchange = \"orders\"\n").unwrap_err();
        assert!(e.message().contains("exchange"), "{e}");
        let e =
            file("prefix = \"shop\"\n[[consumers]]\nname = \"a\"\nqueue = \"x\"\n").unwrap_err();
        assert!(e.message().contains("queue"), "{e}");
        let e = file("prefix = \"a.b\"\n").unwrap_err();
        assert!(e.message().contains("NATS prefix"), "{e}");
        let e = file("prefix = \"shop\"\nconsumers = 3\n").unwrap_err();
        assert!(e.message().contains("consumers"), "{e}");
    }

    #[test]
    fn the_workload_implies_delay_deliveries_and_lease() {
        let ladder = "1s,2s,4s,8s,16s,32s,64s,128s,256s,2h".parse().unwrap();
        let mut spec = TransportSpec::of(
            Workload::new("demo", ladder).consumer("inventory", &["order.created"]),
        );
        spec.redelivery_after = Some(Duration::from_secs(2));
        let c = config_of(&spec).unwrap();
        assert_eq!(
            c.max_delay,
            Duration::from_secs(7200),
            "the ladder's longest stage"
        );
        assert_eq!(
            c.max_deliver, 12,
            "first delivery, ten stages, one to spare"
        );
        assert_eq!(c.ack_wait, Duration::from_secs(2));
        assert_eq!(
            c.consumer("inventory").unwrap().routes,
            ["order.created".to_string()]
        );
        // What a file sets is kept, and a contradiction is refused.
        let c =
            file("prefix = \"p\"\nladder = \"1s\"\nmax_deliver = 3\nack_wait = \"9s\"\n").unwrap();
        assert_eq!((c.max_deliver, c.ack_wait), (3, Duration::from_secs(9)));
        let e = file("prefix = \"p\"\nladder = \"2h\"\nmax_delay = \"1h\"\n").unwrap_err();
        assert!(e.message().contains("max_delay"), "{e}");
    }
}
