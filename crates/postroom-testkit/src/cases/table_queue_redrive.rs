//! Redrive against the races an operator cannot see, on a store's own table queue: a
//! redriven copy consumed and parked again before the redrive records it, a message already
//! applied, a message older than the inbox's replay window.

use super::{order, until};
use crate::probe::{Mode, Probe};
use crate::table_queue::TableQueueFixture;
use async_trait::async_trait;
use postroom_core::consumer::{Consumer, ConsumerConfig};
use postroom_core::{
    Envelope, EnvelopeDecoder, Handled, MessageId, OutgoingMessage, ParkedStatus, ParkingFilter,
    ParkingStore, Publisher, RedriveReport, RedriveSkip, Redriver, Result, Subscription, Transport,
};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, watch};

/// A publisher that, once the transport confirmed a message, tells the test and waits for
/// its word before returning: the gap between a redrive's confirm and its bookkeeping.
struct PausingPublisher {
    inner: Arc<dyn Publisher>,
    confirmed: Notify,
    release: Notify,
}

#[async_trait]
impl Publisher for PausingPublisher {
    async fn publish(&self, m: &OutgoingMessage) -> Result<()> {
        self.inner.publish(m).await?;
        self.confirmed.notify_one();
        self.release.notified().await;
        Ok(())
    }
}

/// The store's queue: a 3 s lease, polled every 20 ms.
fn queue(store: &impl TableQueueFixture) -> Arc<dyn Transport> {
    store.queue(Duration::from_secs(3), Duration::from_millis(20))
}

/// Run `handler` as consumer `name` on `queue` until the returned sender says stop (or is
/// dropped); the task returns once the consumer has stopped.
fn consume(
    queue: &Arc<dyn Transport>,
    name: &str,
    handler: Arc<Probe>,
) -> (watch::Sender<bool>, tokio::task::JoinHandle<Result<()>>) {
    let mut cfg = ConsumerConfig::new(name, EnvelopeDecoder::new().accept("order.created", 1..=1));
    cfg.handler_timeout = Duration::from_secs(1);
    cfg.concurrency = 1;
    let consumer = Consumer::for_transport(cfg, handler, &queue.capabilities()).expect("consumer");
    let (stop, rx) = watch::channel(false);
    let queue = queue.clone();
    let sub = Subscription::new(name, &["order.*"]);
    let task = tokio::spawn(async move { consumer.run_on(&*queue, &sub, rx).await });
    (stop, task)
}

/// Publish `m` once the consumer's subscription takes it.
async fn publish_once_subscribed(queue: &Arc<dyn Transport>, m: &OutgoingMessage) {
    let publisher = queue.publisher();
    until(
        Duration::from_secs(10),
        "timed out waiting for the subscription",
        || async { publisher.publish(m).await.is_ok() },
    )
    .await;
}

/// The redriven copy is consumed and parked again between the redrive's confirm and its
/// mark: the new parking must stay visible (parked, selectable), not be flipped to
/// `redriven` by the late mark.
pub async fn a_copy_parked_again_before_the_redrive_mark_stays_visible<S: TableQueueFixture>(
    store: &S,
) {
    let queue = queue(store);
    let parking = store.parking();
    let handler = Probe::new(Mode::Permanent);
    let (_stop, _task) = consume(&queue, "inv", handler.clone());
    let env = order("o1", 1);
    publish_once_subscribed(
        &queue,
        &OutgoingMessage::from_envelope(&env, "order.created"),
    )
    .await;
    let first_parking = || async {
        parking
            .get(env.id)
            .await
            .unwrap()
            .first()
            .map(|p| (p.status, p.redrive_count))
    };
    until(
        Duration::from_secs(20),
        "timed out waiting for the first parking",
        || async { first_parking().await == Some((ParkedStatus::Parked, 0)) },
    )
    .await;

    let publisher = Arc::new(PausingPublisher {
        inner: queue.publisher(),
        confirmed: Notify::new(),
        release: Notify::new(),
    });
    let redriver = Arc::new(Redriver::new(parking.clone(), publisher.clone()));
    let run = redriver
        .start(&ParkingFilter::default(), 10, "test")
        .await
        .unwrap();
    assert_eq!(run.total, 1);
    let execute = {
        let (redriver, id) = (redriver.clone(), run.id.clone());
        tokio::spawn(async move { redriver.execute(&id, 100.0, |_| {}).await })
    };
    tokio::time::timeout(Duration::from_secs(20), publisher.confirmed.notified())
        .await
        .expect("the redrive publish was confirmed");
    // The copy is consumed and parked again while the redrive has not recorded it yet.
    until(
        Duration::from_secs(20),
        "timed out waiting for the copy to be parked again",
        || async { first_parking().await == Some((ParkedStatus::Parked, 1)) },
    )
    .await;
    assert_eq!(
        handler.calls_for(env.id).len(),
        2,
        "the redriven copy was handled"
    );
    publisher.release.notify_one();
    let run = tokio::time::timeout(Duration::from_secs(20), execute)
        .await
        .expect("the redrive finished")
        .unwrap()
        .expect("redrive");
    assert_eq!(run.done, 1, "the run counts the message sent back");

    let visible = parking.search(&ParkingFilter::default(), 10).await.unwrap();
    assert_eq!(
        visible.iter().map(|p| p.message_id).collect::<Vec<_>>(),
        vec![env.id],
        "the new parking is listed: {visible:?}"
    );
    assert_eq!(visible[0].status, ParkedStatus::Parked);
    assert_eq!(visible[0].redrive_count, 1);
    let again = redriver
        .start(&ParkingFilter::default(), 10, "test")
        .await
        .unwrap();
    assert_eq!(again.total, 1, "and a later redrive selects it");
}

