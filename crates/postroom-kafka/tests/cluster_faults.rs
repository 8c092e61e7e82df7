//! Faults of a Kafka cluster, on the mock cluster of three brokers (topics of three
//! partitions, three replicas): partition leaders moved and a broker taken down while records
//! flow, and a parking topic whose broker is down when a record must be parked. Each ends with
//! every effect applied once, and nothing committed past a record that is not settled.

mod common;

use common::ordered::{event, on_orders, retries, wait_until};
use common::{TestKafka, parked};
use postroom_core::{Handled, Handler, HandlerError, Incoming, MessageId, OutgoingMessage};
use postroom_kafka::ConsumerTopics;
use postroom_kafka::topology::consumer_topics;
use postroom_testkit::StoreFixture;
use postroom_testkit::stores::sqlite::SqliteFixture;
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Applies one effect per message id through the SQLite inbox and counts, per id, how often
/// the effect was applied and how often the inbox absorbed a repeat; records of key `poison`
/// are refused as permanent errors (parked at once).
struct CountingInbox {
    store: Arc<SqliteFixture>,
    counts: Mutex<HashMap<MessageId, (u32, u32)>>,
}

impl CountingInbox {
    fn new(store: Arc<SqliteFixture>) -> Arc<Self> {
        Arc::new(Self {
            store,
            counts: Mutex::new(HashMap::new()),
        })
    }

    fn applied(&self) -> usize {
        self.counts
            .lock()
            .unwrap()
            .values()
            .filter(|c| c.0 > 0)
            .count()
    }

    /// Every id of `ids` applied exactly once, and nothing else applied.
    fn assert_each_applied_once(&self, ids: &[MessageId]) {
        let counts = self.counts.lock().unwrap();
        for id in ids {
            let (applied, _) = counts.get(id).copied().unwrap_or_default();
            assert_eq!(applied, 1, "record {id} applied {applied} times");
        }
        assert_eq!(counts.len(), ids.len(), "no other record was handled");
    }
}

#[postroom_core::async_trait]
impl Handler for CountingInbox {
    async fn handle(&self, m: &Incoming) -> Result<Handled, HandlerError> {
        if m.envelope.aggregate.id == "poison" {
            return Err(HandlerError::permanent("poison", "refused for the test"));
        }
        let id = m.envelope.id;
        let handled = self
            .store
            .apply_effect("cluster", id, &format!("effect:{id}"))
            .await
            .map_err(HandlerError::from)?;
        let mut counts = self.counts.lock().unwrap();
        let c = counts.entry(id).or_default();
        match handled {
            Handled::Duplicate => c.1 += 1,
            _ => c.0 += 1,
        }
        Ok(handled)
    }
}

/// Records of many keys flow while the leaders of two partitions move to other brokers and
/// then broker 1 goes down for a few seconds (its partitions and, if it is the group's
/// coordinator, the group wait for it): every record is applied once, none is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaders_moved_and_a_broker_down_mid_run_lose_nothing_and_apply_once() {
    let kafka = TestKafka::on_mock("1s");
    let mock = kafka.mock.clone().expect("a mock cluster");
    let t = kafka.transport(kafka.config.clone());
    let store = Arc::new(SqliteFixture::fresh().await);
    let h = CountingInbox::new(store.clone());
    let run = on_orders(&t, "cluster", h.clone(), retries("1s", 20), 8).await;
    let topic = format!("{}.orders", kafka.prefix);
    let publisher = t.publisher();
    let mut ids = Vec::new();
    for round in 0..6u64 {
        match round {
            2 => {
                mock.move_leader(&topic, 0, 2);
                mock.move_leader(&topic, 1, 3);
            }
            4 => {
                mock.broker_down(1);
                let mock = mock.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_secs(3)).await;
                    mock.broker_up(1);
                });
            }
            _ => {}
        }
        for k in 0..10 {
            let e = event(&format!("k{k}"), round + 1);
            ids.push(e.id);
            publisher
                .publish(&OutgoingMessage::from_envelope(&e, "orders"))
                .await
                .expect("publish (confirmed once the partition has a leader)");
        }
    }
    assert!(
        wait_until(Duration::from_secs(60), || h.applied() == ids.len()).await,
        "every record applied: {} of {}",
        h.applied(),
        ids.len()
    );
    run.stop().await;
    h.assert_each_applied_once(&ids);
}

