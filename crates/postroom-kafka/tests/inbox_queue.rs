//! The seed's inbox mode on Kafka, end to end against the real broker and PostgreSQL: a Kafka
//! topic feeds the PostgreSQL inbox-queue table (each record stored, and only then its offset
//! moved: the ingest acks after the insert committed), and N inbox-queue workers process the
//! rows in ordered mode. A gap in an aggregate's versions that fills late is waited for and
//! then processed in order; a gap that never fills parks the waiting record with
//! `version_gap` after the bounded wait, while other keys flow.

mod common;

use common::TestKafka;
use postroom_core::{
    Envelope, OutgoingMessage, ParkingFilter, ParkingStore, Publisher, Subscription, Transport,
};
use postroom_kafka::KafkaTransport;
use postroom_postgres::{InboxQueue, OrderedMode, PgStore, TablePrefix};
use postroom_testkit::effect::VersionLog;
use postroom_testkit::running::{inbox_queue_config, spawn_ingest, spawn_workers};
use postroom_testkit::servers::TestDb;
use postroom_testkit::wait::eventually as wait_until;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

const CONSUMER: &str = "seed3";
const ROUTE: &str = "orders";

fn event(agg: &str, version: u64) -> Envelope {
    Envelope::builder("order.created", "seed-003")
        .aggregate("order", agg, version)
        .build()
}

async fn publish(publisher: &Arc<dyn Publisher>, events: &[&Envelope]) {
    for e in events {
        publisher
            .publish(&OutgoingMessage::from_envelope(e, ROUTE))
            .await
            .expect("publish");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_topic_feeds_the_inbox_table_and_workers_process_it_in_order_across_gaps() {
    let kafka = TestKafka::new("1s");
    let transport = KafkaTransport::new(kafka.config.clone().partitions(2)).unwrap();
    let db = TestDb::create().await;
    let store = PgStore::from_pool(db.pool(12).await, TablePrefix::default());
    store.migrate().await.unwrap();
    let mut cfg = inbox_queue_config(CONSUMER);
    cfg.workers = 4;
    cfg.ordered = Some(OrderedMode {
        gap_wait: Duration::from_secs(8),
        recheck: Duration::from_millis(50),
    });
    let iq = InboxQueue::new(store.pool().clone(), store.prefix().clone(), cfg).unwrap();

    // The ingest: a consumer group member whose every record is stored, then acked.
    let sub = transport
        .subscribe(&Subscription::new(CONSUMER, &[ROUTE]).prefetch(16))
        .await
        .unwrap();
    let (stop, rx) = watch::channel(false);
    let ingest = spawn_ingest(&iq, sub, rx.clone());
    let handler = Arc::new(VersionLog::pausing(Duration::from_millis(10)));
    let workers = spawn_workers(&iq, handler.clone(), rx);

    // Aggregate `late`: 1, 2, 4, 5 now, 3 later. Aggregate `never`: 1, 3 (2 never comes).
    // Aggregate `flow`: 1..=4, no gap.
    let late: Vec<Envelope> = (1..=5).map(|v| event("late", v)).collect();
    let never = [event("never", 1), event("never", 3)];
    let flow: Vec<Envelope> = (1..=4).map(|v| event("flow", v)).collect();
    let publisher = transport.publisher();
    publish(&publisher, &[&late[0], &late[1], &late[3], &late[4]]).await;
    publish(&publisher, &never.iter().collect::<Vec<_>>()).await;
    publish(&publisher, &flow.iter().collect::<Vec<_>>()).await;

    assert!(
        wait_until(Duration::from_secs(60), async || {
            handler.versions_of("late").len() == 2 && handler.versions_of("flow").len() == 4
        })
        .await,
        "records stored and processed: {:?}",
        handler.calls()
    );
    // Every record so far is in the table, so the group's offsets moved past all of them.
    assert!(
        wait_until(Duration::from_secs(30), async || transport
            .backlog(CONSUMER)
            .await
            .is_ok_and(|b| b.ready == 0))
        .await,
        "offsets committed once the rows are stored"
    );
    assert_eq!(
        handler.versions_of("late"),
        vec![1, 2],
        "4 and 5 wait behind the missing 3"
    );

    // The missing version arrives late, within the gap wait: processed in order.
    publish(&publisher, &[&late[2]]).await;
    assert_eq!(
        handler
            .versions_once("late", 5, Duration::from_secs(30))
            .await,
        vec![1, 2, 3, 4, 5],
        "the gap filled"
    );
    assert_eq!(handler.versions_of("flow"), vec![1, 2, 3, 4]);

    // The gap of `never` does not fill: version 3 is parked after the bounded wait.
    let parking = store.parking();
    let filter = ParkingFilter {
        consumer: Some(CONSUMER.into()),
        ..ParkingFilter::default()
    };
    let mut parked = Vec::new();
    assert!(
        wait_until(Duration::from_secs(30), async || {
            parked = parking.search(&filter, 10).await.unwrap();
            !parked.is_empty()
        })
        .await,
        "the record behind a gap that never fills is parked"
    );
    assert_eq!(parked.len(), 1);
    assert_eq!(parked[0].message_id, never[1].id);
    assert_eq!(parked[0].error_code, "version_gap");
    assert_eq!(
        handler.versions_of("never"),
        vec![1],
        "3 never reached the handler"
    );
    let _ = stop.send(true);
    ingest.await.unwrap();
    workers.await.unwrap();
    assert_eq!(iq.pending().await.unwrap(), 0);
}
