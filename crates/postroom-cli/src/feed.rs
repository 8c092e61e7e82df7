//! `postroom feed`: one consumer's deliveries from a broker stored into its inbox queue in
//! PostgreSQL, each acked only after its insert committed, with `/metrics`, `/healthz` and
//! `/readyz`, until SIGTERM. Two feeds on two brokers may fill the same inbox queue at once
//! (the move from one broker to another): the table keeps one row per message id.

use crate::config::ConfigFile;
use crate::daemon::{FeedListen, PipelineArgs};
use clap::Args;
use postroom_ops::OpsResult;
use postroom_ops::args::PasswordArgs;

/// `postroom feed`.
#[derive(Debug, Args)]
pub struct FeedArgs {
    #[allow(missing_docs)]
    #[command(flatten)]
    pub pipeline: PipelineArgs,
    /// The consumer whose inbox queue this feeds (one of the topology's consumers; its
    /// bindings are the routes taken).
    #[arg(long)]
    pub consumer: String,
    /// Store each row with its aggregate key and version, for workers in ordered mode.
    #[arg(long)]
    pub ordered: bool,
    /// Deliveries held unsettled at once.
    #[arg(long, default_value_t = 16, value_parser = postroom_ops::limits::parse_limit)]
    pub prefetch: usize,
    #[allow(missing_docs)]
    #[command(flatten)]
    pub status: FeedListen,
}

/// Feed until SIGTERM or SIGINT; prints what this feed stored and absorbed.
pub async fn run(a: FeedArgs, config: &ConfigFile, passwords: &PasswordArgs) -> OpsResult {
    a.pipeline.require_broker(
        "postroom feed moves a broker's deliveries into the inbox queue: pass --broker",
    )?;
    let d = a.pipeline.start(config, passwords, false).await?;
    // Refuse a store without an inbox queue before listening.
    d.opened_store()?.inbox_feed(&a.consumer, a.ordered)?;
    let status = d.serve_status(a.status.listen, "postroom feed").await?;
    eprintln!(
        "postroom feed: {} -> {} inbox queue of {}",
        d.stack.transport().name(),
        d.store(),
        a.consumer
    );
    let fed = postroom_ops::feed::run_inbox_feed(
        &d.stack,
        &a.consumer,
        a.ordered,
        a.prefetch,
        d.shutdown.clone(),
    )
    .await;
    let counts = d.stop(status, fed).await?;
    eprintln!(
        "postroom feed: stopped; stored {}, duplicates absorbed {}",
        counts.stored, counts.duplicates
    );
    Ok(())
}
