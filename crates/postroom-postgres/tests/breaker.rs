//! The circuit breaker with its default settings, against a database that goes down and comes
//! back: the breaker opens while the handler's database is down (the failed messages wait in
//! a retry stage longer than the breaker's cooldown, so the trial pull after the cooldown finds
//! the queue empty), and once the database is back every message is processed, once.
//!
//! The queue is `PgQueue` on the shared server; the handler's database is a PostgreSQL cluster
//! of the test's own, killed with SIGKILL and started again.

mod common;

use common::{fresh_store, order, wait_until};
use postroom_core::consumer::{Consumer, ConsumerConfig};
use postroom_core::{
    EnvelopeDecoder, Handled, Handler, HandlerError, Incoming, OutgoingMessage, Publisher,
    RetryLadder, RetryPolicy, Subscription, Transport, async_trait,
};
use postroom_postgres::QueueConfig;
use postroom_testkit::servers::PgCluster;
use sqlx::PgPool;
use std::sync::Arc;
use std::time::Duration;

/// Applies an effect in its own database, claiming the message id there.
struct Effects {
    pool: PgPool,
}

#[async_trait]
impl Handler for Effects {
    async fn handle(&self, m: &Incoming) -> Result<Handled, HandlerError> {
        let done = sqlx::query("INSERT INTO effects (id) VALUES ($1) ON CONFLICT DO NOTHING")
            .bind(m.envelope.id.as_uuid())
            .execute(&self.pool)
            .await
            .map_err(postroom_postgres::map_error)?;
        Ok(if done.rows_affected() == 1 {
            Handled::Applied
        } else {
            Handled::Duplicate
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_breaker_opens_while_the_database_is_down_and_every_message_is_processed_after() {
    let db = PgCluster::start();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(1))
        .connect(&db.url("postgres"))
        .await
        .unwrap();
    sqlx::query("CREATE TABLE effects (id UUID PRIMARY KEY)")
        .execute(&pool)
        .await
        .unwrap();

    let (store, _queue_db) = fresh_store(8).await;
    let queue = store
        .queue(QueueConfig::default().poll_interval(Duration::from_millis(50)))
        .unwrap();
    let mut cfg = ConsumerConfig::new("brk", EnvelopeDecoder::new().accept("order.created", 1..=1));
    // The default breaker (5 failures, 5 s cooldown); retries wait 8 s, longer than the
    // cooldown, so the trial pull after the cooldown finds the queue empty.
    assert_eq!(cfg.breaker, postroom_core::BreakerConfig::default());
    cfg.retry = RetryPolicy {
        jitter: 0.0,
        ..RetryPolicy::with_ladder(RetryLadder::new(vec![Duration::from_secs(8)]).unwrap())
    };
    cfg.retry.max_retries = 10;
    cfg.handler_timeout = Duration::from_secs(10);
    let consumer = Arc::new(
        Consumer::for_transport(
            cfg,
            Arc::new(Effects { pool: pool.clone() }),
            &queue.capabilities(),
        )
        .unwrap(),
    );
    let (stop, rx) = tokio::sync::watch::channel(false);
    let run = {
        let (consumer, queue) = (consumer.clone(), queue.clone());
        tokio::spawn(async move {
            consumer
                .run_on(&queue, &Subscription::new("brk", &["order.*"]), rx)
                .await
        })
    };

    db.kill();
    let ids: Vec<_> = (0..8).map(|i| order(&format!("b{i}"), 1)).collect();
    for env in &ids {
        wait_until(Duration::from_secs(10), "the subscription", async || {
            queue
                .publish(&OutgoingMessage::from_envelope(env, "order.created"))
                .await
                .is_ok()
        })
        .await;
    }
    wait_until(Duration::from_secs(30), "the breaker to open", async || {
        consumer.step().breaker().is_open()
    })
    .await;
    db.start_again();

    wait_until(
        Duration::from_secs(60),
        "every message to be applied",
        async || {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM effects")
                .fetch_one(&pool)
                .await
                .is_ok_and(|n| n == ids.len() as i64)
        },
    )
    .await;
    wait_until(Duration::from_secs(10), "the queue to drain", async || {
        queue.backlog("brk").await.unwrap() == Default::default()
    })
    .await;
    stop.send(true).unwrap();
    run.await.unwrap().unwrap();
    assert!(
        !consumer.step().breaker().is_open(),
        "the breaker closed again"
    );
}
