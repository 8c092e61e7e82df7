//! `postroom-bench`: the harness on its own (the CLI runs the same as `postroom bench`).
//!
//! ```text
//! cargo run --release -p postroom-bench -- --json /tmp/bench.json
//! cargo run --release -p postroom-bench -- --quick --scenario relay --scenario consumer
//! ```

use clap::Parser;

/// Measure postroom beside raw baselines and report the ratios.
#[derive(Parser, Debug)]
#[command(name = "postroom-bench", version)]
struct Cli {
    #[command(flatten)]
    bench: postroom_bench::BenchArgs,
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "error".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match postroom_bench::run(cli.bench).await {
        Ok(report) if report.failures.is_empty() => {}
        Ok(_) => std::process::exit(2),
        Err(e) => {
            eprintln!("postroom-bench: {e}");
            std::process::exit(1);
        }
    }
}
