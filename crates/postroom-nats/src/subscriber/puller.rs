//! The pull loop of one durable: a pull request for as many copies as the lane may still hold
//! (its prefetch), with an expiry and idle heartbeats; the copies go to the subscriber's
//! channel, each holding one prefetch permit until it is settled or dropped. The first pull
//! request is flushed to the server and the subscriber told: from then on the lane is attached.
//!
//! Failures it recovers from, with a bounded, jittered backoff between tries:
//! - two heartbeats missed (a server restart, a lost connection, a pull request the server
//!   forgot): ask again;
//! - the durable or its stream deleted (409 `Consumer Deleted`, or no responders): recreate
//!   the consumer's part of the topology, counted in `postroom_consumer_cancellations_total`
//!   and `postroom_reconnects_total`.

use super::received::{Describe, ack_info};
use crate::config::NatsConfig;
use crate::connection::{NatsConnection, TRANSPORT};
use crate::delivery::{DeliveryContext, NatsDelivery, spawn_heartbeat};
use crate::naming::{Lane, subject_matches};
use crate::topology::Topology;
use async_nats::StatusCode;
use async_nats::jetstream::message::Acker;
use futures::StreamExt;
use postroom_core::backoff::Backoff;
use postroom_core::metrics as m;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore, mpsc, oneshot};

/// Largest pull request.
const MAX_BATCH: usize = 256;

/// One durable being pulled.
pub(crate) struct Puller {
    pub(crate) conn: NatsConnection,
    /// The consumer's part of the topology (to recreate what was deleted).
    pub(crate) config: NatsConfig,
    pub(crate) stream: String,
    pub(crate) lane: Lane,
    pub(crate) describe: Describe,
    pub(crate) ctx: Arc<DeliveryContext>,
    pub(crate) permits: Arc<Semaphore>,
    pub(crate) tx: mpsc::Sender<NatsDelivery>,
    /// Told once the server holds this lane's first pull request (the lane is attached).
    pub(crate) attached: Option<oneshot::Sender<()>>,
}

enum End {
    /// The request finished (expired, or every copy asked for arrived).
    Done,
    /// The durable or its stream is gone.
    Gone(String),
    /// Heartbeats missed or the connection failed.
    Broken(String),
}

impl Puller {
    pub(crate) async fn run(mut self) {
        let mut attached = self.attached.take();
        let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
        loop {
            let first = tokio::select! {
                p = self.permits.clone().acquire_owned() => match p {
                    Ok(p) => p,
                    Err(_) => return,
                },
                () = self.tx.closed() => return,
            };
            let mut held = vec![first];
            while held.len() < MAX_BATCH {
                match self.permits.clone().try_acquire_owned() {
                    Ok(p) => held.push(p),
                    Err(_) => break,
                }
            }
            match self.pull(&mut held, &mut attached).await {
                End::Done => backoff.reset(),
                End::Gone(why) => {
                    metrics::counter!(m::CANCELLATIONS, "transport" => TRANSPORT).increment(1);
                    tracing::warn!(durable = %self.lane.durable, why = %why, "durable gone: recreating it from the topology");
                    drop(held);
                    let recreated = match Topology::new(self.conn.clone(), self.config.clone()) {
                        Ok(t) => t.apply().await.map(|_| ()),
                        Err(e) => Err(e),
                    };
                    match recreated {
                        Ok(()) => {
                            metrics::counter!(m::RECONNECTS, "transport" => TRANSPORT).increment(1);
                            backoff.reset();
                        }
                        Err(e) => {
                            let d = backoff.next_delay();
                            tracing::warn!(durable = %self.lane.durable, error = %e, retry_in_ms = d.as_millis() as u64, "recreating the durable failed");
                            self.pause(d).await;
                        }
                    }
                }
                End::Broken(why) => {
                    drop(held);
                    let d = backoff.next_delay();
                    tracing::warn!(durable = %self.lane.durable, why = %why, retry_in_ms = d.as_millis() as u64, "pull request lost: asking again");
                    self.pause(d).await;
                }
            }
            if self.tx.is_closed() {
                return;
            }
        }
    }

    async fn pause(&self, d: Duration) {
        tokio::select! {
            () = tokio::time::sleep(d) => {}
            () = self.tx.closed() => {}
        }
    }

