//! `postroom relay --from wal`: the WAL relay on the daemon's PostgreSQL store and broker.

use crate::daemon::Daemon;
use crate::relay::RelayArgs;
use postroom_core::RelayConfig;
use postroom_ops::{OpsError, OpsResult};

/// Relay from the write-ahead log until SIGTERM or SIGINT.
#[cfg(feature = "postgres")]
pub async fn run(a: &RelayArgs, d: Daemon, relay: &RelayConfig) -> OpsResult {
    use postroom_postgres::wal::{WalRelay, WalRelayConfig};
    if !a.also_publish_to.is_empty() || a.brokers_file.is_some() {
        return Err(OpsError::usage(
            "--from wal publishes to --broker alone (not with --also-publish-to or --brokers-file)",
        ));
    }
    let Some(store) = d
        .opened_store()?
        .as_any()
        .downcast_ref::<postroom_postgres::PgStore>()
        .cloned()
    else {
        return Err(OpsError::usage(
            "--from wal reads PostgreSQL's write-ahead log: --database must be a postgres:// URL",
        ));
    };
    for c in &d.stack.workload().consumers {
        let routes: Vec<&str> = c.routes.iter().map(String::as_str).collect();
        d.stack.bind(&c.name, &routes, 8).await?;
    }
    let config = WalRelayConfig {
        relay_id: relay.relay_id.clone(),
        slot: a.slot.clone(),
        batch_size: relay.batch_size,
        retention: relay.retention,
        ..WalRelayConfig::default()
    };
    let wal = WalRelay::new(&store, d.stack.transport().publisher(), config)?;
    if a.recreate_slot {
        let n = wal.recreate_slot().await?;
        eprintln!(
            "postroom relay: slot {} recreated; {n} outbox rows republished",
            wal.slot()
        );
    } else {
        wal.prepare().await?;
    }
    let status = d.serve_status(a.status.listen, "postroom relay").await?;
    eprintln!(
        "postroom relay {} (from the WAL, slot {}): {} -> {}",
        relay.relay_id,
        wal.slot(),
        d.store(),
        d.stack.transport().name()
    );
    wal.run(d.shutdown.clone()).await;
    eprintln!("postroom relay: stopped");
    d.stop(status, Ok(())).await
}

/// Without PostgreSQL in the build there is no WAL to read.
#[cfg(not(feature = "postgres"))]
pub async fn run(_: &RelayArgs, _: Daemon, _: &RelayConfig) -> OpsResult {
    Err(OpsError::usage("--from wal needs the postgres feature"))
}
