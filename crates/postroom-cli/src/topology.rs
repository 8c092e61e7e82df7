//! `postroom topology plan | apply`: the broker's topology from a topology file, through the
//! registry (the transport of the broker URL's scheme plans and applies it).

use crate::cli::{TopologyApplyArgs, TopologyArgs, TopologyCommand};
use crate::connect::from_broker_args;
use crate::output::out;
use crate::prompt::confirm;
use postroom_ops::args::PasswordArgs;
use postroom_ops::registry::{PlannedChange, TopologyPlan};
use postroom_ops::{OpsError, OpsResult, Registry};

/// Run a topology subcommand.
pub async fn run(cmd: TopologyCommand, passwords: &PasswordArgs) -> OpsResult {
    match cmd {
        TopologyCommand::Plan(a) => plan(a, passwords).await,
        TopologyCommand::Apply(a) => apply(a, passwords).await,
    }
}

async fn open(
    args: &crate::cli::BrokerArgs,
    passwords: &PasswordArgs,
) -> OpsResult<Box<dyn TopologyPlan>> {
    let (broker, spec) = from_broker_args(args, passwords)?;
    Registry::builtin()
        .topology(&broker, &spec)
        .await?
        .ok_or_else(|| {
            OpsError::usage(format!(
                "the {} transport has no topology to plan (its queues are made when consumers bind)",
                broker.scheme()
            ))
        })
}

fn line(c: &PlannedChange) -> String {
    format!("  {}{}", if c.conflict { "CONFLICT " } else { "" }, c.text)
}

async fn plan(a: TopologyArgs, passwords: &PasswordArgs) -> OpsResult {
    let changes = open(&a.broker, passwords).await?.plan().await?;
    if a.json {
        for c in &changes {
            out!(
                "{}",
                serde_json::json!({"change": c.text, "conflict": c.conflict})
            )?;
        }
    } else if changes.is_empty() {
        out!(
            "nothing to do: the broker matches {}",
            a.broker.topology.display()
        )?;
    } else {
        out!("{} change(s):", changes.len())?;
        for c in &changes {
            out!("{}", line(c))?;
        }
    }
    Ok(())
}

async fn apply(a: TopologyApplyArgs, passwords: &PasswordArgs) -> OpsResult {
    let topology = open(&a.broker, passwords).await?;
    let changes = topology.plan().await?;
    if changes.is_empty() {
        out!("nothing to do")?;
        return Ok(());
    }
    eprintln!("{} change(s):", changes.len());
    for c in &changes {
        eprintln!("{}", line(c));
    }
    if a.dry_run {
        return Ok(());
    }
    if !a.yes
        && !confirm(
            &format!("Apply {} change(s)?", changes.len()),
            "change the broker",
        )?
    {
        return Err(OpsError::failed("not confirmed; nothing changed"));
    }
    let done = topology.apply().await?;
    out!("applied {done} change(s)")?;
    Ok(())
}
