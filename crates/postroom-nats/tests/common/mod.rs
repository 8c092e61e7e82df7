//! Shared test support: the NATS endpoint from the environment, a random workload prefix per
//! test, and every stream under that prefix deleted on drop. A missing server fails the test;
//! it is never skipped.
#![allow(dead_code)]

pub mod probe;
pub mod server;

use postroom_core::parking::ingest::ingest_dead_letters;
use postroom_core::{
    BoxDelivery, BoxSubscriber, OutgoingMessage, ParkingFilter, ParkingStore, Publisher,
    Subscriber, Subscription, Transport,
};
use postroom_nats::{NatsConfig, NatsConnection, NatsTransport};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// NATS endpoint.
pub fn nats_url() -> String {
    std::env::var("POSTROOM_TEST_NATS").unwrap_or_else(|_| "nats://127.0.0.1:4222".into())
}

/// A random suffix.
pub fn rand_suffix() -> String {
    uuid::Uuid::now_v7().simple().to_string()[18..].to_string()
}

/// Connect or fail with a clear message.
pub async fn connect(url: &str) -> NatsConnection {
    NatsConnection::connect(url, "postroom-tests")
        .await
        .unwrap_or_else(|e| {
            panic!("NATS with JetStream is required at {url} (set POSTROOM_TEST_NATS): {e}")
        })
}

/// One test's isolated workload.
pub struct TestNats {
    pub prefix: String,
    pub url: String,
    pub conn: NatsConnection,
}

impl TestNats {
    /// A workload `prt<random>` on the shared server.
    pub async fn new() -> Self {
        Self::at(&nats_url()).await
    }

    /// A workload on the server at `url`.
    pub async fn at(url: &str) -> Self {
        let prefix = format!("prt{}", rand_suffix());
        let conn = connect(url).await;
        Self {
            prefix,
            url: url.to_string(),
            conn,
        }
    }

    /// The test configuration: short ack wait, short pull requests and heartbeats.
    pub fn config(&self) -> NatsConfig {
        let mut c = NatsConfig::new(&self.prefix);
        c.ack_wait = Duration::from_secs(2);
        c.max_deliver = 10;
        c.pull_expires = Duration::from_secs(5);
        c.heartbeat = Duration::from_secs(1);
        c.max_age = Duration::from_secs(3600);
        c.parking_max_age = Duration::from_secs(3600);
        c
    }

    /// A transport over `config`.
    pub fn transport(&self, config: NatsConfig) -> Arc<NatsTransport> {
        Arc::new(NatsTransport::new(self.conn.clone(), config).expect("transport"))
    }

    /// Streams of this workload.
    pub async fn streams(&self) -> Vec<String> {
        stream_names(&self.conn, &self.prefix).await
    }
}

async fn stream_names(conn: &NatsConnection, prefix: &str) -> Vec<String> {
    #[derive(serde::Deserialize)]
    struct Names {
        #[serde(default)]
        streams: Option<Vec<String>>,
    }
    let names: Names = postroom_nats::error::api(
        conn.jetstream(),
        "listing streams",
        "STREAM.NAMES".into(),
        &serde_json::json!({}),
    )
    .await
    .expect("stream names");
    names
        .streams
        .unwrap_or_default()
        .into_iter()
        .filter(|n| n == prefix || n.starts_with(&format!("{prefix}_parking_")))
        .collect()
}

impl Drop for TestNats {
    fn drop(&mut self) {
        let prefix = self.prefix.clone();
        let url = self.url.clone();
        postroom_testkit::servers::clean_up(async move {
            let Ok(conn) = NatsConnection::connect(&url, "postroom-tests-cleanup").await else {
                return;
            };
            // A pull loop still running sees its durable deleted and recreates it from the
            // topology (as it should): delete until the prefix stays empty.
            let mut empty_rounds = 0;
            for _ in 0..20 {
                let names = stream_names(&conn, &prefix).await;
                if names.is_empty() {
                    empty_rounds += 1;
                    if empty_rounds == 2 {
                        break;
                    }
                } else {
                    empty_rounds = 0;
                }
                for name in names {
                    let _ = conn.jetstream().delete_stream(&name).await;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
    }
}

/// Poll until a condition holds or a timeout passes.
#[allow(unused_imports)]
pub use postroom_testkit::cases::wait_for as eventually;

/// An `order.created` envelope.
#[allow(unused_imports)]
pub use postroom_testkit::cases::order;

/// Messages the stream `name` holds now.
pub async fn stream_messages(conn: &NatsConnection, name: &str) -> u64 {
    let info: postroom_nats::topology::wire::StreamInfo = postroom_nats::error::api_empty(
        conn.client(),
        "stream info",
        format!("STREAM.INFO.{name}"),
    )
    .await
    .expect("stream info");
    info.state.messages
}

/// Bind consumer `consumer` to `order.created` without subscribing: what is published from
/// then on waits for it.
pub async fn bind_to_orders(transport: &NatsTransport, consumer: &str) {
    transport
        .bind(&Subscription::new(consumer, &["order.created"]))
        .await
        .unwrap();
}

/// Subscribe consumer `consumer` to `order.created`, taking `prefetch` copies at a time.
pub async fn subscribe_to_orders(
    transport: &NatsTransport,
    consumer: &str,
    prefetch: usize,
) -> BoxSubscriber {
    transport
        .subscribe(&Subscription::new(consumer, &["order.created"]).prefetch(prefetch))
        .await
        .unwrap()
}

/// Publish `order("<key_prefix><i>", 1)` to `order.created` for each `i` in `0..n`, each
/// confirmed before the next.
pub async fn publish_orders(publisher: &dyn Publisher, key_prefix: &str, n: usize) {
    for i in 0..n {
        publisher
            .publish(&OutgoingMessage::from_envelope(
                &order(&format!("{key_prefix}{i}"), 1),
                "order.created",
            ))
            .await
            .unwrap();
    }
}

/// The next delivery of `sub`, asked for every 200 ms; fails the test, saying `missing`, once
/// `since` is `within` ago.
pub async fn next_delivery(
    sub: &mut BoxSubscriber,
    since: Instant,
    within: Duration,
    missing: &str,
) -> BoxDelivery {
    loop {
        if let Some(d) = sub.next(Duration::from_millis(200)).await.unwrap() {
            return d;
        }
        assert!(since.elapsed() < within, "{missing}");
    }
}

/// Ingest into `store` the copies the server dead-lettered for `consumer`, then count the
/// parked copies `store` holds.
pub async fn parked(
    transport: &dyn Transport,
    consumer: &str,
    store: &Arc<dyn ParkingStore>,
) -> u64 {
    ingest_dead_letters(
        transport,
        consumer,
        store.clone(),
        Duration::from_millis(300),
    )
    .await
    .unwrap();
    store.count(&ParkingFilter::default()).await.unwrap()
}

/// Whether `store` holds exactly one parked copy within `within`, ingesting what the server
/// dead-letters for `consumer` meanwhile.
pub async fn parks_one_within(
    transport: &dyn Transport,
    consumer: &str,
    store: &Arc<dyn ParkingStore>,
    within: Duration,
) -> bool {
    eventually(within, || async {
        parked(transport, consumer, store).await == 1
    })
    .await
}
