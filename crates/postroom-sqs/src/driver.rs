//! Amazon SQS (`sqs://`, `sqs+fifo://`): the workload's queues and DLQs, and the transport.
//!
//! The URL names where SQS is, never who you are: credentials come from the standard AWS
//! environment (`AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`, a profile, a role), and a URL
//! with a user or a password is refused.
//!
//! | URL | endpoint | region |
//! |---|---|---|
//! | `sqs://` | the AWS environment's (`AWS_ENDPOINT_URL_SQS`, `AWS_ENDPOINT_URL`, else AWS) | the environment's |
//! | `sqs://sqs.eu-west-1.amazonaws.com` | `https://` that host | the environment's |
//! | `sqs://127.0.0.1:5000?region=us-east-1` | `http://` on a loopback host | `us-east-1` |
//! | `sqs://host:4566?tls=false` | `http://host:4566` | the environment's |
//!
//! A host on this machine is reached over plain HTTP, any other over HTTPS, unless `tls=` says
//! otherwise. `sqs+fifo://` makes the queues FIFO (order within an aggregate's message group);
//! so does `fifo = true` in a topology file. Everything else (visibility timeout, retention,
//! `max_receive_count`) comes from the topology file's SQS keys (see
//! [`crate::TopologyConfig`]); a workload without a file gets the defaults, with its
//! consumers and their routes. Every process of a workload derives the routes (which
//! consumer's queue a topic goes to) from that same workload, so a relay in one process
//! routes to the queues a consumer in another reads.

use crate::{SqsTransport, Topology, TopologyConfig};
use postroom_core::driver::Endpoint;
use postroom_core::driver::TransportSpec;
use postroom_core::driver::{
    Driver, Planned, TopologyPlan, TransportDriver, cannot_reach, with_workload_consumers,
};
use postroom_core::{Error, Result};
use postroom_core::{Transport, async_trait};
use std::sync::Arc;
use std::time::Duration;

/// Opens SQS transports.
#[derive(Clone, Copy, Debug, Default)]
pub struct SqsDriver;

/// Where an `sqs://` URL points.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqsUrl {
    /// The endpoint (`None`: the AWS environment's).
    pub endpoint: Option<String>,
    /// The region (`None`: the AWS environment's).
    pub region: Option<String>,
    /// FIFO queues.
    pub fifo: bool,
}

fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare == "localhost"
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Parse an `sqs://` or `sqs+fifo://` URL.
pub fn parse_url(broker: &Endpoint) -> Result<SqsUrl> {
    let fifo = match broker.scheme() {
        "sqs" => false,
        "sqs+fifo" => true,
        other => {
            return Err(Error::config(format!(
                "{} is not an SQS URL (scheme {other})",
                broker.redacted()
            )));
        }
    };
    let url = url::Url::parse(broker.expose())
        .map_err(|e| Error::config(format!("bad SQS URL {}: {e}", broker.redacted())))?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(Error::config(format!(
            "{}: an SQS URL takes no user or password; credentials come from the AWS \
             environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or a role)",
            broker.redacted()
        )));
    }
    if !matches!(url.path(), "" | "/") {
        return Err(Error::config(format!(
            "{}: an SQS URL has no path (queue names come from the workload)",
            broker.redacted()
        )));
    }
    let mut region = None;
    let mut tls = None;
    for (k, v) in url.query_pairs() {
        match k.as_ref() {
            "region" if v.is_empty() => {
                return Err(Error::config(format!(
                    "{}: region needs a value (us-east-1, say), or leave it out to take the AWS environment's",
                    broker.redacted()
                )));
            }
            "region" => region = Some(v.into_owned()),
            "tls" => {
                tls = Some(match v.as_ref() {
                    "true" | "1" | "on" => true,
                    "false" | "0" | "off" => false,
                    _ => {
                        return Err(Error::config(format!(
                            "{}: tls must be true or false",
                            broker.redacted()
                        )));
                    }
                });
            }
            other => {
                return Err(Error::config(format!(
                    "{}: unknown SQS URL parameter {other:?} (known: region, tls)",
                    broker.redacted()
                )));
            }
        }
    }
    let endpoint = match url.host_str().filter(|h| !h.is_empty()) {
        None => {
            if tls.is_some() {
                return Err(Error::config(format!(
                    "{}: tls= needs a host (without one the AWS environment names the endpoint)",
                    broker.redacted()
                )));
            }
            None
        }
        Some(host) => {
            let scheme = if tls.unwrap_or(!is_loopback(host)) {
                "https"
            } else {
                "http"
            };
            let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
            Some(format!("{scheme}://{host}{port}"))
        }
    };
    Ok(SqsUrl {
        endpoint,
        region,
        fifo,
    })
}