/// The committed offsets of `group` on `topic`, by partition (a partition with none is left
/// out).
fn committed(kafka: &TestKafka, group: &str, topic: &str) -> HashMap<i32, i64> {
    let mut c = kafka.config.client_config();
    c.set("group.id", group);
    let probe: BaseConsumer = c.create().expect("client");
    let mut wanted = rdkafka::TopicPartitionList::new();
    for p in 0..kafka.config.partitions {
        wanted.add_partition(topic, p);
    }
    let got = probe
        .committed_offsets(wanted, Duration::from_secs(10))
        .expect("committed offsets");
    got.elements()
        .iter()
        .filter_map(|e| match e.offset() {
            rdkafka::Offset::Offset(o) => Some((e.partition(), o)),
            _ => None,
        })
        .collect()
}

/// A record to park while its consumer's parking topic is unavailable (every partition led by
/// broker 3, which is down; everything else led by brokers 1 and 2, the group coordinated by
/// 1): the record is held (its offset is not committed, nothing is lost) until the broker is
/// back, and then parked once; the records of other keys are handled meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parking_topic_whose_broker_is_down_holds_the_record_until_it_is_back() {
    let kafka = TestKafka::on_mock("1s");
    let mock = kafka.mock.clone().expect("a mock cluster");
    let t = kafka.transport(kafka.config.clone());
    let store = Arc::new(SqliteFixture::fresh().await);
    let h = CountingInbox::new(store.clone());
    let run = on_orders(&t, "cluster", h.clone(), retries("1s", 3), 4).await;
    let names = ConsumerTopics::new(&kafka.prefix, "cluster");
    let topics = consumer_topics(&kafka.config, "cluster", &["orders".to_string()]);
    for topic in &topics {
        let partitions = if *topic == names.deliveries {
            1
        } else {
            kafka.config.partitions
        };
        for p in 0..partitions {
            let leader = if *topic == names.parking {
                3
            } else {
                1 + p % 2
            };
            mock.move_leader(topic, p, leader);
        }
    }
    for group in [
        &names.group,
        &format!("{}.reader", names.deliveries),
        &names.parking_group,
    ] {
        mock.coordinator(group, 1);
    }
    mock.broker_down(3);
    let poison = event("poison", 1);
    let others: Vec<_> = (0..6).map(|k| event(&format!("k{k}"), 1)).collect();
    let publisher = t.publisher();
    for e in std::iter::once(&poison).chain(&others) {
        publisher
            .publish(&OutgoingMessage::from_envelope(e, "orders"))
            .await
            .expect("publish");
    }
    let other_ids: Vec<MessageId> = others.iter().map(|e| e.id).collect();
    assert!(
        wait_until(Duration::from_secs(30), || h.applied() == others.len()).await,
        "the other keys' records were handled while the poison waited"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    let topic = format!("{}.orders", kafka.prefix);
    let total_committed: i64 = committed(&kafka, &names.group, &topic).values().sum();
    assert!(
        total_committed < (others.len() + 1) as i64,
        "no offset was committed past the held record: {total_committed}"
    );
    mock.broker_up(3);
    let mut all_committed = false;
    for _ in 0..60 {
        let sum: i64 = committed(&kafka, &names.group, &topic).values().sum();
        if sum == (others.len() + 1) as i64 {
            all_committed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        all_committed,
        "once parked, the held record's offset was committed"
    );
    run.stop().await;
    let records = parked(t.as_ref(), &store, "cluster").await;
    assert_eq!(records.len(), 1, "parked once: {records:?}");
    assert_eq!(records[0].message_id, poison.id);
    h.assert_each_applied_once(&other_ids);
}
