//! The broker link: one AMQP connection, re-made with a bounded, jittered backoff when
//! it is lost (never a reconnect storm: callers asking in between get an error at once),
//! topology re-declared after each reconnect, channels opened on demand.
//!
//! Publishing and consuming use links of their own ([`Broker::sibling`]): under a memory or
//! disk alarm the broker blocks every connection that publishes, and a consumer sharing that
//! connection could no longer ack.

use crate::error::amqp;
use crate::stats::LinkStats;
use crate::topology::desired::DesiredTopology;
use lapin::{Channel, ChannelState, ChannelStatus, Connection, ConnectionProperties};
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
    /// Longest wait for a publisher confirm (a connection the broker blocked under an alarm
    /// never confirms); the message is then handed back with a `Timeout` error.
    pub confirm_timeout: Duration,
    /// Publishes a publisher keeps unconfirmed at once: a batch larger than this sends the
    /// next message as soon as the oldest one is confirmed, instead of waiting for the whole
    /// batch (at least 1).
    pub confirm_window: usize,
    /// Channels a publisher confirms on at once (1 to 64, a value outside is taken as the
    /// nearest; default 1). With one, callers
    /// take turns: messages that arrive while a group waits for its confirms go out together
    /// in the next group. With more, a caller whose confirms are outstanding holds one
    /// channel and another caller sends on the next one instead of waiting (opened as
    /// callers first need them): lower latency for producers sending at once, but smaller
    /// groups, which cost the broker more per message — on the bench's `e2e` workload four
    /// channels measured about a tenth fewer messages a second than one.
    pub publisher_channels: usize,
    /// Longest wait for the broker while setting the link up: connecting (TCP, TLS, the
    /// AMQP handshake), opening a channel, re-declaring the topology. The client leaves a
    /// request on a connection that is going away unanswered; bounded, the link is dropped
    /// and made again instead of waiting forever.
    pub setup_timeout: Duration,
}

impl Default for BrokerOptions {
    fn default() -> Self {
        Self {
            reconnect_min: Duration::from_millis(500),
            reconnect_max: Duration::from_secs(30),
            connection_name: "postroom".into(),
            confirm_timeout: Duration::from_secs(30),
            confirm_window: 256,
            publisher_channels: 1,
            setup_timeout: Duration::from_secs(10),
        }
    }
}

struct LinkState {
    closed: bool,
    connected_once: bool,
    conn: Option<Connection>,
    backoff: Backoff,
    not_before: Instant,
}

/// A connection to RabbitMQ that heals itself.
pub struct Broker {
    uri: String,
    options: BrokerOptions,
    state: tokio::sync::Mutex<LinkState>,
    /// Channels handed out: on a clean close, those their holders are closing get the broker's
    /// answer before the connection is closed.
    channels: std::sync::Mutex<Vec<Channel>>,
    /// Channels handed out and then forgotten (their holder dropped them), until they are
    /// closed: the client closes each with its last handle, and a clean close lets it finish.
    forgotten: std::sync::Mutex<Vec<ChannelStatus>>,
    closing: std::sync::atomic::AtomicBool,
    closing_now: tokio::sync::Notify,
    stats: Arc<LinkStats>,
    topology: std::sync::Mutex<Option<DesiredTopology>>,
}

postroom_core::debug_showing!(Broker { connection_name: options.connection_name });

impl Broker {
    /// Connect to `uri` (`amqp://user:pass@host:5672/%2f`). Fails when the broker is not there.
    pub async fn connect(uri: &str) -> Result<Arc<Self>> {
        Self::connect_with(uri, BrokerOptions::default()).await
    }

    /// Connect with options.
    pub async fn connect_with(uri: &str, options: BrokerOptions) -> Result<Arc<Self>> {
        let connecting = format!("connecting to {}", redact(uri));
        let conn = within(options.setup_timeout, &connecting, open(uri, &options)).await?;
        Ok(Self::link(
            uri.to_string(),
            options,
            Some(conn),
            Arc::new(LinkStats::default()),
        ))
    }

    /// Another link to the same broker with the same options, its connection named
    /// `<name>.<role>`, connected on first use (the publishing link of a transport whose
    /// consumers use this one).
    #[must_use]
    pub fn sibling(&self, role: &str) -> Arc<Self> {
        let mut options = self.options.clone();
        options.connection_name = format!("{}.{role}", options.connection_name);
        Self::link(self.uri.clone(), options, None, self.stats.clone())
    }

