//! The connection: one NATS client per process, reconnecting by itself with a bounded,
//! jittered backoff (no reconnect storm), each reconnect counted in
//! [`RECONNECTS`](postroom_core::metrics::RECONNECTS). Subscriptions survive a reconnect;
//! pull requests do not (the subscriber notices the missing heartbeats and asks again).

use crate::error::from_client;
use crate::security::NatsTarget;
use postroom_core::Result;
use postroom_core::metrics as m;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The metrics label of this transport.
pub const TRANSPORT: &str = "nats";

/// A connected NATS client and its JetStream context.
#[derive(Clone, Debug)]
pub struct NatsConnection {
    client: async_nats::Client,
    js: async_nats::jetstream::Context,
    reconnects: Arc<AtomicU64>,
}

/// `url` (one server, or several separated by commas) with any password or token replaced,
/// for errors and logs.
#[must_use]
pub fn redact(url: &str) -> String {
    servers(url)
        .map(|one| match (one.find("://"), one.rfind('@')) {
            (Some(s), Some(at)) if at > s => format!("{}://***@{}", &one[..s], &one[at + 1..]),
            _ => one.to_string(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The servers of a URL list: `nats://a:4222,nats://b:4222` names two servers of one
/// cluster, and the client fails over between them.
pub fn servers(url: &str) -> impl Iterator<Item = &str> {
    url.split(',').map(str::trim).filter(|s| !s.is_empty())
}

impl NatsConnection {
    /// Connect to `url` (`nats://host:port` or `tls://host:port`, with the security
    /// settings of [`crate::security::settings`] in its query and credentials in it if any;
    /// several servers of one cluster separated by commas, the client failing over between
    /// them) under `name`.
    pub async fn connect(url: &str, name: &str) -> Result<Self> {
        Self::connect_to(&NatsTarget::from_url(url)?, name).await
    }

    /// Connect to `target`'s servers with its security settings under `name`. A failure says
    /// which setting to change ([`crate::security::failure`]); no message holds a secret.
    pub async fn connect_to(target: &NatsTarget, name: &str) -> Result<Self> {
        let reconnects = Arc::new(AtomicU64::new(0));
        let seen = reconnects.clone();
        let connected_once = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let options = async_nats::ConnectOptions::new()
            .name(name)
            .connection_timeout(Duration::from_secs(5))
            .request_timeout(Some(Duration::from_secs(5)))
            .reconnect_delay_callback(|attempt| {
                let base = Duration::from_millis(100)
                    .saturating_mul(1u32 << attempt.min(6))
                    .min(Duration::from_secs(5));
                base.mul_f64(0.5 + rand::random::<f64>() * 0.5)
            })
            .event_callback(move |event| {
                let seen = seen.clone();
                let once = connected_once.clone();
                async move {
                    match event {
                        async_nats::Event::Connected => {
                            if once.swap(true, Ordering::SeqCst) {
                                seen.fetch_add(1, Ordering::SeqCst);
                                metrics::counter!(m::RECONNECTS, "transport" => TRANSPORT)
                                    .increment(1);
                                tracing::info!("NATS connection re-established");
                            }
                        }
                        async_nats::Event::Disconnected => {
                            once.store(true, Ordering::SeqCst);
                            tracing::warn!("NATS connection lost: reconnecting");
                        }
                        other => tracing::debug!(event = %other, "NATS connection event"),
                    }
                }
            });
        let options = target.security.apply(options)?;
        let list: Vec<&str> = target.servers.iter().map(String::as_str).collect();
        let client = match options.connect(list).await {
            Ok(client) => client,
            Err(e) => return Err(crate::security::failure::explain(e, target).await),
        };
        let js = async_nats::jetstream::new(client.clone());
        Ok(Self {
            client,
            js,
            reconnects,
        })
    }

    /// The core client.
    #[must_use]
    pub fn client(&self) -> &async_nats::Client {
        &self.client
    }

    /// The JetStream context.
    #[must_use]
    pub fn jetstream(&self) -> &async_nats::jetstream::Context {
        &self.js
    }

    /// Reconnects so far.
    #[must_use]
    pub fn reconnects(&self) -> u64 {
        self.reconnects.load(Ordering::SeqCst)
    }

    /// Largest payload the server takes.
    #[must_use]
    pub fn max_payload(&self) -> usize {
        self.client.server_info().max_payload
    }

    /// Flush and close.
    pub async fn close(&self) {
        if let Err(e) = self.client.drain().await {
            tracing::debug!(error = %from_client("draining the NATS client", e), "close");
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn urls_are_redacted() {
        assert_eq!(
            super::redact("nats://user:secret@127.0.0.1:4222"),
            "nats://***@127.0.0.1:4222"
        );
        assert_eq!(
            super::redact("nats://127.0.0.1:4222"),
            "nats://127.0.0.1:4222"
        );
        assert_eq!(
            super::redact("nats://u:a@h1:4222,nats://u:b@h2:4222"),
            "nats://***@h1:4222,nats://***@h2:4222"
        );
    }
}
