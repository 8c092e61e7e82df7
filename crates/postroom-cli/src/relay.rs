//! `postroom relay`: a long-running outbox relay for services in any language, with
//! `/metrics`, `/healthz` and `/readyz`; SIGTERM drains the batch in hand.

use crate::config::ConfigFile;
use crate::daemon::{self, Daemon, PipelineArgs, RelayListen};
use clap::Args;
use postroom_core::RelayConfig;
use postroom_ops::args::PasswordArgs;
use postroom_ops::limits::{parse_limit, parse_span_within};
use postroom_ops::time::parse_span;
use postroom_ops::{OpsError, OpsResult, TopologyFile, TransportSpec, UrlText};
use std::path::PathBuf;
use std::sync::Arc;

/// `postroom relay`.
#[derive(Debug, Args)]
pub struct RelayArgs {
    #[allow(missing_docs)]
    #[command(flatten)]
    pub pipeline: PipelineArgs,
    #[allow(missing_docs)]
    #[command(flatten)]
    pub status: RelayListen,
    /// This relay's name on the rows it claims (default: relay-PID-RANDOM). Several relays
    /// may run at once; each needs its own name.
    #[arg(long)]
    pub relay_id: Option<String>,
    /// Rows claimed per batch.
    #[arg(long, default_value_t = 100, value_parser = parse_limit)]
    pub batch_size: usize,
    /// Claim/publish/mark pipelines run at once, each on its own database connection (1 to
    /// 64). One pipeline is bounded by the database round trips of each batch; a broker that
    /// confirms faster than that needs more. Aggregate order holds across lanes.
    #[arg(long, env = "POSTROOM_RELAY_LANES", default_value_t = 1, value_parser = parse_lanes)]
    pub lanes: usize,
    /// Lease on claimed rows: when a relay dies, another publishes its rows after this (e.g.
    /// 30s; 1s to 1d). Longer than a batch can take to be confirmed.
    #[arg(long, default_value = "30s", value_name = "SPAN")]
    pub lease: String,
    /// Published rows are deleted after this long (e.g. 24h). 0 keeps no record of what was
    /// published: on PostgreSQL each row is deleted as its publish is confirmed, instead of
    /// being marked (the cheapest relay); on SQLite at each purge.
    #[arg(long, default_value = "24h", value_name = "SPAN")]
    pub retention: String,
    /// Also publish every row to this broker (repeat for several; comma-separated in the
    /// environment), with the same message id: a row is marked published only when --broker
    /// and every one of these confirmed it. Fixed while the relay runs; to change the brokers
    /// without a restart, use --brokers-file.
    #[arg(
        long,
        env = "POSTROOM_RELAY_ALSO_PUBLISH_TO",
        hide_env_values = true,
        value_delimiter = ',',
        value_name = "URL",
        conflicts_with = "brokers_file"
    )]
    pub also_publish_to: Vec<UrlText>,
    /// Publish every row to each broker listed in FILE (one URL per line, # starts a
    /// comment), with the same message id, instead of --broker: a row is marked published
    /// only when every broker listed confirmed it. The file is followed while the relay runs
    /// (checked every second, at once on SIGHUP): brokers added are opened and bound and get
    /// the next batches; brokers removed get no more rows. A list that cannot be used is
    /// reported and the one in use is kept.
    #[arg(
        long,
        env = "POSTROOM_RELAY_BROKERS_FILE",
        value_name = "FILE",
        conflicts_with = "broker"
    )]
    pub brokers_file: Option<PathBuf>,
    /// Where the relay reads the outbox: `table` claims rows with leases and marks each
    /// after its confirm (any store); `wal` reads PostgreSQL's write-ahead log through a
    /// logical replication slot and writes nothing per message (PostgreSQL with
    /// wal_level=logical; see docs/wal-relay.md). Relays with `wal` on one slot: one reads
    /// it, the others stand by and take over.
    #[arg(long, value_enum, env = "POSTROOM_RELAY_FROM", default_value = "table")]
    pub from: RelayFrom,
    /// With --from wal: the slot's name (default: {prefix}outbox_wal).
    #[arg(long, requires = "from")]
    pub slot: Option<String>,
    /// With --from wal: the way back from a slot that was invalidated or dropped. Drop what is
    /// left of it, create it again, republish the outbox rows it had not passed (the inbox
    /// absorbs the copies), then relay. Stop every other relay of the slot first.
    #[arg(long, requires = "from")]
    pub recreate_slot: bool,
}

/// `--from`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RelayFrom {
    /// Claim outbox rows with leases.
    Table,
    /// Read PostgreSQL's write-ahead log.
    Wal,
}