    /// A link to `uri` counting into `stats`: connected with `conn`, or connecting on first
    /// use when it is `None`.
    fn link(
        uri: String,
        options: BrokerOptions,
        conn: Option<Connection>,
        stats: Arc<LinkStats>,
    ) -> Arc<Self> {
        let backoff = Backoff::new(options.reconnect_min, options.reconnect_max);
        Arc::new(Self {
            uri,
            options,
            state: tokio::sync::Mutex::new(LinkState {
                closed: false,
                connected_once: conn.is_some(),
                conn,
                backoff,
                not_before: Instant::now(),
            }),
            stats,
            topology: std::sync::Mutex::new(None),
            channels: std::sync::Mutex::new(Vec::new()),
            forgotten: std::sync::Mutex::new(Vec::new()),
            closing: std::sync::atomic::AtomicBool::new(false),
            closing_now: tokio::sync::Notify::new(),
        })
    }

    /// The options of this link.
    #[must_use]
    pub fn options(&self) -> &BrokerOptions {
        &self.options
    }

    /// Run a client request that sets the link up, bounded by
    /// [`BrokerOptions::setup_timeout`].
    pub(crate) async fn bounded<T>(
        &self,
        what: &str,
        request: impl std::future::Future<Output = std::result::Result<T, lapin::Error>>,
    ) -> Result<T> {
        within(self.options.setup_timeout, what, async {
            request.await.map_err(|e| amqp(what, e))
        })
        .await
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

    /// True once [`close`](Self::close) began.
    #[must_use]
    pub fn is_closing(&self) -> bool {
        self.closing.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Returns once [`close`](Self::close) began (at once if it has): what waits on the broker
    /// (a publisher's confirms) stops waiting instead of running into its timeout.
    pub async fn until_closing(&self) {
        loop {
            let notified = self.closing_now.notified();
            if self.is_closing() {
                return;
            }
            notified.await;
        }
    }

    /// A new channel. When the connection is lost it is re-made, at most once per backoff
    /// delay; a caller arriving before the delay is over gets a `Connection` error at once.
    pub async fn channel(&self) -> Result<Channel> {
        let ch = self.open_channel().await?;
        let mut channels = self.channels.lock().expect("channels lock");
        channels.retain(|c| c.status().connected());
        channels.push(ch.clone());
        Ok(ch)
    }

    /// Stop tracking `channel` (its holder is gone): once its last handle is dropped the
    /// client closes it, so a subscriber dropped without `close` gives its unsettled
    /// deliveries back to the queue instead of keeping them on a channel nobody reads.
    pub fn forget(&self, channel: &Channel) {
        self.channels
            .lock()
            .expect("channels lock")
            .retain(|c| c.id() != channel.id());
        let mut forgotten = self.forgotten.lock().expect("forgotten lock");
        forgotten.retain(still_open);
        forgotten.push(channel.status().clone());
    }

    async fn open_channel(&self) -> Result<Channel> {
        let mut st = self.state.lock().await;
        if st.closed {
            return Err(Error::new(
                ErrorKind::Closed,
                "the broker link was closed (shutdown)",
            ));
        }
        if let Some(conn) = &st.conn {
            if conn.status().connected() {
                match self
                    .bounded("opening a channel", conn.create_channel())
                    .await
                {
                    Ok(ch) => return Ok(ch),
                    Err(e) => {
                        tracing::warn!(error = %e, "opening a channel failed: reconnecting");
                        if let Some(conn) = st.conn.take() {
                            // Not waited for: a connection that left a request unanswered
                            // may leave its close unanswered too.
                            tokio::spawn(async move {
                                let _ = tokio::time::timeout(
                                    Duration::from_secs(5),
                                    conn.close(200, "postroom: reconnecting"),
                                )
                                .await;
                            });
                        }
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
        // One attempt per backoff delay, whatever part of it fails: the backoff restarts only
        // once the connection, a channel and the re-declared topology all succeeded, so a
        // declare the broker keeps refusing (PRECONDITION_FAILED) never turns into a storm.
        match self.reconnect(st.connected_once).await {
            Ok((conn, ch)) => {
                st.backoff.reset();
                st.connected_once = true;
                st.conn = Some(conn);
                tracing::info!("connected to the broker");
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

    /// Open a connection and a channel and declare the topology on it; the connection is
    /// closed again when a later step fails.
    async fn reconnect(&self, again: bool) -> Result<(Connection, Channel)> {
        let limit = self.options.setup_timeout;
        let conn = within(limit, "connecting", open(&self.uri, &self.options)).await?;
        if again {
            self.stats.record_reconnect();
        }
        let ready = async {
            let ch = self
                .bounded("opening a channel", conn.create_channel())
                .await?;
            let topology = self.topology.lock().expect("topology lock").clone();
            if let Some(t) = topology {
                let declare = crate::topology::amqp::declare(&ch, &t);
                within(limit, "declaring the topology", declare).await?;
            }
            Ok::<_, Error>(ch)
        }
        .await;
        match ready {
            Ok(ch) => Ok((conn, ch)),
            Err(e) => {
                let _ = tokio::time::timeout(
                    Duration::from_secs(5),
                    conn.close(200, "postroom: declare failed"),
                )
                .await;
                Err(e)
            }
        }
    }

    /// Close the link (graceful shutdown: unacked deliveries go back to their queues): no new
    /// channel is opened from now on, waits on confirms end, channels their holders are
    /// closing get the broker's answer, then the connection is closed (which closes every
    /// channel still open); returns once the connection's I/O loop has ended, so a process may
    /// exit right after.
    pub async fn close(&self) {
        self.closing
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.closing_now.notify_waiters();
        let mut st = self.state.lock().await;
        st.closed = true;
        // Held until the connection is closed: dropping the last handle of an open channel
        // makes the client close it in a task of its own, which would race the connection's
        // close.
        let handed_out: Vec<Channel> =
            std::mem::take(&mut *self.channels.lock().expect("channels lock"));
        let forgotten = std::mem::take(&mut *self.forgotten.lock().expect("forgotten lock"));
        if let Some(conn) = st.conn.take() {
            settle_closed_channels(&handed_out, &forgotten).await;
            if let Err(e) = conn.close(200, "postroom shutdown").await {
                tracing::debug!(error = %e, "closing the connection");
            }
            wait_for_io_loop(conn).await;
        }
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

/// `step` of setting the link up, given up after `limit`: the client leaves a request on a
/// connection that is going away unanswered, and a host that takes the TCP connection but never
/// speaks AMQP never answers at all. Unanswered, the link is not usable: a `Connection` error.
async fn within<T>(
    limit: Duration,
    step: &str,
    setup: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    tokio::time::timeout(limit, setup)
        .await
        .unwrap_or_else(|_| {
            Err(Error::new(
                ErrorKind::Connection,
                format!("{step}: no answer from the broker within {limit:?}"),
            ))
        })
}

/// Open a connection whose internal tasks run on the caller's tokio runtime and whose socket
/// readiness comes from that runtime's reactor: lapin's defaults add a thread pool and a
/// reactor thread of their own, and every ack and publish then crosses threads twice more
/// (measured on the e2e bench: about a sixth fewer context switches and a faster per-message
/// consumer). The connection lives as long as the runtime it was opened on.
async fn open(uri: &str, options: &BrokerOptions) -> Result<Connection> {
    let props = ConnectionProperties::default()
        .with_connection_name(options.connection_name.clone().into())
        .with_executor(tokio_executor_trait::Tokio::current())
        .with_reactor(tokio_reactor_trait::Tokio);
    // amqp:// or amqps:// (rustls, certificates verified, `cacertfile` names the CA).
    crate::tls::connect(uri, props).await
}

/// Wait (up to five seconds) for the I/O loop of a connection that was closed to end. The loop
/// runs on a thread of its own and takes socket readiness from the runtime's reactor: a process
/// that exits while it is still finishing the close tears the reactor down under it, and lapin
/// logs that as errors.
async fn wait_for_io_loop(conn: Connection) {
    let ended = tokio::task::spawn_blocking(move || conn.run());
    match tokio::time::timeout(Duration::from_secs(5), ended).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => tracing::debug!(error = %e, "the connection's I/O loop ended with"),
        Ok(Err(e)) => tracing::debug!(error = %e, "waiting for the connection's I/O loop"),
        Err(_) => tracing::debug!("the connection's I/O loop did not end within 5s"),
    }
}

/// Before the connection is closed: let the channels a holder closed (a subscriber that
/// stopped, a publisher that gave a channel up) or dropped (a subscriber whose task was
/// aborted) finish closing.
///
/// The client forgets a closed channel in a task of its own, run after the broker's answer to
/// the channel's close; closing the connection forgets every channel it still knows. When the
/// connection's close is answered before that task ran (a busy runtime, a holder closing its
/// channel as the program closes the link), the channel is forgotten twice and the client logs
/// a connection error ("invalid channel"). A dropped channel is closed by the client in a task
/// of its own too: run after the connection began closing, that close fails and is logged the
/// same way ("invalid channel state"). So: wait (up to 5 s) until no close is in flight and
/// every dropped channel is closed, then, when any was closed, give the client's task a
/// moment.
async fn settle_closed_channels(handed_out: &[Channel], forgotten: &[ChannelStatus]) {
    let unsettled =
        || handed_out.iter().any(|c| c.status().closing()) || forgotten.iter().any(still_open);
    let deadline = Instant::now() + Duration::from_secs(5);
    while unsettled() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    if !forgotten.is_empty() || handed_out.iter().any(|c| !c.status().connected()) {
        tokio::time::sleep(FORGET_PAUSE).await;
    }
}

/// True until the channel is closed (or failed).
fn still_open(status: &ChannelStatus) -> bool {
    matches!(
        status.state(),
        ChannelState::Initial | ChannelState::Connected | ChannelState::Closing
    )
}

/// How long [`settle_closed_channels`] leaves the client to forget the channels closed before
/// the connection: its task lagged the broker's answer by well under a millisecond on a loaded
/// two-core host.
const FORGET_PAUSE: Duration = Duration::from_millis(50);

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
