//! `postroom serve`: the web console over a database (and a broker), until SIGTERM.

use crate::config::ConfigFile;
use crate::daemon::{self, PipelineArgs};
use clap::Args;
use postroom_console::auth::{USERS_ENV, USERS_FILE_ENV};
use postroom_console::feeds::{self, FeedTarget};
use postroom_console::{Auth, Backends, Console, ConsoleConfig, Users};
use postroom_ops::args::PasswordArgs;
use postroom_ops::limits::parse_span_within;
use postroom_ops::time::parse_span;
use postroom_ops::{OpsError, OpsResult};
use std::net::SocketAddr;
use std::time::Duration;

/// The most often `--sample-every` samples the pipeline.
const SAMPLE_EVERY_MIN: Duration = Duration::from_secs(1);
/// The least often (the charts show the last hour).
const SAMPLE_EVERY_MAX: Duration = Duration::from_secs(3600);

/// `postroom serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    #[allow(missing_docs)]
    #[command(flatten)]
    pub pipeline: PipelineArgs,
    /// Address to listen on (port 0: a free one, printed). Off loopback, users are required:
    /// they come from the file named by POSTROOM_CONSOLE_USERS_FILE or from
    /// POSTROOM_CONSOLE_USERS, never from the command line.
    #[arg(
        long,
        env = "POSTROOM_CONSOLE_LISTEN",
        default_value = "127.0.0.1:8080",
        value_name = "ADDR"
    )]
    pub listen: SocketAddr,
    /// Mark the cookies Secure on every answer. Without it they are Secure on answers to
    /// requests a TLS-terminating proxy marks as having come over TLS (X-Forwarded-Proto:
    /// https, or proto=https in Forwarded), and not otherwise.
    #[arg(long)]
    pub secure_cookies: bool,
    /// A host name the console is reached by besides 127.0.0.1, localhost, [::1] and the
    /// --listen address (a name a proxy in front of it serves). With auth off, and whenever a
    /// name is given, a request for any other host is refused: a page whose host name
    /// resolves to this machine (DNS rebinding) gets nothing. Repeat for several; the
    /// environment variable takes a comma-separated list; without either, `allowed_hosts`
    /// under `[console]` in the config file.
    #[arg(
        long = "allowed-host",
        env = "POSTROOM_CONSOLE_ALLOWED_HOSTS",
        value_delimiter = ',',
        value_name = "NAME"
    )]
    pub allowed_hosts: Vec<String>,
    /// The header a proxy in front of the console names the client in (e.g. X-Forwarded-For,
    /// X-Real-IP): its last address counts as the client's for the limits on failed logins
    /// (30 per client and 10 per user name in 15 minutes lock them out for 15 minutes).
    /// Give it only when the console is reachable through that proxy alone; without it, the
    /// peer address counts, and behind a proxy all clients are one.
    #[arg(
        long,
        env = "POSTROOM_CONSOLE_CLIENT_ADDRESS_HEADER",
        value_name = "HEADER"
    )]
    pub client_address_header: Option<String>,
    /// How often the pipeline is sampled for the charts and the gauges, 1s to 1h (e.g. 10s).
    #[arg(long, default_value = "10s", value_name = "SPAN")]
    pub sample_every: String,
    /// How long archived messages are kept before they may be purged (e.g. 30d).
    #[arg(long, default_value = "30d", value_name = "SPAN")]
    pub retention: String,
    /// An inbox feed to watch, NAME=HOST:PORT: the address a `postroom feed` serves its
    /// /metrics on (its --listen). Its lag, what it stored and the duplicates it absorbed are
    /// read at each sample and shown on the pipeline page. Repeat for each feed; the
    /// environment variable takes a comma-separated list; without either, `feeds` under
    /// `[console]` in the config file.
    #[arg(
        long = "feed",
        env = "POSTROOM_CONSOLE_FEEDS",
        value_delimiter = ',',
        value_name = "NAME=HOST:PORT"
    )]
    pub feeds: Vec<String>,
}

