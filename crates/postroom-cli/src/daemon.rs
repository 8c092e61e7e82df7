//! What the long-running commands (`serve`, `relay`, `ingest`, `feed`) share: the store and
//! the transport opened through `postroom::Service` (the one composition root), a switch that SIGTERM and SIGINT turn, the
//! Prometheus recorder, and a listener whose address is printed (port 0 picks a free one),
//! serving `/metrics`, `/healthz` and `/readyz` until the switch turns.

use crate::cli::StoreArgs;
use crate::config::ConfigFile;
use crate::connect;
use clap::Args;
use postroom::{Running, Service, Stack};
use postroom_ops::args::PasswordArgs;
use postroom_ops::registry::{QueueOptions, Store};
use postroom_ops::{OpsError, OpsResult, Registry, TopologyFile, UrlText};
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
    /// Broker URL (the forms this build opens are listed in `--help`). Without it, the queue
    /// in the database's own tables.
    #[arg(long, env = "POSTROOM_BROKER", hide_env_values = true, help = format!(
        "Broker URL: {}. Without it, the queue in the database's own tables. Put the password in \
         POSTROOM_BROKER_PASSWORD or --broker-password-file rather than here",
        postroom::registry::broker_forms()))]
    pub broker: Option<UrlText>,
    /// Topology file: the consumers and the routes they take (TOML: prefix, ladder,
    /// [[consumers]] name + bindings, and the broker's own keys). Needed with --broker
    /// (default topology.toml); without a broker it is optional.
    #[arg(long = "topology", env = "POSTROOM_TOPOLOGY", value_name = "FILE")]
    pub topology: Option<PathBuf>,
}

impl PipelineArgs {
    /// The service of these flags, opened (`create`: a SQLite file may be created): the
    /// database, the broker when one is given, and the topology file's workload. The broker's
    /// topology is not declared by a daemon (that is `postroom topology apply`'s), so a
    /// console or an ingest never changes the broker.
    pub async fn service(
        &self,
        config: &ConfigFile,
        passwords: &PasswordArgs,
        create: bool,
    ) -> OpsResult<Service> {
        let mut b = Service::builder()
            .database_at(connect::database(&self.store, config, passwords)?)
            .declare_topology(false)
            .queue_lease(QueueOptions::default().lease);
        if let Some(prefix) = self
            .store
            .table_prefix
            .as_ref()
            .or(config.table_prefix.as_ref())
        {
            b = b.table_prefix(prefix);
        }
        if !create {
            b = b.existing_database();
        }
        let topology = match (&self.topology, &self.broker) {
            (Some(path), _) => Some(TopologyFile::read(path)?),
            (None, Some(_)) => Some(TopologyFile::read(std::path::Path::new("topology.toml"))?),
            (None, None) => None,
        };
        if let Some(file) = topology {
            b = b.topology(file);
        }
        if let Some(broker) = &self.broker {
            b = b.broker_at(connect::broker(broker, passwords)?);
        }
        Ok(b.open().await?)
    }

    /// Start a long-running command: watch for SIGTERM and SIGINT, install the Prometheus
    /// recorder, then open the service of these flags (`create`: a SQLite file may be
    /// created), let `with` add what it runs, and start it.
    pub async fn start_with(
        &self,
        config: &ConfigFile,
        passwords: &PasswordArgs,
        create: bool,
        with: impl FnOnce(Service) -> Service,
    ) -> OpsResult<Daemon> {
        let shutdown = on_signals()?;
        let prometheus = prometheus()?;
        let running = with(self.service(config, passwords, create).await?)
            .start()
            .await?;
        Ok(Daemon {
            registry: Registry::builtin(),
            stack: running.stack().clone(),
            running,
            shutdown,
            prometheus,
        })
    }

    /// [`start_with`](Self::start_with) running nothing but what the command runs over the
    /// stack itself.
    pub async fn start(
        &self,
        config: &ConfigFile,
        passwords: &PasswordArgs,
        create: bool,
    ) -> OpsResult<Daemon> {
        self.start_with(config, passwords, create, |s| s).await
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

/// A long-running command once started: its service running, the switch its signals turn
/// and the process's Prometheus recorder.
pub struct Daemon {
    /// The registry further brokers are opened through (the relay's extra targets).
    pub registry: Registry,
    /// The store and its transport, as the running service holds them.
    pub stack: Stack,
    running: Running,
    /// Turns true on SIGTERM or SIGINT.
    pub shutdown: watch::Receiver<bool>,
    /// This process's Prometheus recorder.
    pub prometheus: postroom_console::metrics::PrometheusHandle,
}

impl Daemon {
    /// The store, as the start-up line names it: driver and location.
    pub fn store(&self) -> String {
        match self.stack.store() {
            Some(s) => format!("{} {}", s.driver(), s.location()),
            None => "no store".into(),
        }
    }

    /// The open store.
    pub fn opened_store(&self) -> OpsResult<&std::sync::Arc<dyn Store>> {
        postroom_ops::store_of(&self.stack)
    }

    /// Listen on `addr`, print `what listening on http://ADDR`, and serve `/metrics`,
    /// `/healthz` and `/readyz` of the stack there in a task of its own until the
    /// shutdown switch turns.
    pub async fn serve_status(&self, addr: SocketAddr, what: &str) -> OpsResult<StatusServer> {
        let listener = listen(addr, what).await?;
        Ok(StatusServer(tokio::spawn(postroom_console::status::serve(
            listener,
            self.prometheus.clone(),
            std::sync::Arc::new(self.stack.clone()),
            self.shutdown.clone(),
        ))))
    }

    /// Wait for the shutdown switch.
    pub async fn until_stopped(&self) {
        let mut stop = self.shutdown.clone();
        while !*stop.borrow() {
            if stop.changed().await.is_err() {
                break;
            }
        }
    }

    /// Shut the service down: its tasks drained, its transport closed.
    pub async fn shutdown(self) {
        self.running.shutdown().await;
    }

    /// Shut the service down (its tasks drained, its transport closed), then wait for the
    /// status server: it stops with the shutdown switch, or at once when the work failed
    /// (`worked` is an error). Gives back `worked`.
    pub async fn stop<T>(self, status: StatusServer, worked: OpsResult<T>) -> OpsResult<T> {
        self.running.shutdown().await;
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
