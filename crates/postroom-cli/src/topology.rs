//! `postroom topology plan | apply`.

use crate::cli::{BrokerArgs, TopologyCommand};
use crate::error::{CliError, CliResult};
use crate::stack::management_url;
use postroom_rabbitmq::{ManagementApi, Topology, TopologyConfig};
use std::io::{IsTerminal, Write};

/// Read the topology file and connect to the management API.
pub async fn load(a: &BrokerArgs) -> CliResult<Topology> {
    let text = std::fs::read_to_string(&a.topology).map_err(|e| {
        CliError::usage(format!(
            "cannot read topology file {}: {e}",
            a.topology.display()
        ))
    })?;
    let config = TopologyConfig::from_toml(&text)
        .map_err(|e| CliError::usage(format!("{}: {e}", a.topology.display())))?;
    let api = ManagementApi::new(&management_url(&a.broker), &config.vhost)?;
    Ok(Topology::new(config, api)?)
}

/// Run a topology subcommand.
pub async fn run(cmd: TopologyCommand) -> CliResult {
    match cmd {
        TopologyCommand::Plan(a) => {
            let t = load(&a.broker).await?;
            let changes = t.plan().await?;
            if a.json {
                for c in &changes {
                    println!(
                        "{}",
                        serde_json::json!({"change": c.to_string(), "conflict": c.is_conflict()})
                    );
                }
            } else if changes.is_empty() {
                println!(
                    "nothing to do: the broker matches {}",
                    a.broker.topology.display()
                );
            } else {
                println!("{} change(s):", changes.len());
                for c in &changes {
                    println!("  {}{c}", if c.is_conflict() { "CONFLICT " } else { "" });
                }
            }
            Ok(())
        }
        TopologyCommand::Apply(a) => {
            let t = load(&a.broker).await?;
            let changes = t.plan().await?;
            if changes.is_empty() {
                println!("nothing to do");
                return Ok(());
            }
            eprintln!("{} change(s):", changes.len());
            for c in &changes {
                eprintln!("  {}{c}", if c.is_conflict() { "CONFLICT " } else { "" });
            }
            if a.dry_run {
                return Ok(());
            }
            if !a.yes {
                if !std::io::stdin().is_terminal() {
                    return Err(CliError::usage(
                        "refusing to change the broker without confirmation: pass --yes",
                    ));
                }
                eprint!("Apply {} change(s)? [y/N] ", changes.len());
                let _ = std::io::stderr().flush();
                let mut line = String::new();
                std::io::stdin()
                    .read_line(&mut line)
                    .map_err(|e| CliError::failed(e.to_string()))?;
                if !matches!(line.trim(), "y" | "Y" | "yes") {
                    return Err(CliError::failed("not confirmed; nothing changed"));
                }
            }
            let done = t.apply().await?;
            println!("applied {} change(s)", done.len());
            Ok(())
        }
    }
}
