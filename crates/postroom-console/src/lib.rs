//! # postroom-console
//!
//! The web console of postroom: the parking lot (search by type, consumer, error class and
//! code, time range and error text; failure groups; every diagnostic of a message, payloads
//! only for roles allowed to see them), redrive from the browser (one message, a selection
//! or a group; a dry run first; a rate; live progress; pause, resume, cancel; a warning when
//! new messages join the group meanwhile), archive and purge, edit-and-redrive keeping the
//! message id, an audit of every state change; the pipeline (backlogs, retry stages,
//! oldest-message age, rates, relay lag, charts of the last hour; the inbox feeds it watches:
//! up or down, and per consumer stored, duplicates absorbed and lag); Prometheus `/metrics`,
//! `/healthz` and `/readyz`. Server-rendered HTML with embedded assets: it works offline.
//!
//! [`Backends::for_store`] makes the console's backend from a store opened by
//! `postroom_ops`' registry (what `postroom serve` does); [`status`] serves `/metrics`,
//! `/healthz` and `/readyz` alone, for the other long-running commands (`postroom relay`,
//! `postroom ingest`).
//!
//! Auth may be off only on loopback. Users come from a file or the environment
//! ([`auth::Users::from_env`]), never from the command line. What the console protects and
//! how (roles, payloads and error texts, CSRF, DNS rebinding, sessions, login limits, equal
//! login cost, request and audit bounds, headers, cookies) is in `docs/console-security.md`.
//!
//! ```no_run
//! # async fn run() -> postroom_core::Result<()> {
//! use postroom_console::{Console, ConsoleConfig, SqliteBackend};
//! use std::sync::Arc;
//!
//! let store = postroom_sqlite::SqliteStore::open("postroom.db").await?;
//! let backend = Arc::new(SqliteBackend::new(store));
//! let config = ConsoleConfig::new("127.0.0.1:8080".parse().unwrap());
//! let console = Console::new(backend.clone(), backend, config)?;
//! let (_stop, shutdown) = tokio::sync::watch::channel(false);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await.unwrap();
//! console.serve(listener, shutdown).await?;
//! # Ok(()) }
//! ```

pub mod audit;
pub mod auth;
pub mod backend;
pub mod feeds;
pub mod groups;
mod html;
pub mod metrics;
pub mod pipeline;
pub mod redrive;
mod routes;
pub mod status;

pub use auth::{Auth, Role, Users};
pub use backend::{
    Backends, ConsoleStore, ConsumerFigures, ParkingConsole, PgBackend, PipelineProbe,
    SqliteBackend, StoreBackend,
};

use feeds::{FeedScraper, FeedTarget};
use metrics_exporter_prometheus::PrometheusHandle;
use pipeline::History;
use postroom_core::{Error, ErrorKind, Result};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// How the console runs.
#[derive(Clone, Debug)]
#[must_use]
pub struct ConsoleConfig {
    /// Where it listens (default loopback).
    pub bind: SocketAddr,
    /// Who may use it. [`Auth::Disabled`] is refused unless `bind` is a loopback address.
    pub auth: Auth,
    /// Mark cookies `Secure` on every answer. Without it they are Secure on answers to
    /// requests a TLS-terminating proxy marked as having come over TLS
    /// (`X-Forwarded-Proto: https`, or `proto=https` in `Forwarded`).
    pub secure_cookies: bool,
    /// Host names the console is reached by besides loopback's and the listen address (a
    /// name in front of it). With auth off, and whenever names are given, a request for any
    /// other host is refused (DNS rebinding); a POST from another origin always is.
    pub allowed_hosts: Vec<String>,
    /// The header a proxy in front names the client in (`X-Forwarded-For`, `X-Real-IP`):
    /// its last address is taken as the client's for the per-client login limits. Only for
    /// a console reachable through that proxy alone; without it, the peer address counts.
    pub client_address_header: Option<String>,
    /// How many failed logins and wrong API tokens lock a client or a user name out.
    pub login_limits: auth::LoginLimits,
    /// A session ends after this long without a request.
    pub session_idle: Duration,
    /// How long archived messages are kept before they may be purged.
    pub retention: Duration,
    /// How often the pipeline is sampled for the charts and gauges.
    pub sample_every: Duration,
    /// The Prometheus recorder `/metrics` renders (see [`metrics::install_prometheus`]).
    pub prometheus: Option<PrometheusHandle>,
    /// The inbox feeds whose `/metrics` the sampler reads (each name once).
    pub feeds: Vec<FeedTarget>,
}

