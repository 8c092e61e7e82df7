//! The circuit breaker with its default settings on any transport, against a handler's
//! database that goes down and comes back: the breaker opens while the database is down (the
//! failed messages wait in a retry stage of 8 s, longer than the breaker's cooldown, so the
//! trial pull after the cooldown finds nothing), and once the database is back every message
//! is processed, once, and the breaker closes.

use crate::servers::pg_cluster::PgCluster;
use crate::wait::until;
use postroom_core::consumer::{Consumer, ConsumerConfig};
use postroom_core::{
    BreakerConfig, Envelope, EnvelopeDecoder, Handled, Handler, HandlerError, Incoming,
    OutgoingMessage, RetryLadder, RetryPolicy, Subscription, Transport, async_trait,
};
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

fn order(i: usize) -> Envelope {
    let id = format!("b{i}");
    Envelope::builder("order.created", "tests")
        .aggregate("order", &id, 1)
        .data(serde_json::json!({ "order_id": id }))
        .build()
}

/// Run the scenario on `transport`, whose consumer `consumer` receives `order.created` (and
/// whose retry stage, if the transport keeps fixed stages, is 8 s).
pub async fn default_breaker_rides_out_a_database_outage(
    transport: Arc<dyn Transport>,
    consumer: &str,
) {
    let db = PgCluster::start();
    let pool = db.pool(4, Duration::from_secs(1)).await;
    sqlx::query("CREATE TABLE effects (id UUID PRIMARY KEY)")
        .execute(&pool)
        .await
        .unwrap();

    let mut cfg = ConsumerConfig::new(
        consumer,
        EnvelopeDecoder::new().accept("order.created", 1..=1),
    );
    assert_eq!(cfg.breaker, BreakerConfig::default(), "the default breaker");
    cfg.version = "breaker-1".into();
    cfg.retry = RetryPolicy {
        jitter: 0.0,
        ..RetryPolicy::with_ladder(RetryLadder::new(vec![Duration::from_secs(8)]).unwrap())
    };
    cfg.retry.max_retries = 10;
    cfg.handler_timeout = Duration::from_secs(10);
    let consumer_loop = Arc::new(
        Consumer::for_transport(
            cfg,
            Arc::new(Effects { pool: pool.clone() }),
            &transport.capabilities(),
        )
        .unwrap(),
    );
    let subscription = Subscription::new(consumer, &["order.created"]);
    transport.bind(&subscription).await.unwrap();
    let (stop, rx) = tokio::sync::watch::channel(false);
    let run = {
        let (c, t) = (consumer_loop.clone(), transport.clone());
        tokio::spawn(async move { c.run_on(t.as_ref(), &subscription, rx).await })
    };

    db.kill();
    let orders: Vec<_> = (0..8).map(order).collect();
    let publisher = transport.publisher();
    for env in &orders {
        publisher
            .publish(&OutgoingMessage::from_envelope(env, "order.created"))
            .await
            .unwrap();
    }
    until(Duration::from_secs(30), "the breaker to open", async || {
        consumer_loop.step().breaker().is_open()
    })
    .await;
    db.start_again();

    until(
        Duration::from_secs(60),
        "every message to be applied once the database came back",
        async || {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM effects")
                .fetch_one(&pool)
                .await
                .is_ok_and(|n| n == orders.len() as i64)
        },
    )
    .await;
    until(
        Duration::from_secs(30),
        "the backlog to drain",
        async || {
            transport
                .backlog(consumer)
                .await
                .is_ok_and(|b| b.ready == 0 && b.unacked == 0 && b.delayed == 0)
        },
    )
    .await;
    stop.send(true).unwrap();
    run.await.unwrap().unwrap();
    assert!(
        !consumer_loop.step().breaker().is_open(),
        "the breaker closed again"
    );
}