/// Park `env` (sent with `id`) through a consumer that rejects it, then stop that consumer
/// (so that anything a redrive sends stays in the queue to be seen).
async fn park_through_the_consumer(
    queue: &Arc<dyn Transport>,
    parking: &Arc<dyn ParkingStore>,
    env: &Envelope,
    id: MessageId,
) {
    let (stop, task) = consume(queue, "inv", Probe::new(Mode::Permanent));
    let mut m = OutgoingMessage::from_envelope(env, "order.created");
    m.id = id;
    publish_once_subscribed(queue, &m).await;
    until(
        Duration::from_secs(20),
        "timed out waiting for the parking",
        || async { !parking.get(id).await.unwrap().is_empty() },
    )
    .await;
    stop.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the consumer stops")
        .unwrap()
        .unwrap();
}

/// Start a redrive of everything parked (up to 10) and run it to its end.
async fn redrive_all(redriver: &Redriver<dyn ParkingStore, dyn Publisher>) -> RedriveReport {
    let run = redriver
        .start(&ParkingFilter::default(), 10, "test")
        .await
        .unwrap();
    redriver
        .execute_report(&run.id, 100.0, |_| {})
        .await
        .unwrap()
}

/// A message whose effect committed (its commit's outcome looked unknown) and that was parked
/// later: redrive asks the target consumer's inbox, skips it, reports it, and sends nothing.
pub async fn redrive_skips_and_reports_a_message_its_consumer_already_applied<
    S: TableQueueFixture,
>(
    store: &S,
) {
    let queue = queue(store);
    let parking = store.parking();
    let env = order("o2", 1);
    park_through_the_consumer(&queue, &parking, &env, env.id).await;
    // The effect of an earlier delivery did commit: the inbox holds the id.
    assert_eq!(
        store
            .apply_effect("inv", env.id, &env.aggregate.key())
            .await
            .unwrap(),
        Handled::Applied
    );

    let redriver = Redriver::new(parking.clone(), queue.publisher()).with_inbox(store.inbox());
    let report = redrive_all(&redriver).await;
    assert_eq!(report.run.done, 1, "the run is finished");
    assert_eq!(report.skipped.len(), 1);
    assert_eq!(report.skipped[0].message.message_id, env.id);
    assert_eq!(report.skipped[0].reason, RedriveSkip::AlreadyApplied);
    assert_eq!(
        queue.backlog("inv").await.unwrap().ready,
        0,
        "nothing was sent back to the consumer"
    );
    let p = parking.get(env.id).await.unwrap();
    assert_eq!(
        p[0].status,
        ParkedStatus::Parked,
        "the parking is left for the operator"
    );
}

/// A message older than the inbox's replay window: its inbox row may be gone, so redrive
/// refuses it unless forced.
pub async fn redrive_refuses_a_message_older_than_the_replay_window_unless_forced<
    S: TableQueueFixture,
>(
    store: &S,
) {
    let queue = queue(store);
    let parking = store.parking();
    let mut env = order("o3", 1);
    let month_ago = std::time::SystemTime::now() - Duration::from_secs(30 * 24 * 3600);
    let since_epoch = month_ago.duration_since(std::time::UNIX_EPOCH).unwrap();
    let old_id = MessageId::from(uuid::Uuid::new_v7(uuid::Timestamp::from_unix(
        uuid::NoContext,
        since_epoch.as_secs(),
        since_epoch.subsec_nanos(),
    )));
    // A message a month old: its id (a UUIDv7) says when it was made.
    env.id = old_id;
    park_through_the_consumer(&queue, &parking, &env, old_id).await;

    let redriver = Redriver::new(parking.clone(), queue.publisher())
        .with_inbox(store.inbox())
        .replay_window(Duration::from_secs(14 * 24 * 3600));
    let report = redrive_all(&redriver).await;
    assert_eq!(report.skipped.len(), 1, "{report:?}");
    assert_eq!(report.skipped[0].reason, RedriveSkip::OlderThanReplayWindow);
    assert_eq!(
        queue.backlog("inv").await.unwrap().ready,
        0,
        "nothing was sent back"
    );

    let forced = redriver.force(true);
    let run = forced
        .start(&ParkingFilter::default(), 10, "test")
        .await
        .unwrap();
    assert_eq!(run.total, 1, "still selectable");
    let report = forced.execute_report(&run.id, 100.0, |_| {}).await.unwrap();
    assert!(report.skipped.is_empty());
    assert_eq!(
        queue.backlog("inv").await.unwrap().ready,
        1,
        "sent back when forced"
    );
}