/// The longest a feed's `/metrics` is waited for (less when samples are more frequent).
const FEED_TIMEOUT: Duration = Duration::from_secs(2);

postroom_core::setters!(ConsoleConfig {
    /// Set the inbox feeds to watch.
    feeds: Vec<FeedTarget>,
    /// Set who may use it.
    auth: Auth,
    /// Set the sampling interval.
    sample_every: Duration,
    /// Set the host names it is reached by besides loopback's and the listen address.
    allowed_hosts: Vec<String>,
    /// Set the limits on failed logins and wrong API tokens.
    login_limits: auth::LoginLimits,
});

/// The shortest sampling interval accepted.
pub const MIN_SAMPLE_EVERY: Duration = Duration::from_millis(100);
/// The longest sampling interval accepted (the charts show an hour).
pub const MAX_SAMPLE_EVERY: Duration = Duration::from_secs(3600);

impl ConsoleConfig {
    /// Defaults: auth off (so loopback only), plain-HTTP cookies, sessions idle for 8 hours,
    /// archive retention 30 days, a sample every 10 seconds, no recorder, no feeds.
    pub fn new(bind: SocketAddr) -> Self {
        Self {
            bind,
            auth: Auth::Disabled,
            secure_cookies: false,
            allowed_hosts: Vec::new(),
            client_address_header: None,
            login_limits: auth::LoginLimits::default(),
            session_idle: Duration::from_secs(8 * 3600),
            retention: Duration::from_secs(30 * 86_400),
            sample_every: Duration::from_secs(10),
            prometheus: None,
            feeds: Vec::new(),
        }
    }

    /// Set the recorder `/metrics` renders.
    pub fn prometheus(mut self, handle: PrometheusHandle) -> Self {
        self.prometheus = Some(handle);
        self
    }

    /// Refuse auth off on an address other than loopback, a sampling interval outside
    /// [`MIN_SAMPLE_EVERY`]..=[`MAX_SAMPLE_EVERY`], a zero idle time, a host name that is not
    /// one, a header name that is not one, and two feeds of one name.
    pub fn validate(&self) -> Result<()> {
        check_bind(&self.auth, self.bind)?;
        feeds::check_unique(&self.feeds)?;
        if !(MIN_SAMPLE_EVERY..=MAX_SAMPLE_EVERY).contains(&self.sample_every) {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "the sampling interval must be between {MIN_SAMPLE_EVERY:?} and {MAX_SAMPLE_EVERY:?}, not {:?}",
                    self.sample_every
                ),
            ));
        }
        if self.session_idle.is_zero() {
            return Err(Error::new(
                ErrorKind::Config,
                "the session idle time must be longer than zero",
            ));
        }
        self.host_names()?;
        if let Some(h) = &self.client_address_header
            && axum::http::HeaderName::from_bytes(h.as_bytes()).is_err()
        {
            return Err(Error::new(
                ErrorKind::Config,
                format!("the client address header {h:?} is not a header name"),
            ));
        }
        Ok(())
    }

    /// The allowed host names as compared.
    fn host_names(&self) -> Result<Vec<String>> {
        self.allowed_hosts
            .iter()
            .map(|h| routes::hosts::host_name(h))
            .collect()
    }
}

fn check_bind(auth: &Auth, addr: SocketAddr) -> Result<()> {
    if matches!(auth, Auth::Disabled) && !addr.ip().is_loopback() {
        return Err(Error::new(
            ErrorKind::Config,
            format!(
                "the console listens on {addr}, not loopback: define users ({} or {}) to turn auth on",
                auth::USERS_FILE_ENV,
                auth::USERS_ENV
            ),
        ));
    }
    Ok(())
}

/// The console: its state, its routes and its sampler.
pub struct Console {
    state: Arc<routes::AppState>,
    config: ConsoleConfig,
}

