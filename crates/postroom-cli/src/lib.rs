//! # postroom-cli
//!
//! The `postroom` command-line tool as a library: [`run`] takes parsed arguments, so the
//! commands can be driven from tests and other programs. The binary is a thin shell, and so
//! is this crate: commands parse flags and print; what they do is in `postroom_ops` (stores
//! and brokers by URL, parking, redrive), `postroom_demo` (`demo`, `soak`) and
//! `postroom_bench`. Each store and transport is a cargo feature (`sqlite`, `postgres`,
//! `rabbitmq`); `demo`, `bench` and `console` (`serve`, `relay`, `ingest`, through
//! `postroom_console`) are features too.
//!
//! ```no_run
//! use clap::Parser;
//! let cli = postroom_cli::cli::Cli::parse_from(["postroom", "parking", "list", "--database", "app.db"]);
//! let code = tokio::runtime::Runtime::new().unwrap().block_on(postroom_cli::run(cli));
//! ```

// The argument structs' doc comments are the `--help` text a user reads in a terminal, where
// `[[consumers]]` is a topology file's key and `[::1]` an address, not rustdoc links.
#![allow(rustdoc::broken_intra_doc_links)]

pub mod cli;
pub mod config;
pub mod connect;
#[cfg(feature = "console")]
pub mod console;
#[cfg(feature = "console")]
pub mod daemon;
pub mod error;
#[cfg(feature = "console")]
pub mod feed;
#[cfg(feature = "console")]
pub mod ingest;
pub mod output;
pub mod parking;
pub mod prompt;
#[cfg(feature = "console")]
pub mod relay;
#[cfg(feature = "console")]
mod relay_wal;
#[cfg(feature = "console")]
pub mod serve;
pub mod topology;

use clap::Parser;
use cli::{Cli, Command};
use postroom_ops::OpsResult;
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
        // The reader of the output went away: nothing to tell anyone.
        Err(e) if e.kind == postroom_ops::OpsErrorKind::OutputClosed => error::exit_code(&e),
        Err(e) => {
            eprintln!("error: {}", postroom_ops::redact(&e.message));
            error::exit_code(&e)
        }
    }
}

async fn dispatch(cli: Cli) -> OpsResult {
    let config = config::load(cli.config.as_deref())?;
    let passwords = &cli.passwords;
    match cli.command {
        #[cfg(feature = "demo")]
        Command::Demo(args) => postroom_demo::demo::run(args, passwords).await,
        #[cfg(feature = "demo")]
        Command::DemoConsumer(args) => postroom_demo::demo::consumer::run(args).await,
        #[cfg(feature = "demo")]
        Command::Soak(args) => postroom_demo::soak::run(args, passwords).await,
        #[cfg(feature = "demo")]
        Command::SoakWorker(args) => postroom_demo::soak::worker::run(args).await,
        Command::Parking(cmd) => parking::run(cmd, &config, passwords).await,
        #[cfg(feature = "bench")]
        Command::Bench(args) => postroom_bench::run(args)
            .await
            .map(|_| ())
            .map_err(|e| postroom_ops::OpsError::unreachable(e.to_string())),
        Command::Topology(cmd) => topology::run(cmd, passwords).await,
        #[cfg(feature = "console")]
        Command::Serve(args) => serve::run(args, &config, passwords).await,
        #[cfg(feature = "console")]
        Command::Console(cmd) => console::run(cmd),
        #[cfg(feature = "console")]
        Command::Relay(args) => relay::run(args, &config, passwords).await,
        #[cfg(feature = "console")]
        Command::Ingest(args) => ingest::run(args, &config, passwords).await,
        #[cfg(feature = "console")]
        Command::Feed(args) => feed::run(args, &config, passwords).await,
    }
}

fn init_tracing(format: &str) {
    // Warnings by default, except the AWS SDK's instance-metadata lookups: off a cloud host
    // they fail as expected, and what is missing (a region, credentials) is our error's to say.
    const DEFAULT: &str = "warn,aws_config::imds=error,aws_config::meta::credentials=error";
    let filter = match std::env::var("POSTROOM_LOG") {
        Ok(spec) => tracing_subscriber::EnvFilter::try_new(&spec).unwrap_or_else(|e| {
            eprintln!(
                "postroom: POSTROOM_LOG={spec:?} is not a log filter ({e}); logging warnings"
            );
            tracing_subscriber::EnvFilter::new(DEFAULT)
        }),
        Err(_) => tracing_subscriber::EnvFilter::new(DEFAULT),
    };
    // Colours only for a person at a terminal: a log file or a pipe gets plain text.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(std::io::stderr);
    if format == "json" {
        let _ = builder.json().try_init();
    } else {
        let _ = builder.try_init();
    }
}
