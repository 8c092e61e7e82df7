//! A producer sending its rows right after its commit (`outbox::enqueue_to_send` +
//! `OutboxSender`), on the queue in PostgreSQL tables: the rows go out and are marked without a
//! relay; a row behind an unpublished predecessor is left to the relay, in order; rows a
//! producer never sent, or could not, reach the relay.

mod common;

use common::{fresh_store, outgoing};
use postroom_core::{
    Delivery, MessageId, OutboxRelay, OutboxStore, OutgoingMessage, RelayConfig, Subscriber,
};
use postroom_postgres::outbox::{self, OutboxSender, Sent, ToSend};
use postroom_postgres::{PgOutbox, PgQueue, PgStore, commit};
use postroom_testkit::wait::until;
use std::sync::Arc;
use std::time::Duration;

/// Write `rows` in one transaction, leasing what may be sent to `owner`, and commit.
async fn written_to_send(s: &PgStore, rows: &[OutgoingMessage], lease: Duration) -> ToSend {
    let mut tx = s.begin().await.unwrap();
    let to_send = outbox::enqueue_to_send(&mut tx, s.prefix(), rows, "producer-1", lease)
        .await
        .unwrap();
    commit(tx).await.unwrap();
    to_send
}

/// A producer's sender on the store's outbox, publishing to `q`.
fn sender(s: &PgStore, q: &Arc<PgQueue>) -> OutboxSender<PgOutbox, PgQueue> {
    OutboxSender::new(Arc::new(s.outbox()), q.clone())
}

/// A relay on the store's outbox, publishing to `q`.
fn relay(s: &PgStore, q: &Arc<PgQueue>) -> OutboxRelay<PgOutbox, PgQueue> {
    OutboxRelay::new(
        Arc::new(s.outbox()),
        q.clone(),
        RelayConfig {
            relay_id: "relay".into(),
            ..RelayConfig::default()
        },
    )
}

/// Run `relay` pass after pass until one publishes a row; fail naming `what` after 20 s.
async fn until_a_pass_publishes_one_row(relay: &OutboxRelay<PgOutbox, PgQueue>, what: &str) {
    until(Duration::from_secs(20), what, || async {
        relay.run_once().await.unwrap().published == 1
    })
    .await;
}

fn queue(s: &PgStore) -> Arc<PgQueue> {
    Arc::new(s.queue(PgQueue::defaults().prefetch(16)).unwrap())
}

/// The ids `sub` receives within a few seconds, in order, acked.
async fn received(sub: &mut impl Subscriber, n: usize) -> Vec<MessageId> {
    let mut got = Vec::new();
    while got.len() < n {
        let Some(d) = sub.next(Duration::from_secs(10)).await.unwrap() else {
            break;
        };
        got.push(d.message().stable_id());
        d.ack().await.map_err(|(e, _)| e).unwrap();
    }
    got
}

#[tokio::test]
async fn rows_sent_after_the_commit_are_published_and_marked_without_a_relay() {
    let (s, _db) = fresh_store(6).await;
    let q = queue(&s);
    let mut sub = q.subscribe("inv", &["orders"]).await.unwrap();
    let rows = vec![outgoing("a", 1), outgoing("b", 1)];
    let to_send = written_to_send(&s, &rows, Duration::from_secs(30)).await;
    assert_eq!(to_send.len(), 2, "both rows are their aggregate's first");
    assert!(
        s.outbox()
            .claim("relay", 10, Duration::from_secs(30))
            .await
            .unwrap()
            .is_empty(),
        "a relay finds the producer's leased rows taken"
    );
    let sent = sender(&s, &q).send(to_send).await.unwrap();
    assert_eq!(
        sent,
        Sent {
            published: 2,
            given_back: 0
        }
    );
    assert_eq!(s.outbox().pending().await.unwrap(), 0, "both marked");
    assert_eq!(received(&mut sub, 2).await, vec![rows[0].id, rows[1].id]);
}

