//! A broker's parking place driven end to end: a real consumer parks a corrupt message into
//! it, then `postroom parking ingest`, `parking list` and `parking redrive` run as commands
//! against the broker and a SQLite parking store, and the redriven copy comes back to the
//! consumer. What differs per broker (its URL, how its publisher and subscribers are made)
//! stands behind [`ParkingPlace`].

use super::{ok, postroom_async};
use postroom_core::stats::ConsumerStats;
use postroom_core::{
    BoxSubscriber, Consumer, ConsumerConfig, Delivery, EnvelopeDecoder, Handled, Handler,
    HandlerError, Incoming, MessageId, Publisher, Subscriber, async_trait,
};
use postroom_testkit::cases::raw_message;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The consumer every parking test runs.
pub const CONSUMER: &str = "c";

/// The topology file's lines for [`CONSUMER`] on the routes `t.#`, with a one-stage ladder.
pub const CONSUMER_TOML: &str =
    "ladder = \"1s\"\n[[consumers]]\nname = \"c\"\nbindings = [\"t.#\"]\n";

/// One broker's workload for [`CONSUMER`].
#[async_trait]
pub trait ParkingPlace: Sized + Send + Sync {
    /// A workload of its own (`tag` in its prefix): its topology file written in `dir` and
    /// applied on the broker.
    async fn start(dir: &Path, tag: &str) -> Self;

    /// The broker URL the commands get.
    fn url(&self) -> String;

    /// A confirming publisher of the workload.
    fn publisher(&self) -> Arc<dyn Publisher>;

    /// A subscriber of [`CONSUMER`] holding up to `prefetch` unsettled copies.
    async fn subscribe(&self, prefetch: u16) -> BoxSubscriber;

    /// Close its connections and delete the workload from the broker.
    async fn close(self);
}

/// Corrupt bodies are parked by the consumer loop before any handler runs.
pub struct Never;

#[async_trait]
impl Handler for Never {
    async fn handle(&self, _: &Incoming) -> Result<Handled, HandlerError> {
        Err(HandlerError::permanent(
            "unexpected",
            "no body decodes here",
        ))
    }
}

/// Publish a body that is not JSON on the route `t.x`; its message id.
pub async fn publish_corrupt(publisher: &dyn Publisher) -> MessageId {
    let corrupt = raw_message("t.x", b"{oops");
    publisher.publish(&corrupt).await.unwrap();
    corrupt.id
}

/// [`CONSUMER`] running with the [`Never`] handler over a subscriber.
pub struct Running {
    stop: tokio::sync::watch::Sender<bool>,
    run: tokio::task::JoinHandle<()>,
    /// Its counters.
    pub stats: Arc<ConsumerStats>,
}

impl Running {
    /// Start the consumer on `sub`.
    pub fn start<S: Subscriber + 'static>(sub: S) -> Self {
        let consumer = Consumer::new(
            ConsumerConfig::new(CONSUMER, EnvelopeDecoder::new()),
            Arc::new(Never),
        );
        let stats = consumer.stats();
        let (stop, rx) = tokio::sync::watch::channel(false);
        let run = tokio::spawn(async move { consumer.run(sub, rx).await });
        Self { stop, run, stats }
    }

    /// Stop it and wait until it has.
    pub async fn stop(self) {
        self.stop.send(true).unwrap();
        self.run.await.unwrap();
    }
}

/// A corrupt message parked by a real consumer, ingested from the broker's parking place,
/// listed, and redriven by the commands; the redriven copy reaches the consumer again with
/// the same id and a redrive count of 1. On a workload of its own, deleted afterwards.
pub async fn ingest_list_and_redrive<P: ParkingPlace>() {
    let dir = tempfile::tempdir().unwrap();
    let place = P::start(dir.path(), "park").await;
    let id = park_corrupt(&place).await;
    commands_ingest_list_and_redrive(dir.path(), &place, id, "malformed").await;
    place.close().await;
}

/// A corrupt message published and parked by [`CONSUMER`] (malformed); its id.
pub async fn park_corrupt(place: &impl ParkingPlace) -> MessageId {
    let publisher = place.publisher();
    let id = publish_corrupt(publisher.as_ref()).await;
    let running = Running::start(place.subscribe(4).await);
    let stats = running.stats.clone();
    for _ in 0..100 {
        if !stats.snapshot().parked_by_code.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    running.stop().await;
    assert_eq!(stats.snapshot().parked_by_code.get("malformed"), Some(&1));
    id
}

/// The message `id`, waiting in the broker's parking place for [`CONSUMER`] with the error
/// code `code`: `parking ingest` moves it into the store in `dir`, `parking list` shows it,
/// `parking redrive` sends it back, and the redriven copy reaches the consumer with the same
/// id and a redrive count of 1.
pub async fn commands_ingest_list_and_redrive(
    dir: &Path,
    place: &impl ParkingPlace,
    id: MessageId,
    code: &str,
) {
    let url = place.url();
    let run = async |args: &[&str]| ok(&postroom_async(dir, args).await);
    let ingest = run(&[
        "parking",
        "ingest",
        "--database",
        "p.db",
        "--broker",
        &url,
        "--idle",
        "1s",
    ])
    .await;
    let list = run(&["parking", "list", "--database", "p.db", "--json"]).await;
    let redrive = run(&[
        "parking",
        "redrive",
        "--database",
        "p.db",
        "--broker",
        &url,
        "--yes",
        "--json",
    ])
    .await;
    assert!(ingest.contains("1 parked message(s) ingested"), "{ingest}");
    let parked: serde_json::Value =
        serde_json::from_str(list.lines().next().expect("one parked line")).unwrap();
    assert_eq!(parked["message_id"], id.to_string());
    assert_eq!(parked["error_code"], code);
    assert_eq!(parked["consumer"], CONSUMER);
    assert!(redrive.contains("\"done\":1"), "{redrive}");
    // The redriven copy is back in the consumer's work queue, with the same id.
    let mut sub = place.subscribe(1).await;
    let mut got = None;
    for _ in 0..20 {
        if let Some(d) = sub.next(Duration::from_millis(500)).await.unwrap() {
            got = Some(d);
            break;
        }
    }
    let d = got.expect("the redriven message arrives");
    assert_eq!(d.message().id, Some(id));
    assert_eq!(
        d.message()
            .headers
            .get("x-redrive-count")
            .map(String::as_str),
        Some("1")
    );
    d.ack().await.map_err(|(e, _)| e).unwrap();
    sub.close().await;
}