impl Console {
    /// A console over `parking` and `probe` (often the same backend).
    pub fn new(
        parking: Arc<dyn ParkingConsole>,
        probe: Arc<dyn PipelineProbe>,
        config: ConsoleConfig,
    ) -> Result<Self> {
        config.validate()?;
        let audit = audit::Auditor::new(parking.clone());
        let feeds = Arc::new(FeedScraper::new(
            config.feeds.clone(),
            FEED_TIMEOUT.min(config.sample_every),
        )?);
        let hosts = routes::hosts::HostPolicy::new(
            config.bind,
            &config.host_names()?,
            matches!(config.auth, Auth::Disabled),
        );
        let state = Arc::new(routes::AppState {
            runs: Arc::new(redrive::Runs::new(parking.clone(), audit.clone())),
            parking,
            probe,
            sessions: auth::Sessions::new(config.session_idle),
            visitors: auth::visitor::VisitorKey::random(),
            tokens: auth::tokens::TokenCache::default(),
            logins: auth::Logins::new(config.login_limits),
            hosts,
            client_header: config.client_address_header.clone(),
            secure_cookies: config.secure_cookies,
            auth: config.auth.clone(),
            audit,
            history: Arc::new(History::for_hour(config.sample_every)),
            prometheus: config.prometheus.clone(),
            feeds,
            retention: config.retention,
        });
        Ok(Self { state, config })
    }

    /// The routes, for embedding in another axum application. Serve them with
    /// `into_make_service_with_connect_info::<SocketAddr>()` for the per-client login
    /// limits (without the peer address only the per-user ones apply).
    pub fn router(&self) -> axum::Router {
        routes::router(self.state.clone())
    }

    /// The samples kept for the charts.
    #[must_use]
    pub fn history(&self) -> Arc<History> {
        self.state.history.clone()
    }

    /// Sample the pipeline until `shutdown` turns true.
    pub async fn run_sampler(&self, shutdown: watch::Receiver<bool>) {
        pipeline::run_sampler(
            self.state.history.clone(),
            self.state.probe.clone(),
            self.state.parking.clone(),
            self.state.prometheus.clone(),
            self.state.feeds.clone(),
            self.config.sample_every,
            shutdown,
        )
        .await;
    }

    /// Serve on `listener` (and sample the pipeline) until `shutdown` turns true.
    pub async fn serve(self, listener: TcpListener, shutdown: watch::Receiver<bool>) -> Result<()> {
        let addr = listener
            .local_addr()
            .map_err(|e| Error::new(ErrorKind::Io, format!("listener address: {e}")))?;
        check_bind(&self.config.auth, addr)?;
        let this = Arc::new(self);
        let sampler = {
            let this = this.clone();
            let shutdown = shutdown.clone();
            tokio::spawn(async move { this.run_sampler(shutdown).await })
        };
        let mut stop = shutdown.clone();
        tracing::info!(%addr, "console listening");
        let served = axum::serve(
            listener,
            this.router()
                .into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(async move {
            while !*stop.borrow() {
                if stop.changed().await.is_err() {
                    break;
                }
            }
        })
        .await;
        sampler.abort();
        served.map_err(|e| Error::new(ErrorKind::Io, format!("console server: {e}")))
    }
}

/// Bind `config.bind`, then serve a console over `parking` and `probe` until `shutdown`
/// turns true.
pub async fn serve(
    config: ConsoleConfig,
    parking: Arc<dyn ParkingConsole>,
    probe: Arc<dyn PipelineProbe>,
    shutdown: watch::Receiver<bool>,
) -> Result<()> {
    config.validate()?;
    let listener = TcpListener::bind(config.bind).await.map_err(|e| {
        Error::new(
            ErrorKind::Config,
            format!("cannot listen on {}: {e}", config.bind),
        )
    })?;
    Console::new(parking, probe, config)?
        .serve(listener, shutdown)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_off_is_refused_beyond_loopback() {
        let open = ConsoleConfig::new("0.0.0.0:8080".parse().unwrap());
        assert!(open.validate().is_err());
        assert!(
            ConsoleConfig::new("127.0.0.1:8080".parse().unwrap())
                .validate()
                .is_ok()
        );
        assert!(
            ConsoleConfig::new("[::1]:8080".parse().unwrap())
                .validate()
                .is_ok()
        );
        let users =
            Users::parse(&format!("a viewer {}", auth::hash_password("x").unwrap())).unwrap();
        assert!(open.auth(Auth::Users(users)).validate().is_ok());
    }
}