/// `text` without the keys every transport shares and SQS does not read (`ladder`: the
/// consumers' retry delays, kept by visibility timeouts).
fn sqs_keys(text: &str) -> Result<String> {
    let mut table: toml::Table =
        toml::from_str(text).map_err(|e| Error::config(format!("topology file: {e}")))?;
    table.remove("ladder");
    toml::to_string(&table).map_err(|e| Error::config(format!("topology file: {e}")))
}

/// The SQS topology of `spec` on `url`.
pub fn config_of(url: &SqsUrl, spec: &TransportSpec) -> Result<TopologyConfig> {
    let mut config = match &spec.topology_text {
        Some(text) => TopologyConfig::from_toml(&sqs_keys(text)?)
            .map_err(|e| Error::config(format!("topology file (SQS): {}", e.message())))?,
        None => {
            let w = &spec.workload;
            let config = TopologyConfig {
                prefix: w.prefix.clone(),
                ..TopologyConfig::default()
            };
            with_workload_consumers(config, spec, |c, name, routes| {
                c.with_consumer(name, routes)
            })
        }
    };
    if url.fifo {
        config.fifo = true;
    }
    if let Some(after) = spec.redelivery_after {
        let whole = after.as_secs() + u64::from(after.subsec_nanos() > 0);
        config.visibility_timeout = Duration::from_secs(whole.max(1));
    }
    config.validate()?;
    Ok(config)
}

async fn prepare(endpoint: &Endpoint, spec: &TransportSpec) -> Result<Topology> {
    let url = parse_url(endpoint)?;
    let config = config_of(&url, spec)?;
    let client = crate::client::connect_to(url.endpoint.as_deref(), url.region.as_deref())
        .await
        .map_err(|e| cannot_reach("SQS", endpoint, e))?;
    Ok(Topology::new(client, config)?)
}

impl Driver for SqsDriver {
    fn name(&self) -> &'static str {
        "sqs"
    }

    fn schemes(&self) -> &'static [&'static str] {
        &["sqs", "sqs+fifo"]
    }

    fn url_help(&self) -> &'static str {
        "sqs://host:port?region=R or sqs+fifo:// (Amazon SQS; sqs://aws?region=R for AWS itself)"
    }
}

#[async_trait]
impl TransportDriver for SqsDriver {
    async fn open(&self, endpoint: &Endpoint, spec: &TransportSpec) -> Result<Arc<dyn Transport>> {
        let topology = prepare(endpoint, spec).await?;
        if spec.fresh {
            // The workload's names belong to this run: its queues as the topology says, and
            // empty, so that no message of an earlier, interrupted run reaches this one.
            topology
                .apply()
                .await
                .map_err(|e| cannot_reach("SQS", endpoint, e))?;
            topology.purge().await?;
        }
        let mut transport =
            SqsTransport::connect(topology.client().clone(), topology.config().clone())
                .await
                .map_err(|e| cannot_reach("SQS", endpoint, e))?;
        if let Some(log) = &spec.last_errors {
            transport = transport.with_last_errors(log.clone());
        }
        Ok(Arc::new(transport))
    }