    async fn pull(
        &self,
        held: &mut Vec<OwnedSemaphorePermit>,
        attached: &mut Option<oneshot::Sender<()>>,
    ) -> End {
        let client = self.conn.client();
        let inbox = client.new_inbox();
        let mut sub = match client.subscribe(inbox.clone()).await {
            Ok(s) => s,
            Err(e) => return End::Broken(format!("subscribing the pull inbox: {e}")),
        };
        let cfg = &self.config;
        let request = serde_json::json!({
            "batch": held.len(),
            "expires": u64::try_from(cfg.pull_expires.as_nanos()).unwrap_or(u64::MAX),
            "idle_heartbeat": u64::try_from(cfg.heartbeat.as_nanos()).unwrap_or(u64::MAX),
        });
        let subject = format!(
            "$JS.API.CONSUMER.MSG.NEXT.{}.{}",
            self.stream, self.lane.durable
        );
        if let Err(e) = client
            .publish_with_reply(subject, inbox, request.to_string().into())
            .await
        {
            return End::Broken(format!("sending the pull request: {e}"));
        }
        if attached.is_some() {
            // The server answers a ping only after it has read what came before it on this
            // connection: the inbox's subscription and the pull request.
            if let Err(e) = client.flush().await {
                return End::Broken(format!("sending the pull request: {e}"));
            }
            if let Some(attached) = attached.take() {
                let _ = attached.send(());
            }
        }
        // Two heartbeats missed, with a margin for a busy machine.
        let silence = cfg.heartbeat * 2 + Duration::from_millis(500);
        loop {
            let msg = match tokio::time::timeout(silence, sub.next()).await {
                Err(_) => return End::Broken(format!("no heartbeat for {silence:?}")),
                Ok(None) => return End::Broken("the pull inbox closed".into()),
                Ok(Some(msg)) => msg,
            };
            match msg.status {
                Some(StatusCode::IDLE_HEARTBEAT) => continue,
                Some(StatusCode::TIMEOUT) | Some(StatusCode::NOT_FOUND) => return End::Done,
                Some(StatusCode::NO_RESPONDERS) => {
                    return End::Gone("no responders for the pull request".into());
                }
                Some(StatusCode::REQUEST_TERMINATED) => {
                    let why = msg.description.clone().unwrap_or_default();
                    if why.to_ascii_lowercase().contains("deleted") {
                        return End::Gone(why);
                    }
                    return End::Broken(format!("pull request ended: 409 {why}"));
                }
                None | Some(StatusCode::OK) => {}
                Some(other) => {
                    return End::Broken(format!(
                        "pull request ended: {other} {}",
                        msg.description.clone().unwrap_or_default()
                    ));
                }
            }
            let Some(permit) = held.pop() else {
                return End::Broken("the server sent more than was asked".into());
            };
            if let Some(d) = self.delivery(msg, permit).await
                && self.tx.send(d).await.is_err()
            {
                return End::Done;
            }
            if held.is_empty() {
                return End::Done;
            }
        }
    }

    /// The delivery of one message; `None` (and the message acknowledged) when the lane's
    /// filter is wider than its route and the topic is not the consumer's.
    async fn delivery(
        &self,
        msg: async_nats::Message,
        permit: OwnedSemaphorePermit,
    ) -> Option<NatsDelivery> {
        let reply = msg.reply.clone();
        let info = reply.as_deref().and_then(ack_info);
        let acker = Arc::new(Acker::new(self.conn.jetstream().clone(), reply));
        let Some(info) = info else {
            tracing::error!(subject = %msg.subject, "a message without a JetStream ack subject: ignored");
            return None;
        };
        if !self.lane.checks.is_empty() {
            let topic = self.describe.topic(msg.subject.as_str()).unwrap_or("");
            let partition_ok = self
                .lane
                .partition
                .is_none_or(|_| subject_matches(&self.lane.filter, msg.subject.as_str()));
            let routed = self
                .lane
                .checks
                .iter()
                .any(|r| postroom_core::pattern::matches(r, topic));
            if !(partition_ok && routed) {
                if let Err(e) = acker.double_ack().await {
                    tracing::debug!(error = %e, "skipping a topic outside the route: ack not confirmed (it comes again)");
                }
                return None;
            }
        }
        let message = self
            .describe
            .received(&self.lane, &self.ctx.book, &msg, info);
        let stopped = Arc::new(Mutex::new(false));
        let (alive, alive_rx) = oneshot::channel();
        let every = (self.config.ack_wait / 3).max(Duration::from_millis(100));
        spawn_heartbeat(
            acker.clone(),
            stopped.clone(),
            alive_rx,
            every,
            self.config.max_in_progress,
        );
        Some(NatsDelivery {
            message,
            stream_seq: info.stream_seq,
            acker,
            ctx: self.ctx.clone(),
            stopped,
            _alive: alive,
            _permit: permit,
        })
    }
}