#[tokio::test]
async fn a_row_behind_an_unpublished_predecessor_is_left_to_the_relay_in_order() {
    let (s, _db) = fresh_store(6).await;
    let q = queue(&s);
    let mut sub = q.subscribe("inv", &["orders"]).await.unwrap();
    // a1 is written plainly and not yet published; a2 and b1 are written to be sent, and a
    // transaction writing c1 and c2 may send only c1.
    let a1 = outgoing("a", 1);
    let mut tx = s.begin().await.unwrap();
    outbox::enqueue_batch(&mut tx, s.prefix(), std::slice::from_ref(&a1))
        .await
        .unwrap();
    commit(tx).await.unwrap();
    let later = vec![
        outgoing("a", 2),
        outgoing("b", 1),
        outgoing("c", 1),
        outgoing("c", 2),
    ];
    let to_send = written_to_send(&s, &later, Duration::from_secs(30)).await;
    let leased: Vec<MessageId> = to_send.messages().iter().map(|m| m.id).collect();
    assert_eq!(
        leased,
        vec![later[1].id, later[2].id],
        "only b1 and c1: a2 follows the unpublished a1, c2 follows c1"
    );
    let sender = sender(&s, &q);
    assert_eq!(sender.send(to_send).await.unwrap().published, 2);
    // The relay sends the rest, each after its predecessor.
    let relay = relay(&s, &q);
    for _ in 0..10 {
        relay.run_once().await.unwrap();
    }
    assert_eq!(s.outbox().pending().await.unwrap(), 0);
    let got = received(&mut sub, 5).await;
    let at = |id: MessageId| got.iter().position(|g| *g == id).expect("received");
    assert_eq!(got.len(), 5, "{got:?}");
    assert!(at(a1.id) < at(later[0].id), "a1 before a2: {got:?}");
    assert!(at(later[2].id) < at(later[3].id), "c1 before c2: {got:?}");
}

#[tokio::test]
async fn rows_a_producer_never_sent_go_out_through_the_relay_once_the_lease_runs_out() {
    let (s, _db) = fresh_store(6).await;
    let q = queue(&s);
    let mut sub = q.subscribe("inv", &["orders"]).await.unwrap();
    let rows = vec![outgoing("a", 1)];
    let lease = Duration::from_secs(1);
    // The producer commits and dies before sending.
    let _never_sent = written_to_send(&s, &rows, lease).await;
    let relay = relay(&s, &q);
    assert_eq!(
        relay.run_once().await.unwrap().claimed,
        0,
        "leased to the producer"
    );
    until_a_pass_publishes_one_row(
        &relay,
        "the relay publishes the row once the producer's lease ran out",
    )
    .await;
    assert_eq!(received(&mut sub, 1).await, vec![rows[0].id]);
    assert_eq!(s.outbox().pending().await.unwrap(), 0);
}