    async fn topology(
        &self,
        endpoint: &Endpoint,
        spec: &TransportSpec,
    ) -> Result<Option<Box<dyn TopologyPlan>>> {
        Ok(Some(Box::new(Planned(prepare(endpoint, spec).await?))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use postroom_core::driver::{TopologyFile, Workload};

    fn parsed(url: &str) -> Result<SqsUrl> {
        parse_url(&Endpoint::broker(url).unwrap())
    }

    #[test]
    fn urls_name_the_endpoint_and_region_never_credentials() {
        let u = parsed("sqs://127.0.0.1:5000?region=us-east-1").unwrap();
        assert_eq!(u.endpoint.as_deref(), Some("http://127.0.0.1:5000"));
        assert_eq!(u.region.as_deref(), Some("us-east-1"));
        assert!(!u.fifo);
        let u = parsed("sqs+fifo://sqs.eu-west-1.amazonaws.com").unwrap();
        assert_eq!(
            u.endpoint.as_deref(),
            Some("https://sqs.eu-west-1.amazonaws.com")
        );
        assert!(u.fifo && u.region.is_none());
        assert_eq!(
            parsed("sqs://localstack:4566?tls=false")
                .unwrap()
                .endpoint
                .as_deref(),
            Some("http://localstack:4566")
        );
        assert_eq!(
            parsed("sqs://[::1]:5000?tls=true")
                .unwrap()
                .endpoint
                .as_deref(),
            Some("https://[::1]:5000")
        );
        assert_eq!(parsed("sqs://").unwrap().endpoint, None);
        let e = parsed("sqs://AKIAXX:s3cr3tkey@127.0.0.1:5000").unwrap_err();
        assert!(e.message().contains("no user or password"), "{e}");
        assert!(!e.message().contains("s3cr3tkey"), "{e}");
        assert!(parsed("sqs://h/queue").is_err());
        assert!(parsed("sqs://h?colour=red").is_err());
        assert!(parsed("sqs://h?tls=maybe").is_err());
        let e = parsed("sqs://h?region=").unwrap_err();
        assert!(e.message().contains("region needs a value"), "{e}");
    }

    #[test]
    fn the_topology_comes_from_the_workload_or_the_file() {
        let url = parsed("sqs+fifo://127.0.0.1:5000").unwrap();
        let w = Workload::new("shop", postroom_core::RetryLadder::default())
            .consumer("inventory", &["order.created"])
            .consumer("orders", &["inventory.#"]);
        let mut spec = TransportSpec::of(w);
        spec.redelivery_after = Some(Duration::from_millis(1500));
        let c = config_of(&url, &spec).unwrap();
        assert!(c.fifo);
        assert_eq!(c.prefix, "shop");
        assert_eq!(c.visibility_timeout, Duration::from_secs(2));
        assert_eq!(c.consumers.len(), 2);
        assert_eq!(c.consumers[1].bindings, ["inventory.#"]);

        let file = TopologyFile::parse(
            "prefix = \"shop\"\nladder = \"5s,30s\"\nvisibility_timeout = \"45s\"\nmax_receive_count = 4\n\
             [[consumers]]\nname = \"inventory\"\nbindings = [\"order.*\"]\n",
        )
        .unwrap();
        let plain = parsed("sqs://127.0.0.1:5000").unwrap();
        let c = config_of(&plain, &TransportSpec::from_file(file)).unwrap();
        assert_eq!(c.visibility_timeout, Duration::from_secs(45));
        assert_eq!(c.max_receive_count, 4);
        assert!(!c.fifo);
        let rabbit = TopologyFile::parse("prefix = \"shop\"\nexchange = \"orders\"\n").unwrap();
        let e = config_of(&plain, &TransportSpec::from_file(rabbit)).unwrap_err();
        assert!(e.message().contains("exchange"), "{e}");
    }
}