/// The shortest `--lease`: one shorter than a batch takes to be confirmed lets another relay
/// publish the same rows again (and `1ms` keeps the relays claiming all day).
const LEASE_MIN: std::time::Duration = std::time::Duration::from_secs(1);
/// The longest `--lease`.
const LEASE_MAX: std::time::Duration = std::time::Duration::from_secs(86_400);

/// `--lanes`: a whole number from 1 to 64.
fn parse_lanes(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=64).contains(&n) => Ok(n),
        _ => Err(format!("{s:?} is not a number of lanes from 1 to 64")),
    }
}

fn default_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("relay-{}-{:06x}", std::process::id(), nanos & 0xff_ffff)
}

/// Relay until SIGTERM or SIGINT, then drain and exit.
pub async fn run(a: RelayArgs, config: &ConfigFile, passwords: &PasswordArgs) -> OpsResult {
    let lease = parse_span_within("--lease", &a.lease, LEASE_MIN, LEASE_MAX)?;
    let relay_config = RelayConfig {
        relay_id: a.relay_id.clone().unwrap_or_else(default_id),
        batch_size: a.batch_size,
        lease,
        retention: Some(parse_span(&a.retention)?),
        lanes: a.lanes,
        ..RelayConfig::default()
    };
    let d = a.pipeline.start(config, passwords, true).await?;
    if a.from == RelayFrom::Wal {
        return crate::relay_wal::run(&a, d, &relay_config).await;
    }
    if a.slot.is_some() || a.recreate_slot {
        return Err(OpsError::usage(
            "--slot and --recreate-slot go with --from wal",
        ));
    }
    if let Some(file) = &a.brokers_file {
        return follow_brokers_file(&a, file, d, relay_config).await;
    }
    let mut also = Vec::with_capacity(a.also_publish_to.len());
    if !a.also_publish_to.is_empty() {
        a.pipeline
            .require_broker("--also-publish-to needs --broker: the first broker the rows go to")?;
        let spec = TransportSpec::from_file(TopologyFile::read(&topology_path(&a))?);
        for url in &a.also_publish_to {
            let endpoint = postroom_ops::Endpoint::broker(&url.0)?;
            also.push(d.registry.open_transport(&endpoint, &spec).await?);
        }
    }
    let status = d.serve_status(a.status.listen, "postroom relay").await?;
    let targets: Vec<&str> = std::iter::once(d.stack.transport())
        .chain(&also)
        .map(|t| t.name())
        .collect();
    eprintln!(
        "postroom relay {}: {} -> {}",
        relay_config.relay_id,
        d.store(),
        targets.join(" + ")
    );
    let relayed =
        postroom_ops::relay::run_relay_to(&d.stack, &also, relay_config, 8, d.shutdown.clone())
            .await;
    for t in &also {
        t.close().await;
    }
    stopped(d.stop(status, relayed).await)
}

/// The topology file: --topology (or POSTROOM_TOPOLOGY), else `topology.toml`.
fn topology_path(a: &RelayArgs) -> PathBuf {
    a.pipeline
        .topology
        .clone()
        .unwrap_or_else(|| "topology.toml".into())
}

/// `--brokers-file`: relay to the brokers the file lists, following it; SIGHUP re-reads it.
async fn follow_brokers_file(
    a: &RelayArgs,
    file: &std::path::Path,
    mut d: Daemon,
    relay_config: RelayConfig,
) -> OpsResult {
    let spec = TransportSpec::from_file(TopologyFile::read(&topology_path(a))?);
    // A file that cannot be used is refused before anything starts.
    postroom_ops::relay::read_brokers_file(file)?;
    let reload = daemon::on_hangup()?;
    let status = d.serve_status(a.status.listen, "postroom relay").await?;
    let (id, store) = (relay_config.relay_id.clone(), d.store());
    let on_targets: postroom_ops::relay::OnTargets = Arc::new(move |names: &[String]| {
        eprintln!("postroom relay {id}: {store} -> {}", names.join(" + "));
    });
    let relayed = postroom_ops::relay::run_relay_following(
        &d.stack,
        std::mem::take(&mut d.registry),
        &spec,
        file,
        relay_config,
        8,
        reload,
        on_targets,
        d.shutdown.clone(),
    )
    .await;
    stopped(d.stop(status, relayed).await)
}

/// Say that the relay stopped; gives back how it ended.
fn stopped(relayed: OpsResult) -> OpsResult {
    eprintln!("postroom relay: stopped");
    relayed
}
