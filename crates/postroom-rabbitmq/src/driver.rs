//! RabbitMQ (`amqp://`, `amqps://`): the workload's topology through the management API, and
//! the transport over one broker link.
//!
//! The management API is `POSTROOM_BROKER_API`, or the broker's host with the broker's user
//! and password: `https://…:15671` for an `amqps://` broker (the password never crosses the
//! network in the clear when the broker link does not), `http://…:15672` for `amqp://`. The
//! broker URL's `cacertfile` is trusted for the API's certificate too, unless the API's URL
//! names a CA file of its own.

use crate::tls::ca_file_of;
use crate::{Broker, ManagementApi, RabbitTransport, Topology, TopologyConfig};
use postroom_core::driver::Endpoint;
use postroom_core::driver::TransportSpec;
use postroom_core::driver::{
    Driver, Planned, TopologyPlan, TransportDriver, cannot_reach, with_workload_consumers,
};
use postroom_core::{Error, Result};
use postroom_core::{Transport, async_trait};
use std::sync::Arc;

/// The variable that names the management API explicitly.
pub const BROKER_API_ENV: &str = "POSTROOM_BROKER_API";

/// Opens RabbitMQ transports.
#[derive(Clone, Copy, Debug, Default)]
pub struct RabbitDriver;

/// The management API of the broker at `broker`: [`BROKER_API_ENV`] when set, else derived
/// from the broker URL. Refuses plain http for a TLS broker.
pub fn management_url(broker: &Endpoint) -> Result<Endpoint> {
    management_url_from(broker, std::env::var(BROKER_API_ENV).ok().as_deref())
}

/// [`management_url`] with the variable's value given.
pub fn management_url_from(broker: &Endpoint, explicit: Option<&str>) -> Result<Endpoint> {
    let tls = broker.scheme() == "amqps";
    if let Some(explicit) = explicit {
        let api = Endpoint::broker(explicit).map_err(|e| e.context(BROKER_API_ENV))?;
        if tls && api.scheme() != "https" {
            return Err(Error::config(format!(
                "{BROKER_API_ENV} is {} but the broker is amqps://: the management API must be \
                 https, or its password crosses the network in the clear",
                api.redacted()
            )));
        }
        return Ok(api);
    }
    let host = broker
        .host()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "127.0.0.1".into());
    let (scheme, port) = if tls {
        ("https", 15671)
    } else {
        ("http", 15672)
    };
    let mut api = url::Url::parse(&format!("{scheme}://{host}:{port}"))
        .map_err(|e| Error::config(format!("management API of {broker}: {e}")))?;
    let (user, password) = match broker.user() {
        Some(u) => (u, broker.password().unwrap_or_default()),
        None => ("guest".into(), "guest".into()),
    };
    let _ = api.set_username(&user);
    let _ = api.set_password(
        Some(&password)
            .filter(|p| !p.is_empty())
            .map(String::as_str),
    );
    Endpoint::broker(api.as_str())
}

/// The virtual host a broker URL names: its path, decoded (`/%2f` and no path are `/`).
#[must_use]
pub fn vhost_of(broker: &Endpoint) -> String {
    let path = url::Url::parse(broker.expose())
        .map(|u| u.path().trim_start_matches('/').to_string())
        .unwrap_or_default();
    let decoded = postroom_core::driver::endpoint::percent_decode(&path);
    if decoded.is_empty() {
        "/".into()
    } else {
        decoded
    }
}

/// The topology configuration of `spec` on `broker`.
pub fn config_of(broker: &Endpoint, spec: &TransportSpec) -> Result<TopologyConfig> {
    if let Some(text) = &spec.topology_text {
        return TopologyConfig::from_toml(text)
            .map_err(|e| Error::config(format!("topology file (RabbitMQ): {}", e.message())));
    }
    let w = &spec.workload;
    let mut config = TopologyConfig {
        prefix: w.prefix.clone(),
        exchange: format!("{}.events", w.prefix),
        vhost: vhost_of(broker),
        ..TopologyConfig::default()
    };
    if let Some(ladder) = &w.ladder {
        config.ladder = ladder.clone();
    }
    Ok(with_workload_consumers(config, spec, |c, name, routes| {
        c.with_consumer(name, routes)
    }))
}

/// The management API of `broker` for `vhost` ([`management_url_from`] with `explicit`),
/// trusting the broker URL's `cacertfile` too when the API's URL names none: one CA file
/// serves both links of a TLS broker.
pub fn management_api(
    broker: &Endpoint,
    explicit: Option<&str>,
    vhost: &str,
) -> Result<ManagementApi> {
    let url = management_url_from(broker, explicit)?;
    let named = |e: Error| e.context(format_args!("management API {}", url.redacted()));
    let api = ManagementApi::new(url.expose(), vhost).map_err(named)?;
    let api_ca = ca_file_of(url.expose()).map_err(named)?;
    match ca_file_of(broker.expose())? {
        Some(ca) if api_ca.is_none() => api.with_ca_file(&ca).map_err(named),
        _ => Ok(api),
    }
}

/// The settings an AMQP URL's query may carry: the client's numbers, its login mechanism, and
/// the CA file of a TLS broker.
const AMQP_NUMBERS: [&str; 4] = [
    "heartbeat",
    "channel_max",
    "frame_max",
    "connection_timeout",
];

