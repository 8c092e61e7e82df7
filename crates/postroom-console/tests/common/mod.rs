//! Shared by the console's tests: a SQLite store whose parked messages were produced by the
//! real consumer loop on the embedded queue, users of each role, and a console serving it on
//! a free loopback port.
#![allow(dead_code)]

pub mod agent;
pub mod webdriver;

use postroom_console::auth::hash_password;
use postroom_console::{
    Auth, Console, ConsoleConfig, ParkingConsole, PipelineProbe, SqliteBackend, Users,
};
use postroom_core::{
    Consumer, ConsumerConfig, Envelope, EnvelopeDecoder, Handled, Handler, HandlerError, Incoming,
    OutgoingMessage, ParkingFilter, ParkingStore, Subscription, Transport, async_trait,
};
use postroom_sqlite::SqliteStore;
/// Wait until a condition holds, up to a bound, or fail naming what was awaited.
#[allow(unused_imports)]
pub use postroom_testkit::wait::until as wait_for;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::watch;

/// The consumer whose handler parks bad orders.
pub const CONSUMER: &str = "inventory";
/// Password of every test user.
pub const PASSWORD: &str = "correct horse battery staple";
/// A string inside every payload: visible to operators, never to viewers.
pub const SECRET: &str = "customer-email-4711@example.test";

/// Orders without a SKU fail for good (one failure group); orders with a negative quantity
/// fail for another cause; the rest are applied with an inbox claim.
struct Inventory {
    store: SqliteStore,
}

#[async_trait]
impl Handler for Inventory {
    async fn handle(&self, m: &Incoming) -> Result<Handled, HandlerError> {
        let d = &m.envelope.data;
        let order = d["order"].as_i64().unwrap_or(-1);
        if d.get("sku").is_none_or(serde_json::Value::is_null) {
            return Err(HandlerError::permanent(
                "bad_payload",
                format!("order {order} has no sku"),
            ));
        }
        if d["qty"].as_i64().unwrap_or(0) < 0 {
            return Err(HandlerError::permanent(
                "bad_quantity",
                format!("order {order}: quantity {} is negative", d["qty"]),
            ));
        }
        let mut tx = self.store.begin().await?;
        let fresh = postroom_sqlite::inbox::claim(&mut tx, CONSUMER, m.envelope.id).await?;
        tx.commit().await.map_err(postroom_sqlite::map_error)?;
        Ok(if fresh {
            Handled::Applied
        } else {
            Handled::Duplicate
        })
    }
}

/// A temporary store holding parked messages.
pub struct Parked {
    /// The store.
    pub store: SqliteStore,
    _dir: tempfile::TempDir,
}

/// Install this test binary's Prometheus recorder once.
pub fn recorder() -> metrics_exporter_prometheus::PrometheusHandle {
    static HANDLE: OnceLock<metrics_exporter_prometheus::PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| postroom_console::metrics::install_prometheus().expect("recorder"))
        .clone()
}

/// Publish `no_sku` orders without a SKU, `negative` with a negative quantity and `good`
/// good ones on the embedded queue, and run the consumer loop until the bad ones are parked.
pub async fn parked(no_sku: usize, negative: usize, good: usize) -> Parked {
    let mut n = 0;
    let mut publish = |data: serde_json::Value| {
        n += 1;
        let mut data = data;
        data["order"] = n.into();
        data["email"] = SECRET.into();
        Envelope::builder("order.created", "shop")
            .aggregate("order", format!("o-{n}"), 1)
            .data(data)
            .build()
    };
    let mut envelopes = Vec::new();
    for _ in 0..no_sku {
        envelopes.push(publish(serde_json::json!({"sku": null, "qty": 1})));
    }
    for _ in 0..negative {
        envelopes.push(publish(serde_json::json!({"sku": "A-1", "qty": -2})));
    }
    for _ in 0..good {
        envelopes.push(publish(serde_json::json!({"sku": "A-1", "qty": 1})));
    }
    let messages = envelopes
        .iter()
        .map(|e| OutgoingMessage::from_envelope(e, "order.created"))
        .collect();
    parked_from(messages, no_sku + negative, good).await
}

