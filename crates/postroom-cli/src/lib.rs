//! # postroom-cli
//!
//! The `postroom` command-line tool as a library: [`run`] takes parsed arguments, so the
//! commands can be driven from tests and other programs. The binary is a thin shell.
//!
//! ```no_run
//! use clap::Parser;
//! let cli = postroom_cli::cli::Cli::parse_from(["postroom", "parking", "list", "--database", "app.db"]);
//! let code = tokio::runtime::Runtime::new().unwrap().block_on(postroom_cli::run(cli));
//! ```

pub mod cli;
pub mod config;
pub mod demo;
pub mod error;
pub mod parking;
pub mod shop;
pub mod soak;
pub mod stack;
pub mod topology;
pub mod worker;

use clap::Parser;
use cli::{Cli, Command};
use error::CliResult;
use std::process::ExitCode;

/// Parse the process arguments, run, and turn the result into an exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(&cli.log_format);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(run(cli))
}

/// Run a parsed command line.
pub async fn run(cli: Cli) -> ExitCode {
    match dispatch(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            e.exit_code()
        }
    }
}

async fn dispatch(cli: Cli) -> CliResult {
    let config = config::load(cli.config.as_deref())?;
    match cli.command {
        Command::Demo(args) => demo::run(args).await,
        Command::DemoConsumer(args) => demo::child::run(args).await,
        Command::Parking(cmd) => parking::run(cmd, &config).await,
        Command::Soak(args) => soak::run(args).await,
        Command::Bench(args) => {
            postroom_bench::run(args)
                .await
                .map(|_| ())
                .map_err(|e| error::CliError {
                    kind: error::CliErrorKind::Unreachable,
                    message: e.to_string(),
                })
        }
        Command::Topology(cmd) => topology::run(cmd).await,
        Command::SoakWorker(args) => soak::worker::run(args).await,
    }
}

fn init_tracing(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("POSTROOM_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if format == "json" {
        let _ = builder.json().try_init();
    } else {
        let _ = builder.try_init();
    }
}
