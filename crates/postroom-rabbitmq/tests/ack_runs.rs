//! Acknowledging a batch in one act: the deliveries of a batch that are their channel's lowest
//! unsettled ones in a row go in one basic.ack with the `multiple` flag; a delivery still
//! being handled (or handed back unacked) inside the range is never acknowledged by a
//! neighbour's ack, so the broker delivers it again.

mod common;

use common::{TestRabbit, order};
use postroom_core::consumer::{BatchConfig, BatchConsumer, ConsumerConfig};
use postroom_core::{
    BatchHandler, BoxSubscriber, Delivery, EnvelopeDecoder, Handled, HandlerError, Incoming,
    MessageId, OutgoingMessage, Publisher, Subscriber, async_trait,
};
use postroom_rabbitmq::RabbitSubscriber;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const CONSUMER: &str = "runs";

async fn publish(t: &TestRabbit, n: usize) -> Vec<MessageId> {
    let orders: Vec<_> = (0..n).map(|i| order(&format!("run-{i}"), 1)).collect();
    let messages: Vec<_> = orders
        .iter()
        .map(|o| OutgoingMessage::from_envelope(o, "order.created"))
        .collect();
    for r in t.publisher().publish_batch(&messages).await {
        r.expect("published");
    }
    orders.iter().map(|o| o.id).collect()
}

async fn take<S: Subscriber>(sub: &mut S, n: usize) -> Vec<S::Delivery> {
    let mut got = Vec::with_capacity(n);
    while got.len() < n {
        let d = sub
            .next(Duration::from_secs(10))
            .await
            .expect("receive")
            .unwrap_or_else(|| panic!("only {} of {n} delivered", got.len()));
        got.push(d);
    }
    got
}

/// Ids a fresh subscriber gets: `expected` of them (each awaited up to 10 s), then whatever
/// else comes within a second.
async fn left_in_queue(t: &TestRabbit, expected: usize) -> Vec<MessageId> {
    let mut sub: RabbitSubscriber = t.subscriber(CONSUMER, 50, t.publisher());
    let mut ids = Vec::new();
    loop {
        let wait = if ids.len() < expected { 10 } else { 1 };
        match sub.next(Duration::from_secs(wait)).await.expect("receive") {
            Some(d) => ids.push(d.message().stable_id()),
            None => break,
        }
    }
    sub.close().await;
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_of_lowest_unsettled_deliveries_goes_in_one_ack_and_never_covers_a_busy_one() {
    let t = TestRabbit::new("1s").await;
    t.add_consumer(CONSUMER, &["order.created"]).await;
    let ids = publish(&t, 10).await;
    let stats = t.broker.stats();
    let mut sub: RabbitSubscriber = t.subscriber(CONSUMER, 20, t.publisher());
    let mut got = take(&mut sub, 10).await;
    let delivered: Vec<MessageId> = got.iter().map(|d| d.message().stable_id()).collect();
    assert_eq!(delivered, ids, "one queue delivers in order");
    let (acts, runs) = (stats.ack_acts(), stats.acked_by_runs());

    // The first five are the lowest unsettled: one act.
    let rest = got.split_off(5);
    for r in Delivery::ack_all(got).await {
        r.map_err(|(e, _)| e).expect("acked");
    }
    assert_eq!(stats.ack_acts() - acts, 1, "one basic.ack for the run");
    assert_eq!(stats.acked_by_runs() - runs, 5);

    // The sixth stays unsettled (still being handled): the last four go one by one.
    let mut rest = rest.into_iter();
    let busy = rest.next().expect("sixth");
    let busy_id = busy.message().stable_id();
    for r in Delivery::ack_all(rest.collect()).await {
        r.map_err(|(e, _)| e).expect("acked");
    }
    assert_eq!(stats.ack_acts() - acts, 5, "four single acks after the run");
    assert_eq!(
        stats.acked_by_runs() - runs,
        5,
        "no run covered the busy one"
    );

    // It was never acknowledged: closing the channel gives it back, and only it.
    drop(busy);
    sub.close().await;
    assert_eq!(left_in_queue(&t, 1).await, vec![busy_id]);
}

/// Applies every message (records its id); the batch is one "transaction".
#[derive(Default)]
struct Record {
    seen: Mutex<HashSet<MessageId>>,
}

#[async_trait]
impl BatchHandler for Record {
    async fn handle_batch(
        &self,
        batch: &[Incoming],
    ) -> Result<Vec<Result<Handled, HandlerError>>, HandlerError> {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let mut seen = self.seen.lock().unwrap();
        Ok(batch
            .iter()
            .map(|m| {
                Ok(if seen.insert(m.envelope.id) {
                    Handled::Applied
                } else {
                    Handled::Duplicate
                })
            })
            .collect())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_batched_consumer_acknowledges_runs_through_the_transport_and_loses_nothing() {
    let t = TestRabbit::new("1s").await;
    t.add_consumer(CONSUMER, &["order.created"]).await;
    let n = 400;
    let ids: HashSet<MessageId> = publish(&t, n).await.into_iter().collect();
    let stats = t.broker.stats();
    let (acts, acked, runs) = (stats.ack_acts(), stats.acked(), stats.acked_by_runs());
    // Through the type-erased subscriber the CLI uses.
    let sub = BoxSubscriber::new(t.subscriber(CONSUMER, 200, t.publisher()));
    let mut cfg = ConsumerConfig::new(
        CONSUMER,
        EnvelopeDecoder::new().accept("order.created", 1..=1),
    );
    cfg.concurrency = 4;
    let handler = Arc::new(Record::default());
    let consumer = BatchConsumer::new(
        cfg,
        BatchConfig {
            max_size: 50,
            linger: Duration::from_millis(20),
        },
        handler.clone(),
    );
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(async move { consumer.run(sub, stopped).await });
    let all_seen = common::eventually(Duration::from_secs(30), || async {
        handler.seen.lock().unwrap().len() == n
    })
    .await;
    let all_acked = common::eventually(Duration::from_secs(10), || async {
        stats.acked() - acked >= n as u64
    })
    .await;
    stop.send(true).unwrap();
    task.await.unwrap();
    assert!(all_seen, "every message handled");
    assert_eq!(*handler.seen.lock().unwrap(), ids);
    assert!(all_acked, "every delivery acknowledged");
    let by_runs = stats.acked_by_runs() - runs;
    assert!(
        by_runs >= 2,
        "a batch holding the channel's lowest unsettled deliveries goes in one act (runs covered {by_runs})"
    );
    assert!(
        stats.ack_acts() - acts < n as u64,
        "fewer acts than deliveries: {} for {n}",
        stats.ack_acts() - acts
    );
    assert!(
        left_in_queue(&t, 0).await.is_empty(),
        "nothing left unacked"
    );
}
