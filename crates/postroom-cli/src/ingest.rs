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
    // The service moves every topology consumer's dead-lettered copies while it runs.
    let d = a
        .pipeline
        .start_with(config, passwords, true, postroom::Service::ingest_parked)
        .await?;
    let status = d.serve_status(a.status.listen, "postroom ingest").await?;
    eprintln!(
        "postroom ingest: {} -> {} for {}",
        d.stack.transport().name(),
        d.store(),
        d.stack.consumers().join(", ")
    );
    d.until_stopped().await;
    d.stop(status, Ok(())).await
}
