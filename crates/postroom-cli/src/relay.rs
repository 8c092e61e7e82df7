//! `postroom relay`: a long-running outbox relay for services in any language, with
//! `/metrics`, `/healthz` and `/readyz`; SIGTERM drains the batch in hand.

use crate::config::ConfigFile;
use crate::daemon::{self, PipelineArgs};
use clap::Args;
use postroom_core::RelayConfig;
use postroom_ops::args::PasswordArgs;
use postroom_ops::limits::parse_limit;
use postroom_ops::time::parse_span;
use postroom_ops::{OpsError, OpsResult, Registry, TopologyFile, TransportSpec, UrlText};
use std::net::SocketAddr;
use std::sync::Arc;

/// `postroom relay`.
#[derive(Debug, Args)]
pub struct RelayArgs {
    #[allow(missing_docs)]
    #[command(flatten)]
    pub pipeline: PipelineArgs,
    /// Address of /metrics, /healthz and /readyz (port 0: a free one, printed).
    #[arg(
        long,
        env = "POSTROOM_RELAY_LISTEN",
        default_value = "127.0.0.1:9464",
        value_name = "ADDR"
    )]
    pub listen: SocketAddr,
    /// This relay's name on the rows it claims (default: relay-PID-RANDOM). Several relays
    /// may run at once; each needs its own name.
    #[arg(long)]
    pub relay_id: Option<String>,
    /// Rows claimed per batch.
    #[arg(long, default_value_t = 100, value_parser = parse_limit)]
    pub batch_size: usize,
    /// Lease on claimed rows: when a relay dies, another publishes its rows after this (e.g.
    /// 30s). Longer than a batch can take to be confirmed.
    #[arg(long, default_value = "30s", value_name = "SPAN")]
    pub lease: String,
    /// Published rows are deleted after this long (e.g. 24h).
    #[arg(long, default_value = "24h", value_name = "SPAN")]
    pub retention: String,
    /// Also publish every row to this broker (repeat for several; comma-separated in the
    /// environment), with the same message id: a row is marked published only when --broker
    /// and every one of these confirmed it. The list is read at start: to add or remove a
    /// broker, restart the relay with the new list (rows in hand are given back on SIGTERM).
    #[arg(
        long,
        env = "POSTROOM_RELAY_ALSO_PUBLISH_TO",
        hide_env_values = true,
        value_delimiter = ',',
        value_name = "URL"
    )]
    pub also_publish_to: Vec<UrlText>,
}

fn default_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("relay-{}-{:06x}", std::process::id(), nanos & 0xff_ffff)
}

/// Relay until SIGTERM or SIGINT, then drain and exit.
pub async fn run(a: RelayArgs, config: &ConfigFile, passwords: &PasswordArgs) -> OpsResult {
    let lease = parse_span(&a.lease)?;
    if lease.is_zero() {
        return Err(OpsError::usage("--lease must be longer than zero"));
    }
    let relay_config = RelayConfig {
        relay_id: a.relay_id.clone().unwrap_or_else(default_id),
        batch_size: a.batch_size,
        lease,
        retention: Some(parse_span(&a.retention)?),
        ..RelayConfig::default()
    };
    let shutdown = daemon::on_signals()?;
    let prometheus = daemon::prometheus()?;
    let registry = Registry::builtin();
    let pipeline = a.pipeline.open(&registry, config, passwords, true).await?;
    let mut also = Vec::with_capacity(a.also_publish_to.len());
    if !a.also_publish_to.is_empty() {
        if a.pipeline.broker.is_none() {
            return Err(OpsError::usage(
                "--also-publish-to needs --broker: the first broker the rows go to",
            ));
        }
        let path = a
            .pipeline
            .topology
            .clone()
            .unwrap_or_else(|| "topology.toml".into());
        let spec = TransportSpec::from_file(TopologyFile::read(&path)?);
        for url in &a.also_publish_to {
            let endpoint = postroom_ops::Endpoint::broker(&url.0)?;
            also.push(registry.open_transport(&endpoint, &spec).await?);
        }
    }
    let listener = daemon::listen(a.listen, "postroom relay").await?;
    let targets: Vec<&str> = std::iter::once(&pipeline.transport)
        .chain(&also)
        .map(|t| t.name())
        .collect();
    eprintln!(
        "postroom relay {}: {} {} -> {}",
        relay_config.relay_id,
        pipeline.store.driver(),
        pipeline.store.location(),
        targets.join(" + ")
    );
    let status = tokio::spawn(postroom_console::status::serve(
        listener,
        prometheus,
        Arc::new(pipeline.clone()),
        shutdown.clone(),
    ));
    let relayed =
        postroom_ops::relay::run_relay_to(&pipeline, &also, relay_config, 8, shutdown).await;
    pipeline.transport.close().await;
    for t in &also {
        t.close().await;
    }
    let _ = status.await;
    eprintln!("postroom relay: stopped");
    relayed
}