/// The feeds to watch: from the command line or environment, else from the config file;
/// each name once.
fn feeds_to_watch(a: &ServeArgs, config: &ConfigFile) -> OpsResult<Vec<FeedTarget>> {
    let feeds = if a.feeds.is_empty() {
        config
            .console
            .feeds
            .iter()
            .map(|f| {
                FeedTarget::parse(f).map_err(|e| {
                    OpsError::usage(format!("config file, [console] feeds: {}", e.message()))
                })
            })
            .collect::<OpsResult<Vec<_>>>()?
    } else {
        // Read here rather than by the argument parser, which would echo a refused value
        // whole (a feed typed with a password in it, say).
        a.feeds
            .iter()
            .map(|f| FeedTarget::parse(f).map_err(|e| OpsError::usage(e.message())))
            .collect::<OpsResult<Vec<_>>>()?
    };
    feeds::check_unique(&feeds).map_err(|e| OpsError::usage(e.message()))?;
    Ok(feeds)
}

/// Run the console until SIGTERM or SIGINT.
pub async fn run(a: ServeArgs, config: &ConfigFile, passwords: &PasswordArgs) -> OpsResult {
    let feeds = feeds_to_watch(&a, config)?;
    let watching: Vec<String> = feeds.iter().map(ToString::to_string).collect();
    let auth = match Users::from_env()? {
        Some(users) if users.is_empty() => {
            return Err(OpsError::usage(format!(
                "{USERS_FILE_ENV} or {USERS_ENV} defines no user: nobody could log in"
            )));
        }
        Some(users) => Auth::Users(users),
        None => Auth::Disabled,
    };
    let sample_every = parse_span_within(
        "--sample-every",
        &a.sample_every,
        SAMPLE_EVERY_MIN,
        SAMPLE_EVERY_MAX,
    )?;
    let allowed_hosts = if a.allowed_hosts.is_empty() {
        config.console.allowed_hosts.clone()
    } else {
        a.allowed_hosts.clone()
    };
    let mut console_config = ConsoleConfig::new(a.listen)
        .auth(auth)
        .sample_every(sample_every)
        .allowed_hosts(allowed_hosts)
        .feeds(feeds);
    console_config.secure_cookies = a.secure_cookies;
    console_config.client_address_header = a.client_address_header.clone();
    console_config.retention = parse_span(&a.retention)?;
    // Refuse auth off beyond loopback before anything is opened.
    console_config.validate()?;
    let d = a.pipeline.start(config, passwords, false).await?;
    let backends = Backends::for_store(
        d.opened_store()?.as_ref(),
        Some(d.stack.transport().clone()),
    )?;
    let console_config = console_config.prometheus(d.prometheus.clone());
    let console = Console::new(backends.parking, backends.probe, console_config)?;
    eprintln!("postroom serve: {}", d.store());
    if !watching.is_empty() {
        eprintln!(
            "postroom serve: watching inbox feeds {}",
            watching.join(", ")
        );
    }
    let listener = daemon::listen(a.listen, "postroom console").await?;
    let served = console.serve(listener, d.shutdown.clone()).await;
    d.shutdown().await;
    served.map_err(OpsError::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn serve_args(argv: &[&str]) -> ServeArgs {
        let mut all = vec!["postroom", "serve"];
        all.extend_from_slice(argv);
        match Cli::try_parse_from(all).unwrap().command {
            Command::Serve(a) => a,
            other => panic!("not serve: {other:?}"),
        }
    }

    #[test]
    fn feeds_come_from_the_flags_else_the_config_file() {
        let config: ConfigFile =
            toml::from_str("[console]\nfeeds = [\"nats=127.0.0.1:9466\"]\n").unwrap();
        let from_file = feeds_to_watch(&serve_args(&[]), &config).unwrap();
        assert_eq!(
            from_file,
            vec![FeedTarget::parse("nats=127.0.0.1:9466").unwrap()]
        );
        let flags = serve_args(&["--feed", "kafka=127.0.0.1:9467", "--feed", "b=h:1"]);
        let from_flags = feeds_to_watch(&flags, &config).unwrap();
        let names: Vec<&str> = from_flags.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["kafka", "b"]);
        let twice: ConfigFile =
            toml::from_str("[console]\nfeeds = [\"a=h:1\", \"a=h:2\"]\n").unwrap();
        let e = feeds_to_watch(&serve_args(&[]), &twice).unwrap_err();
        assert_eq!(e.kind, postroom_ops::OpsErrorKind::Usage);
        assert!(
            e.message.contains("two feeds are named \"a\""),
            "{}",
            e.message
        );
    }
}
