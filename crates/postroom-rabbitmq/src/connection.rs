//! The broker link (R16): one AMQP connection, re-made with a bounded, jittered backoff when
//! it is lost (never a reconnect storm: callers asking in between get an error at once),
//! topology re-declared after each reconnect, channels opened on demand.

use crate::error::amqp;
use crate::stats::LinkStats;
use crate::topology::desired::DesiredTopology;
use lapin::{Channel, Connection, ConnectionProperties};
use postroom_core::backoff::Backoff;
use postroom_core::{Error, ErrorKind, Result};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Reconnect settings.
#[derive(Clone, Debug)]
pub struct BrokerOptions {
    /// First reconnect delay.
    pub reconnect_min: Duration,
    /// Longest reconnect delay.
    pub reconnect_max: Duration,
    /// Connection name shown in the management UI.
    pub connection_name: String,
}

impl Default for BrokerOptions {
    fn default() -> Self {
        Self {
            reconnect_min: Duration::from_millis(500),
            reconnect_max: Duration::from_secs(30),
            connection_name: "postroom".into(),
        }
    }
}

struct LinkState {
    closed: bool,
    conn: Option<Connection>,
    backoff: Backoff,
    not_before: Instant,
}

/// A connection to RabbitMQ that heals itself.
pub struct Broker {
    uri: String,
    options: BrokerOptions,
    state: tokio::sync::Mutex<LinkState>,
    stats: Arc<LinkStats>,
    topology: std::sync::Mutex<Option<DesiredTopology>>,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker")
            .field("connection_name", &self.options.connection_name)
            .finish_non_exhaustive()
    }
}

impl Broker {
    /// Connect to `uri` (`amqp://user:pass@host:5672/%2f`). Fails when the broker is not there.
    pub async fn connect(uri: &str) -> Result<Arc<Self>> {
        Self::connect_with(uri, BrokerOptions::default()).await
    }

    /// Connect with options.
    pub async fn connect_with(uri: &str, options: BrokerOptions) -> Result<Arc<Self>> {
        let conn = open(uri, &options).await?;
        let backoff = Backoff::new(options.reconnect_min, options.reconnect_max);
        Ok(Arc::new(Self {
            uri: uri.to_string(),
            options,
            state: tokio::sync::Mutex::new(LinkState {
                closed: false,
                conn: Some(conn),
                backoff,
                not_before: Instant::now(),
            }),
            stats: Arc::new(LinkStats::default()),
            topology: std::sync::Mutex::new(None),
        }))
    }

    /// Counters of this link.
    #[must_use]
    pub fn stats(&self) -> Arc<LinkStats> {
        self.stats.clone()
    }

    /// Re-declare `topology` (exchanges, queues, bindings) after every reconnect. Policies
    /// live on the broker and need no re-declaring.
    pub fn redeclare_on_reconnect(&self, topology: DesiredTopology) {
        *self.topology.lock().expect("topology lock") = Some(topology);
    }

    /// A new channel. When the connection is lost it is re-made, at most once per backoff
    /// delay; a caller arriving before the delay is over gets a `Connection` error at once.
    pub async fn channel(&self) -> Result<Channel> {
        let mut st = self.state.lock().await;
        if st.closed {
            return Err(Error::new(
                ErrorKind::Closed,
                "the broker link was closed (shutdown)",
            ));
        }
        if let Some(conn) = &st.conn {
            if conn.status().connected() {
                match conn.create_channel().await {
                    Ok(ch) => return Ok(ch),
                    Err(e) => {
                        tracing::warn!(error = %e, "opening a channel failed: reconnecting");
                        st.conn = None;
                    }
                }
            } else {
                st.conn = None;
            }
        }
        let now = Instant::now();
        if now < st.not_before {
            return Err(Error::new(
                ErrorKind::Connection,
                format!(
                    "broker connection lost; next reconnect in {} ms",
                    (st.not_before - now).as_millis()
                ),
            ));
        }
        match open(&self.uri, &self.options).await {
            Ok(conn) => {
                self.stats.record_reconnect();
                st.backoff.reset();
                let ch = conn
                    .create_channel()
                    .await
                    .map_err(|e| amqp("opening a channel", e))?;
                let topology = self.topology.lock().expect("topology lock").clone();
                if let Some(t) = topology {
                    crate::topology::amqp::declare(&ch, &t).await?;
                }
                st.conn = Some(conn);
                tracing::info!("reconnected to the broker");
                Ok(ch)
            }
            Err(e) => {
                let delay = st.backoff.next_delay();
                st.not_before = Instant::now() + delay;
                tracing::warn!(error = %e, retry_in_ms = delay.as_millis() as u64, "reconnect failed");
                Err(e)
            }
        }
    }

    /// Close the connection (graceful shutdown: unacked deliveries go back to their queues).
    pub async fn close(&self) {
        let mut st = self.state.lock().await;
        if let Some(conn) = st.conn.take()
            && let Err(e) = conn.close(200, "postroom shutdown").await
        {
            tracing::debug!(error = %e, "closing the connection");
        }
        st.closed = true;
    }

    /// Drop the connection without closing it politely, as a network failure would (tests of
    /// the reconnect path).
    pub async fn sever(&self) {
        let mut st = self.state.lock().await;
        if let Some(conn) = st.conn.take() {
            let _ = conn.close(320, "severed").await;
        }
    }
}

async fn open(uri: &str, options: &BrokerOptions) -> Result<Connection> {
    let props = ConnectionProperties::default()
        .with_connection_name(options.connection_name.clone().into());
    Connection::connect(uri, props)
        .await
        .map_err(|e| amqp(format!("connecting to {}", redact(uri)), e))
}

/// The URI without its password, for logs.
#[must_use]
pub fn redact(uri: &str) -> String {
    match (uri.find("://"), uri.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &uri[s + 3..at];
            let user = creds.split(':').next().unwrap_or("");
            format!("{}{}:***{}", &uri[..s + 3], user, &uri[at..])
        }
        _ => uri.to_string(),
    }
}