/// Publish `messages` on the embedded queue (bodies of any shape) and run the consumer loop
/// until `bad` of them are parked and `good` handled.
pub async fn parked_from(messages: Vec<OutgoingMessage>, bad: usize, good: usize) -> Parked {
    recorder();
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open(dir.path().join("console.db"))
        .await
        .expect("open store");
    let queue = store.queue();
    let subscription = Subscription::new(CONSUMER, &["order.*"]);
    Transport::bind(&queue, &subscription).await.expect("bind");
    let publisher = queue.publisher();
    for m in &messages {
        publisher.publish(m).await.expect("publish");
    }
    let consumer = Consumer::for_transport(
        ConsumerConfig::new(
            CONSUMER,
            EnvelopeDecoder::new().accept("order.created", 1..=1),
        ),
        Arc::new(Inventory {
            store: store.clone(),
        }),
        &queue.capabilities(),
    )
    .expect("consumer");
    let (stop, shutdown) = watch::channel(false);
    let run = {
        let queue = queue.clone();
        tokio::spawn(async move { consumer.run_on(&queue, &subscription, shutdown).await })
    };
    let expected = bad as u64;
    let s = store.clone();
    wait_for(
        Duration::from_secs(60),
        "the bad orders to be parked",
        async || {
            ParkingStore::count(&s, &ParkingFilter::default())
                .await
                .unwrap_or(0)
                == expected
        },
    )
    .await;
    let s = store.clone();
    wait_for(
        Duration::from_secs(60),
        "the good orders to be handled",
        async || {
            let n: i64 = sqlx_count(&s).await;
            n == good as i64
        },
    )
    .await;
    stop.send_replace(true);
    run.await.expect("consumer task").expect("consumer ran");
    Parked { store, _dir: dir }
}

async fn sqlx_count(s: &SqliteStore) -> i64 {
    let (h, _) = s
        .activity_since(CONSUMER, chrono::DateTime::UNIX_EPOCH)
        .await
        .unwrap_or((0, 0));
    h as i64
}

/// Users `viewer`, `operator` and `admin`, each with [`PASSWORD`].
pub fn users() -> Users {
    let h = hash_password(PASSWORD).expect("hash");
    Users::parse(&format!(
        "viewer viewer {h}\noperator operator {h}\nadmin admin {h}"
    ))
    .expect("users")
}

/// A console over `store` on a free loopback port; returns its base URL and the switch that
/// stops it.
pub async fn serve(store: &SqliteStore, auth: Auth) -> (String, watch::Sender<bool>) {
    serve_backend(Arc::new(SqliteBackend::new(store.clone())), auth).await
}

/// A console over `store` on a free loopback port, for the test [`users`].
pub async fn serve_to_users(store: &SqliteStore) -> (String, watch::Sender<bool>) {
    serve(store, Auth::Users(users())).await
}

/// A visitor of the console at `base`, logged in as `user` (with [`PASSWORD`]).
pub async fn logged_in(base: &str, user: &str) -> agent::Agent {
    let mut a = agent::Agent::new(base);
    a.login(user, PASSWORD).await;
    a
}

/// A console over `backend` on a free loopback port.
pub async fn serve_backend<B: ParkingConsole + PipelineProbe>(
    backend: Arc<B>,
    auth: Auth,
) -> (String, watch::Sender<bool>) {
    serve_configured(backend, auth, |c| c).await
}

/// A console over `store` on a free loopback port, its settings changed by `configure`.
pub async fn serve_with(
    store: &SqliteStore,
    auth: Auth,
    configure: impl FnOnce(ConsoleConfig) -> ConsoleConfig,
) -> (String, watch::Sender<bool>) {
    serve_configured(Arc::new(SqliteBackend::new(store.clone())), auth, configure).await
}

async fn serve_configured<B: ParkingConsole + PipelineProbe>(
    backend: Arc<B>,
    auth: Auth,
    configure: impl FnOnce(ConsoleConfig) -> ConsoleConfig,
) -> (String, watch::Sender<bool>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let config = configure(
        ConsoleConfig::new(addr)
            .auth(auth)
            .sample_every(Duration::from_millis(200))
            .prometheus(recorder()),
    );
    let console = Console::new(backend.clone(), backend, config).expect("console");
    let (stop, shutdown) = watch::channel(false);
    tokio::spawn(async move { console.serve(listener, shutdown).await });
    (format!("http://{addr}"), stop)
}

/// Wait until the end of run `run_id` is in `parking`'s audit, then until its final state
/// is stored (the end is audited first).
pub async fn wait_for_run_end(parking: &dyn postroom_core::AuditLog, run_id: &str) {
    wait_for(
        Duration::from_secs(60),
        "the end of the run in the audit",
        async || {
            parking
                .audit_entries(Some(run_id), 10)
                .await
                .is_ok_and(|a| a.iter().any(|e| e.action == "redrive.end"))
        },
    )
    .await;
    wait_for(
        Duration::from_secs(10),
        "the final state of the run",
        async || {
            parking
                .run_control(run_id)
                .await
                .ok()
                .flatten()
                .is_some_and(|c| c.state.is_final())
        },
    )
    .await;
}
