//! The NATS JetStream server the tests use (`POSTROOM_TEST_NATS`), workload prefixes fit for
//! stream names, and a workload of the parking consumer on it.

use super::parking::{CONSUMER, CONSUMER_TOML, ParkingPlace};
use postroom_core::{BoxSubscriber, Publisher, Subscription, Transport, async_trait};
use postroom_nats::topology::reset::delete_workload;
use postroom_nats::{NatsConfig, NatsConnection, NatsTransport, Topology};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The server's URL.
pub fn url() -> String {
    std::env::var("POSTROOM_TEST_NATS").unwrap_or_else(|_| "nats://127.0.0.1:4222".into())
}

/// A NATS workload prefix (stream names take no '.').
pub fn prefix(tag: &str) -> String {
    super::workload(tag).replace(['.', '-'], "_")
}

/// A connection, or a failure that names the server wanted.
pub async fn connect() -> NatsConnection {
    NatsConnection::connect(&url(), "postroom-cli-tests")
        .await
        .unwrap_or_else(|e| panic!("NATS with JetStream is required at {} : {e}", url()))
}

/// The workload of [`CONSUMER`] on `t.#`: its topology file written, its streams and
/// durables applied, a transport over it; deleted by [`ParkingPlace::close`].
pub struct NatsWorkload {
    /// Its prefix.
    pub prefix: String,
    /// The connection.
    pub conn: NatsConnection,
    /// The transport.
    pub transport: Arc<NatsTransport>,
}

impl NatsWorkload {
    /// [`ParkingPlace::start`], with `limits` (the durables' ack wait in seconds and their
    /// delivery limit), when given, set in the topology file and the transport alike.
    pub async fn start_with(dir: &Path, tag: &str, limits: Option<(u64, u32)>) -> Self {
        let prefix = prefix(tag);
        let mut config = NatsConfig::new(&prefix).with_consumer(CONSUMER, &["t.#"]);
        let mut toml = format!("prefix = \"{prefix}\"\n");
        if let Some((ack_wait, max_deliver)) = limits {
            config.ack_wait = Duration::from_secs(ack_wait);
            config.max_deliver = max_deliver;
            toml.push_str(&format!(
                "ack_wait = \"{ack_wait}s\"\nmax_deliver = {max_deliver}\n"
            ));
        }
        toml.push_str(CONSUMER_TOML);
        std::fs::write(dir.join("topology.toml"), toml).unwrap();
        let conn = connect().await;
        Topology::new(conn.clone(), config.clone())
            .unwrap()
            .apply()
            .await
            .unwrap();
        let transport = Arc::new(NatsTransport::new(conn.clone(), config).unwrap());
        Self {
            prefix,
            conn,
            transport,
        }
    }

    /// Messages the stream `name` holds now.
    pub async fn stream_messages(&self, name: &str) -> u64 {
        stream_messages(&self.conn, name).await
    }
}

/// Messages the stream `name` holds now.
pub async fn stream_messages(conn: &NatsConnection, name: &str) -> u64 {
    conn.jetstream()
        .get_stream(name)
        .await
        .unwrap_or_else(|e| panic!("the stream {name}: {e}"))
        .info()
        .await
        .unwrap_or_else(|e| panic!("the state of {name}: {e}"))
        .state
        .messages
}

#[async_trait]
impl ParkingPlace for NatsWorkload {
    async fn start(dir: &Path, tag: &str) -> Self {
        Self::start_with(dir, tag, None).await
    }

    fn url(&self) -> String {
        url()
    }

    fn publisher(&self) -> Arc<dyn Publisher> {
        self.transport.publisher()
    }

    async fn subscribe(&self, prefetch: u16) -> BoxSubscriber {
        self.transport
            .subscribe(&Subscription::new(CONSUMER, &["t.#"]).prefetch(usize::from(prefetch)))
            .await
            .unwrap()
    }

    /// Delete the workload's streams.
    async fn close(self) {
        delete_workload(&self.conn, &self.prefix).await.unwrap();
    }
}
