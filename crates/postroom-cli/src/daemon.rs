//! What the long-running commands (`serve`, `relay`, `ingest`, `feed`) share: the store and
//! the transport opened through the registry, a switch that SIGTERM and SIGINT turn, the
//! Prometheus recorder, and a listener whose address is printed (port 0 picks a free one),
//! serving `/metrics`, `/healthz` and `/readyz` until the switch turns.

use crate::cli::StoreArgs;
use crate::config::ConfigFile;
use crate::connect;
use clap::Args;
use postroom_ops::args::PasswordArgs;
use postroom_ops::registry::{QueueOptions, StoreOptions};
use postroom_ops::{
    OpsError, OpsResult, Pipeline, PipelineSpec, Registry, TopologyFile, TransportSpec, UrlText,
    Workload,
};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Define the `--listen` flags of the long-running commands that serve `/metrics`, `/healthz`
/// and `/readyz` beside their work: for each entry `Name: "ENV", "ADDR";`, a struct `Name` to
/// flatten into the command's arguments, whose flag is read from the environment variable
/// `ENV`, else is `ADDR`. An entry's doc comment goes on its struct.
macro_rules! status_listen {
    ($($(#[$doc:meta])* $name:ident: $env:literal, $default:literal;)+) => {
        $(
            $(#[$doc])*
            #[derive(Debug, Args)]
            pub struct $name {
                /// Address of /metrics, /healthz and /readyz (port 0: a free one, printed).
                #[arg(long, env = $env, default_value = $default, value_name = "ADDR")]
                pub listen: SocketAddr,
            }
        )+
    };
}

status_listen! {
    /// Where `postroom relay` serves its status.
    RelayListen: "POSTROOM_RELAY_LISTEN", "127.0.0.1:9464";
    /// Where `postroom ingest` serves its status.
    IngestListen: "POSTROOM_INGEST_LISTEN", "127.0.0.1:9465";
    /// Where `postroom feed` serves its status.
    FeedListen: "POSTROOM_FEED_LISTEN", "127.0.0.1:9466";
}

/// The database and, optionally, the broker a long-running command works on.
#[derive(Debug, Args)]
pub struct PipelineArgs {
    #[allow(missing_docs)]
    #[command(flatten)]
    pub store: StoreArgs,
    /// Broker URL: amqp://user@host:5672/%2f or amqps:// (RabbitMQ), nats://host:4222 (NATS
    /// JetStream), kafka://host:9092 (Kafka), sqs://host:port?region=R or sqs+fifo:// (Amazon SQS).
    /// Without it, the queue in the database's own tables. Put the password in
    /// POSTROOM_BROKER_PASSWORD or --broker-password-file rather than here.
    #[arg(long, env = "POSTROOM_BROKER", hide_env_values = true)]
    pub broker: Option<UrlText>,
    /// Topology file: the consumers and the routes they take (TOML: prefix, ladder,
    /// [[consumers]] name + bindings, and the broker's own keys). Needed with --broker
    /// (default topology.toml); without a broker it is optional.
    #[arg(long = "topology", env = "POSTROOM_TOPOLOGY", value_name = "FILE")]
    pub topology: Option<PathBuf>,
}

impl PipelineArgs {
    /// Open the store (`create`: a SQLite file may be created) and its transport.
    pub async fn open(
        &self,
        registry: &Registry,
        config: &ConfigFile,
        passwords: &PasswordArgs,
        create: bool,
    ) -> OpsResult<Pipeline> {
        let database = connect::database(&self.store, config, passwords)?;
        let broker = self
            .broker
            .as_ref()
            .map(|b| connect::broker(b, passwords))
            .transpose()?;
        let transport = match (&self.topology, &broker) {
            (Some(path), _) => TransportSpec::from_file(TopologyFile::read(path)?),
            (None, Some(_)) => {
                TransportSpec::from_file(TopologyFile::read(std::path::Path::new("topology.toml"))?)
            }
            (None, None) => TransportSpec::of(Workload {
                prefix: "postroom".into(),
                ladder: None,
                consumers: Vec::new(),
            }),
        };
        let spec = PipelineSpec {
            database,
            store: StoreOptions {
                table_prefix: self
                    .store
                    .table_prefix
                    .clone()
                    .or_else(|| config.table_prefix.clone()),
                must_exist: !create,
            },
            broker,
            transport,
            queue: QueueOptions::default(),
        };
        Pipeline::open(registry, &spec).await
    }

    /// Start a long-running command: watch for SIGTERM and SIGINT, install the Prometheus
    /// recorder, then open the store and its transport (`create`: a SQLite file may be
    /// created).
    pub async fn start(
        &self,
        config: &ConfigFile,
        passwords: &PasswordArgs,
        create: bool,
    ) -> OpsResult<Daemon> {
        let shutdown = on_signals()?;
        let prometheus = prometheus()?;
        let registry = Registry::builtin();
        let pipeline = self.open(&registry, config, passwords, create).await?;
        Ok(Daemon {
            registry,
            pipeline,
            shutdown,
            prometheus,
        })
    }

    /// Refuse a command that moves a broker's messages when no --broker is given, with
    /// `refusal` as the reason.
    pub fn require_broker(&self, refusal: &str) -> OpsResult {
        if self.broker.is_none() {
            return Err(OpsError::usage(refusal));
        }
        Ok(())
    }
}

/// A long-running command once started: its pipeline open, the switch its signals turn and
/// the process's Prometheus recorder.
pub struct Daemon {
    /// The registry the pipeline was opened through (it opens further brokers).
    pub registry: Registry,
    /// The store and its transport.
    pub pipeline: Pipeline,
    /// Turns true on SIGTERM or SIGINT.
    pub shutdown: watch::Receiver<bool>,
    /// This process's Prometheus recorder.
    pub prometheus: postroom_console::metrics::PrometheusHandle,
}

impl Daemon {
    /// The store, as the start-up line names it: driver and location.
    pub fn store(&self) -> String {
        format!(
            "{} {}",
            self.pipeline.store.driver(),
            self.pipeline.store.location()
        )
    }

    /// Listen on `addr`, print `what listening on http://ADDR`, and serve `/metrics`,
    /// `/healthz` and `/readyz` of the pipeline there in a task of its own until the
    /// shutdown switch turns.
    pub async fn serve_status(&self, addr: SocketAddr, what: &str) -> OpsResult<StatusServer> {
        let listener = listen(addr, what).await?;
        Ok(StatusServer(tokio::spawn(postroom_console::status::serve(
            listener,
            self.prometheus.clone(),
            std::sync::Arc::new(self.pipeline.clone()),
            self.shutdown.clone(),
        ))))
    }

    /// Close the transport, then wait for the status server: it stops with the shutdown
    /// switch, or at once when the work failed (`worked` is an error). Gives back `worked`.
    pub async fn stop<T>(self, status: StatusServer, worked: OpsResult<T>) -> OpsResult<T> {
        self.pipeline.transport.close().await;
        if worked.is_err() {
            status.0.abort();
        }
        let _ = status.0.await;
        worked
    }
}

/// The task serving a long-running command's `/metrics`, `/healthz` and `/readyz`.
#[derive(Debug)]
pub struct StatusServer(tokio::task::JoinHandle<postroom_core::Result<()>>);

/// A switch that turns true on SIGTERM or SIGINT.
pub fn on_signals() -> OpsResult<watch::Receiver<bool>> {
    use tokio::signal::unix::{SignalKind, signal};
    let cannot = |e: std::io::Error| OpsError::failed(format!("cannot watch for signals: {e}"));
    let mut term = signal(SignalKind::terminate()).map_err(cannot)?;
    let mut int = signal(SignalKind::interrupt()).map_err(cannot)?;
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        eprintln!("stopping: finishing the work in hand");
        tx.send_replace(true);
        // Keep the sender: a dropped one reads as a shutdown too, but only after this.
        tx.closed().await;
    });
    Ok(rx)
}

/// Notified on each SIGHUP (a request to re-read configuration).
pub fn on_hangup() -> OpsResult<std::sync::Arc<tokio::sync::Notify>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hup = signal(SignalKind::hangup())
        .map_err(|e| OpsError::failed(format!("cannot watch for signals: {e}")))?;
    let notify = std::sync::Arc::new(tokio::sync::Notify::new());
    let n = notify.clone();
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            n.notify_one();
        }
    });
    Ok(notify)
}

/// Listen on `addr` and print `what listening on http://ADDR` (the address chosen when the
/// port is 0) on stdout.
pub async fn listen(addr: SocketAddr, what: &str) -> OpsResult<TcpListener> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| OpsError::usage(format!("cannot listen on {addr}: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| OpsError::failed(format!("listener address: {e}")))?;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{what} listening on http://{bound}");
    let _ = out.flush();
    Ok(listener)
}

/// This process's Prometheus recorder.
pub fn prometheus() -> OpsResult<postroom_console::metrics::PrometheusHandle> {
    postroom_console::metrics::install_prometheus().map_err(OpsError::from)
}
