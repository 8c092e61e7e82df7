//! What the log says about a parked message: one line per message, naming the consumer, the
//! message's id and the reason, whether it was parked before handling (an undecodable body)
//! or after (a permanent failure). Against the embedded store and its queue in tables.

use postroom::{
    Contract, Envelope, Handled, HandlerError, Message, OutgoingMessage, Service, TypedHandler,
    async_trait, consumer,
};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};

#[derive(Serialize, Deserialize)]
struct OrderCreated {
    order_id: String,
}

impl Contract for OrderCreated {
    const TYPE: &'static str = "order.created";
}

/// Refuses every order for good.
struct Refuses;

#[async_trait]
impl TypedHandler<OrderCreated> for Refuses {
    async fn handle(&self, _m: Message<OrderCreated>) -> Result<Handled, HandlerError> {
        Err(HandlerError::permanent("bad_sku", "no such SKU"))
    }
}

/// Every WARN and ERROR event of the process, as `LEVEL target: message field=value…`.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<String>>>);

struct Text(String);

impl Visit for Text {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0.push_str(&format!(" {value:?}"));
        } else {
            self.0.push_str(&format!(" {}={value:?}", field.name()));
        }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Lines {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let level = *event.metadata().level();
        if level <= tracing::Level::WARN {
            let mut text = Text(format!("{level} {}:", event.metadata().target()));
            event.record(&mut text);
            self.0.lock().unwrap().push(text.0);
        }
    }
}

fn order(order_id: &str) -> OutgoingMessage {
    let env = Envelope::builder(OrderCreated::TYPE, "tests")
        .aggregate("order", order_id, 1)
        .data(
            serde_json::to_value(OrderCreated {
                order_id: order_id.into(),
            })
            .unwrap(),
        )
        .build();
    OutgoingMessage::from_envelope(&env, OrderCreated::TYPE)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_parked_message_is_one_log_line_that_names_it() {
    let lines = Lines::default();
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(lines.clone()))
        .expect("one subscriber per test process");

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let service = Service::builder()
        .database(path.to_str().unwrap())
        .open()
        .await
        .expect("open");
    let store = service
        .store::<postroom_sqlite::SqliteStore>()
        .expect("SQLite")
        .clone();
    let running = service
        .consumer(consumer::<OrderCreated>("inventory", Refuses))
        .relay()
        .start()
        .await
        .expect("start");

    let refused = order("o-1");
    let mut corrupt = order("o-2");
    corrupt.body = b"{\"id\": not json".to_vec();
    let mut tx = store.begin().await.unwrap();
    for m in [&refused, &corrupt] {
        postroom_sqlite::outbox::enqueue(&mut tx, m).await.unwrap();
    }
    tx.commit().await.unwrap();

    let parked = |running: &postroom::Running| {
        running
            .stats("inventory")
            .map_or(0, |s| s.parked_by_code.values().sum::<u64>())
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while parked(&running) < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "both messages parked within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    running.shutdown().await;

    let lines = lines.0.lock().unwrap().clone();
    for (m, code) in [(&refused, "bad_sku"), (&corrupt, "malformed")] {
        let id = m.id.to_string();
        let about: Vec<&String> = lines.iter().filter(|l| l.contains(&id)).collect();
        assert_eq!(
            about.len(),
            1,
            "one WARN or ERROR line about the parked message {id}, got {about:#?}\nall lines: {lines:#?}"
        );
        for word in ["parked", "inventory", code] {
            assert!(
                about[0].contains(word),
                "the line about {id} says {word:?}: {}",
                about[0]
            );
        }
    }
    let about_neither = lines
        .iter()
        .filter(|l| {
            l.contains("park")
                && !l.contains(&refused.id.to_string())
                && !l.contains(&corrupt.id.to_string())
        })
        .collect::<Vec<_>>();
    assert!(
        about_neither.is_empty(),
        "every line about parking names its message: {about_neither:#?}"
    );
}