#[tokio::test]
async fn a_row_whose_publish_failed_is_given_back_to_the_relay() {
    let (s, _db) = fresh_store(6).await;
    let q = queue(&s);
    // No subscription for the topic yet: the queue refuses the message as unroutable.
    let rows = vec![outgoing("a", 1)];
    let to_send = written_to_send(&s, &rows, Duration::from_secs(600)).await;
    let sent = sender(&s, &q).send(to_send).await.unwrap();
    assert_eq!(
        sent,
        Sent {
            published: 0,
            given_back: 1
        }
    );
    assert_eq!(s.outbox().pending().await.unwrap(), 1, "still to publish");
    // Given back (not held for the 10-minute lease): once routable, the relay sends it.
    let mut sub = q.subscribe("inv", &["orders"]).await.unwrap();
    let relay = relay(&s, &q);
    until_a_pass_publishes_one_row(&relay, "the relay publishes the given-back row").await;
    assert_eq!(received(&mut sub, 1).await, vec![rows[0].id]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn producers_sending_the_same_aggregates_at_once_beside_a_relay_keep_their_order() {
    let (s, _db) = fresh_store(6).await;
    let q = queue(&s);
    let mut sub = q.subscribe("inv", &["orders"]).await.unwrap();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let relay = OutboxRelay::new(
        Arc::new(s.outbox()),
        q.clone(),
        RelayConfig {
            relay_id: "relay".into(),
            idle_wait: Duration::from_millis(20),
            ..RelayConfig::default()
        },
    );
    let relay_task = tokio::spawn(async move { relay.run(stopped).await });
    let producers: Vec<_> = (0..4)
        .map(|p| {
            let (s, q) = (s.clone(), q.clone());
            tokio::spawn(async move {
                let sender = sender(&s, &q);
                for i in 0..25 {
                    let rows = vec![
                        outgoing("x", i),
                        outgoing("y", i),
                        outgoing(&format!("p{p}"), i),
                    ];
                    let mut tx = s.begin().await.unwrap();
                    let to_send = outbox::enqueue_to_send(
                        &mut tx,
                        s.prefix(),
                        &rows,
                        &format!("producer-{p}"),
                        Duration::from_secs(30),
                    )
                    .await
                    .unwrap();
                    commit(tx).await.unwrap();
                    sender.send(to_send).await.unwrap();
                }
            })
        })
        .collect();
    for p in producers {
        p.await.unwrap();
    }
    let got = received(&mut sub, 300).await;
    stop.send(true).unwrap();
    relay_task.await.unwrap();
    assert_eq!(got.len(), 300, "every row once");
    assert_eq!(s.outbox().pending().await.unwrap(), 0);
    // Each aggregate's rows arrive in the order they were committed (the outbox's sequence).
    let order: Vec<(uuid::Uuid, String)> =
        sqlx::query_as("SELECT id, aggregate_key FROM postroom_outbox ORDER BY aggregate_key, seq")
            .fetch_all(s.pool())
            .await
            .unwrap();
    let at = |id: uuid::Uuid| {
        got.iter()
            .position(|g| g.as_uuid() == id)
            .expect("received")
    };
    for pair in order.windows(2) {
        if pair[0].1 == pair[1].1 {
            assert!(
                at(pair[0].0) < at(pair[1].0),
                "aggregate {} out of order",
                pair[0].1
            );
        }
    }
}

/// The notifications that reached `listener` on the outbox's channel before a sentinel sent
/// now (notifications arrive in commit order, so the sentinel comes after every earlier one).
async fn notifications_so_far(s: &PgStore, listener: &mut sqlx::postgres::PgListener) -> usize {
    sqlx::query("SELECT pg_notify(current_schema() || '.' || $1, 'sentinel')")
        .bind(s.prefix().outbox_channel())
        .execute(s.pool())
        .await
        .unwrap();
    let mut seen = 0;
    loop {
        let n = tokio::time::timeout(Duration::from_secs(10), listener.recv())
            .await
            .expect("the sentinel notification arrives")
            .unwrap();
        if n.payload() == "sentinel" {
            return seen;
        }
        seen += 1;
    }
}

/// At least one notification reached `listener` since the last look, for `why`.
async fn assert_relays_woken(s: &PgStore, listener: &mut sqlx::postgres::PgListener, why: &str) {
    assert!(notifications_so_far(s, listener).await >= 1, "{why}");
}

#[tokio::test]
async fn a_producer_sending_its_own_rows_wakes_no_relay_unless_it_leaves_rows_to_one() {
    let (s, _db) = fresh_store(6).await;
    let q = queue(&s);
    let mut sub = q.subscribe("inv", &["orders"]).await.unwrap();
    let schema: String = sqlx::query_scalar("SELECT current_schema()")
        .fetch_one(s.pool())
        .await
        .unwrap();
    let mut listener = sqlx::postgres::PgListener::connect_with(s.pool())
        .await
        .unwrap();
    listener
        .listen(&format!("{schema}.{}", s.prefix().outbox_channel()))
        .await
        .unwrap();
    // Rows the producer sends and marks itself: nothing for a relay to do.
    let rows = vec![outgoing("a", 1), outgoing("b", 1)];
    let to_send = written_to_send(&s, &rows, Duration::from_secs(30)).await;
    assert_eq!(to_send.len(), 2);
    let sent = sender(&s, &q).send(to_send).await.unwrap();
    assert_eq!(sent.published, 2);
    assert_eq!(
        notifications_so_far(&s, &mut listener).await,
        0,
        "neither the producer's insert nor its mark woke the relays"
    );
    // A plain insert still wakes them.
    let mut tx = s.begin().await.unwrap();
    let c1 = outgoing("c", 1);
    outbox::enqueue_batch(&mut tx, s.prefix(), std::slice::from_ref(&c1))
        .await
        .unwrap();
    commit(tx).await.unwrap();
    assert_relays_woken(&s, &mut listener, "a plain insert wakes the relays").await;
    // A row left behind its unpublished predecessor (c1) is the relays' work: they are woken,
    // and woken again when the predecessor's mark makes it a head.
    let c2 = outgoing("c", 2);
    let to_send = written_to_send(&s, std::slice::from_ref(&c2), Duration::from_secs(30)).await;
    assert!(to_send.is_empty(), "c2 waits behind c1");
    assert_relays_woken(&s, &mut listener, "a row left to the relays wakes them").await;
    let claimed = s
        .outbox()
        .claim("relay", 10, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(
        claimed.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![c1.id]
    );
    s.outbox().mark_published("relay", &[c1.id]).await.unwrap();
    assert_relays_woken(
        &s,
        &mut listener,
        "a mark that leaves a new head wakes the relays",
    )
    .await;
    // The quiet insert ends with the producer's leasing statement: a plain insert later in
    // the same transaction wakes the relays.
    let mut tx = s.begin().await.unwrap();
    let sent_later = outbox::enqueue_to_send(
        &mut tx,
        s.prefix(),
        &[outgoing("d", 1)],
        "producer-1",
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    assert_eq!(sent_later.len(), 1);
    outbox::enqueue_batch(&mut tx, s.prefix(), &[outgoing("e", 1)])
        .await
        .unwrap();
    commit(tx).await.unwrap();
    assert_relays_woken(
        &s,
        &mut listener,
        "the plain insert after the producer's own rows wakes the relays",
    )
    .await;
    // The rows the producer sent were delivered once each.
    assert_eq!(received(&mut sub, 2).await, vec![rows[0].id, rows[1].id]);
}