/// Refuse an AMQP URL setting the client would drop silently (a misspelt one) or a number it
/// cannot read, naming it.
pub fn check_url(broker: &Endpoint) -> Result {
    let url = url::Url::parse(broker.expose())
        .map_err(|e| Error::config(format!("broker {}: {e}", broker.redacted())))?;
    for (key, value) in url.query_pairs() {
        let key = key.as_ref();
        if AMQP_NUMBERS.contains(&key) {
            if value.parse::<u32>().is_err() {
                return Err(Error::config(format!(
                    "broker {}: {key} must be a whole number, not {value:?}",
                    broker.redacted()
                )));
            }
        } else if key != "auth_mechanism" && key != crate::tls::CA_FILE_PARAM {
            return Err(Error::config(format!(
                "broker {}: unknown setting {key:?} (known: {}, auth_mechanism, {})",
                broker.redacted(),
                AMQP_NUMBERS.join(", "),
                crate::tls::CA_FILE_PARAM
            )));
        }
    }
    Ok(())
}

/// The topology configuration of `spec` and the management API that applies it.
fn prepare(broker: &Endpoint, spec: &TransportSpec) -> Result<(TopologyConfig, ManagementApi)> {
    check_url(broker)?;
    let config = config_of(broker, spec)?;
    let explicit = std::env::var(BROKER_API_ENV).ok();
    let api = management_api(broker, explicit.as_deref(), &config.vhost)?;
    Ok((config, api))
}

impl Driver for RabbitDriver {
    fn name(&self) -> &'static str {
        "rabbitmq"
    }

    fn schemes(&self) -> &'static [&'static str] {
        &["amqp", "amqps"]
    }

    fn url_help(&self) -> &'static str {
        "amqp://user@host:5672/%2f or amqps:// (RabbitMQ; topology through the management plugin)"
    }
}

#[async_trait]
impl TransportDriver for RabbitDriver {
    async fn open(&self, endpoint: &Endpoint, spec: &TransportSpec) -> Result<Arc<dyn Transport>> {
        let (config, api) = prepare(endpoint, spec)?;
        let broker = Broker::connect(endpoint.expose())
            .await
            .map_err(|e| cannot_reach("RabbitMQ", endpoint, e))?;
        if spec.fresh {
            // The workload's names belong to this run: start from an empty broker state, so
            // that no message of an earlier, interrupted run is delivered into this one.
            let topology = Topology::new(config.clone(), api.clone())?;
            topology.delete().await?;
            topology.apply().await?;
        }
        Ok(Arc::new(RabbitTransport::new(broker, config, Some(api))?))
    }

    async fn topology(
        &self,
        endpoint: &Endpoint,
        spec: &TransportSpec,
    ) -> Result<Option<Box<dyn TopologyPlan>>> {
        let (config, api) = prepare(endpoint, spec)?;
        Ok(Some(Box::new(Planned(Topology::new(config, api)?))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_amqp_url_setting_the_client_would_drop_is_refused() {
        let ok = "amqps://u:p@mq:5671/%2f?heartbeat=10&connection_timeout=5000&auth_mechanism=plain&cacertfile=/ca.pem";
        check_url(&Endpoint::broker(ok).unwrap()).unwrap();
        let e = check_url(&Endpoint::broker("amqp://u:p@mq/%2f?hearbeat=10").unwrap()).unwrap_err();
        assert!(e.message().contains("\"hearbeat\""), "{e}");
        assert!(!e.message().contains(":p@"), "{e}");
        let e = check_url(&Endpoint::broker("amqp://mq/%2f?heartbeat=soon").unwrap()).unwrap_err();
        assert!(
            e.message().contains("heartbeat must be a whole number"),
            "{e}"
        );
    }

    fn api(broker: &str) -> String {
        management_url_from(&Endpoint::broker(broker).unwrap(), None)
            .unwrap()
            .expose()
            .to_string()
    }

    #[test]
    fn management_api_follows_the_broker() {
        assert_eq!(
            api("amqp://u:p@example:5672/%2f"),
            "http://u:p@example:15672/"
        );
        assert_eq!(
            api("amqp://127.0.0.1"),
            "http://guest:guest@127.0.0.1:15672/"
        );
        assert_eq!(
            api("amqps://u:p%40w@mq.example:5671/%2f"),
            "https://u:p%40w@mq.example:15671/"
        );
        let tls = Endpoint::broker("amqps://u:p@mq/%2f").unwrap();
        let e = management_url_from(&tls, Some("http://u:p@mq:15672")).unwrap_err();
        assert!(
            e.message().contains("must be https") && !e.message().contains(":p@"),
            "{e}"
        );
        let given = management_url_from(&tls, Some("https://u:p@mq:443")).unwrap();
        assert_eq!(given.expose(), "https://u:p@mq:443");
    }

    #[test]
    fn vhosts() {
        for (url, vhost) in [
            ("amqp://h/%2f", "/"),
            ("amqp://h", "/"),
            ("amqp://h/", "/"),
            ("amqp://h/shop", "shop"),
            ("amqp://h/a%2Fb", "a/b"),
        ] {
            assert_eq!(vhost_of(&Endpoint::broker(url).unwrap()), vhost, "{url}");
        }
    }
}
