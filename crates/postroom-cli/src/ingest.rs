//! `postroom ingest`: the continuous parking ingest — each consumer's dead-lettered copies
//! moved from the broker into the parking store, acked only after their insert commits —
//! with `/metrics`, `/healthz` and `/readyz`, until SIGTERM.

use crate::config::ConfigFile;
use crate::daemon::{IngestListen, PipelineArgs};
use clap::Args;
use postroom_ops::OpsResult;
use postroom_ops::args::PasswordArgs;

/// `postroom ingest`.
#[derive(Debug, Args)]
pub struct IngestDaemonArgs {
    #[allow(missing_docs)]
    #[command(flatten)]
    pub pipeline: PipelineArgs,
    #[allow(missing_docs)]
    #[command(flatten)]
    pub status: IngestListen,
}

/// Ingest until SIGTERM or SIGINT.
pub async fn run(a: IngestDaemonArgs, config: &ConfigFile, passwords: &PasswordArgs) -> OpsResult {
    a.pipeline.require_broker(
        "postroom ingest moves a broker's parked copies: pass --broker (without one, \
         consumers park straight into the database and there is nothing to move)",
    )?;
    let d = a.pipeline.start(config, passwords, true).await?;
    let status = d.serve_status(a.status.listen, "postroom ingest").await?;
    eprintln!(
        "postroom ingest: {} -> {} for {}",
        d.pipeline.transport.name(),
        d.store(),
        d.pipeline.consumers().join(", ")
    );
    postroom_ops::parking::ingest::run_ingest(&d.pipeline, d.shutdown.clone()).await;
    d.stop(status, Ok(())).await
}
