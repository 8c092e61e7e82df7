//! The raw baseline of the e2e scenario: the service a careful engineer writes without
//! postroom, with lapin and sqlx. The producer publishes the orders straight to a quorum work
//! queue with pipelined confirms (windows of `--batch`); one consumer channel with the
//! prefetch feeds `--concurrency` workers, each applying its message with an inbox row and a
//! counter update in its own transaction and acking after the commit. A message that fails
//! is copied, confirmed, into a TTL retry queue that dead-letters it back to the work queue
//! (then acked); an undecodable one is rejected into the work queue's dead-letter exchange.

use super::mix::{Kind, Ledger, Mix};
use super::postroom::Shape;
use crate::error::{BenchError, Context};
use crate::resources::rabbit::{Workload, raw_publish};
use crate::scenarios::broker::raw_inbox::apply;
use futures::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicPublishOptions, BasicQosOptions,
    BasicRejectOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::publisher_confirm::Confirmation;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, ExchangeKind};
use postroom_core::{Envelope, Route};
use sqlx::PgPool;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Semaphore;

/// The raw service's queues, named under the workload's prefix (deleted with it).
#[derive(Clone, Debug)]
pub struct RawQueues {
    /// Orders arrive here.
    pub work: String,
    /// Failed orders wait here for the TTL, then go back to `work`.
    pub retry: String,
    /// Undecodable orders end here.
    pub dead: String,
}

fn args(pairs: &[(&str, AMQPValue)]) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in pairs {
        t.insert((*k).into(), v.clone());
    }
    t
}

impl RawQueues {
    /// Declare the queues on the broker: quorum queues, a TTL of `delay` on the retry queue.
    pub async fn declare(w: &Workload, delay: Duration) -> Result<Self, BenchError> {
        let q = Self {
            work: format!("{}.raw.work", w.prefix),
            retry: format!("{}.raw.retry", w.prefix),
            dead: format!("{}.raw.dead", w.prefix),
        };
        let dlx = format!("{}.raw.dlx", w.prefix);
        let quorum = || ("x-queue-type", AMQPValue::LongString("quorum".into()));
        let ch = w.raw_channel().await?;
        let durable = QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        };
        ch.exchange_declare(
            &dlx,
            ExchangeKind::Direct,
            ExchangeDeclareOptions {
                durable: true,
                ..ExchangeDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .ctx("raw dead-letter exchange")?;
        ch.queue_declare(&q.dead, durable, args(&[quorum()]))
            .await
            .ctx("raw dead queue")?;
        ch.queue_bind(
            &q.dead,
            &dlx,
            "dead",
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .ctx("raw dead binding")?;
        let work_args = args(&[
            quorum(),
            ("x-dead-letter-exchange", AMQPValue::LongString(dlx.into())),
            (
                "x-dead-letter-routing-key",
                AMQPValue::LongString("dead".into()),
            ),
        ]);
        ch.queue_declare(&q.work, durable, work_args)
            .await
            .ctx("raw work queue")?;
        let ttl = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
        let retry_args = args(&[
            quorum(),
            ("x-message-ttl", AMQPValue::LongLongInt(ttl)),
            ("x-dead-letter-exchange", AMQPValue::LongString("".into())),
            (
                "x-dead-letter-routing-key",
                AMQPValue::LongString(q.work.clone().into()),
            ),
            (
                "x-dead-letter-strategy",
                AMQPValue::LongString("at-least-once".into()),
            ),
            ("x-overflow", AMQPValue::LongString("reject-publish".into())),
        ]);
        ch.queue_declare(&q.retry, durable, retry_args)
            .await
            .ctx("raw retry queue")?;
        let _ = ch.close(200, "declared").await;
        Ok(q)
    }
}

/// What the workers share.
struct Service {
    pool: PgPool,
    mix: Mix,
    ledger: Arc<Ledger>,
    retry_channel: Channel,
    retry_queue: String,
    errors: Mutex<Vec<String>>,
}

/// One raw round with the concurrency, prefetch, publish window (`batch`) and body size of
/// `shape` (postroom's per-message round); the time from the first publish until every
/// message to apply was applied, and the send-to-apply latencies.
pub async fn round(
    w: &Workload,
    q: &RawQueues,
    pool: &PgPool,
    mix: Mix,
    shape: &Shape,
) -> Result<(Duration, Vec<f64>), BenchError> {
    let (concurrency, prefetch, window, bytes) =
        (shape.concurrency, shape.prefetch, shape.batch, shape.bytes);
    let messages: Vec<_> = mix
        .messages(bytes)
        .into_iter()
        .map(|mut m| {
            m.route = Route::Topic(q.work.clone());
            m
        })
        .collect();
    let ledger = Arc::new(Ledger::new(mix.n));
    let service = Arc::new(Service {
        pool: pool.clone(),
        mix,
        ledger: ledger.clone(),
        retry_channel: w.raw_confirm_channel().await?,
        retry_queue: q.retry.clone(),
        errors: Mutex::new(Vec::new()),
    });
    let consume = w.raw_channel().await?;
    consume
        .basic_qos(prefetch, BasicQosOptions::default())
        .await
        .ctx("raw qos")?;
    let mut deliveries = consume
        .basic_consume(
            &q.work,
            "raw-e2e",
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .ctx("raw consume")?;
    let permits = Arc::new(Semaphore::new(concurrency));
    let dispatcher = tokio::spawn({
        let (service, permits) = (service.clone(), permits.clone());
        async move {
            while let Some(next) = deliveries.next().await {
                let Ok(d) = next else { break };
                let Ok(permit) = permits.clone().acquire_owned().await else {
                    break;
                };
                let service = service.clone();
                tokio::spawn(async move {
                    if let Err(e) = service.work(d).await {
                        service.errors.lock().expect("errors").push(e.to_string());
                    }
                    drop(permit);
                });
            }
        }
    });
    let publish = w.raw_confirm_channel().await?;
    let produced = async {
        for (k, chunk) in messages.chunks(window.max(1)).enumerate() {
            let from = k * window.max(1);
            ledger.sent(from..from + chunk.len());
            raw_publish(&publish, "", chunk, window).await?;
        }
        Ok::<_, BenchError>(())
    };
    let outcome = async {
        produced.await?;
        let limit = crate::scenarios::timeout(mix.n) + Duration::from_secs(10);
        ledger
            .wait_applied(mix.applied_total(), limit, |done| {
                format!(
                    "raw e2e: {done} of {} applied; worker errors: {:?}",
                    mix.applied_total(),
                    service.errors.lock().expect("errors").first()
                )
            })
            .await
    }
    .await;
    dispatcher.abort();
    let _ = tokio::time::timeout(
        Duration::from_secs(10),
        permits.acquire_many(u32::try_from(concurrency).unwrap_or(u32::MAX)),
    )
    .await;
    let _ = consume.close(200, "done").await;
    let _ = publish.close(200, "done").await;
    let _ = service.retry_channel.close(200, "done").await;
    let elapsed = outcome?;
    Ok((elapsed, ledger.latencies_ms()))
}

impl Service {
    async fn work(&self, d: lapin::message::Delivery) -> Result<(), BenchError> {
        let Ok(env) = serde_json::from_slice::<Envelope>(&d.data) else {
            // Poison: the work queue's dead-letter exchange keeps it.
            return d
                .acker
                .reject(BasicRejectOptions { requeue: false })
                .await
                .ctx("raw reject");
        };
        let i = env
            .data
            .get("i")
            .and_then(serde_json::Value::as_u64)
            .and_then(|i| usize::try_from(i).ok())
            .ok_or_else(|| BenchError::Config("raw: no index in the data".into()))?;
        let retried = d
            .properties
            .headers()
            .as_ref()
            .is_some_and(|h| h.inner().contains_key("x-death"));
        if self.mix.kind(i) == Kind::FailsOnce && !retried {
            return self.retry_later(d).await;
        }
        let fresh = apply(&self.pool, &env).await?;
        d.acker
            .ack(BasicAckOptions::default())
            .await
            .ctx("raw ack")?;
        if fresh {
            self.ledger.applied(i);
        }
        Ok(())
    }

    /// A confirmed copy into the TTL retry queue, then the ack; without the confirm the
    /// original goes back to the queue.
    async fn retry_later(&self, d: lapin::message::Delivery) -> Result<(), BenchError> {
        let confirm = self
            .retry_channel
            .basic_publish(
                "",
                &self.retry_queue,
                BasicPublishOptions::default(),
                &d.data,
                d.properties.clone(),
            )
            .await
            .ctx("raw retry publish")?
            .await
            .ctx("raw retry confirm")?;
        if matches!(confirm, Confirmation::Ack(_)) {
            d.acker.ack(BasicAckOptions::default()).await.ctx("raw ack")
        } else {
            d.acker
                .nack(BasicNackOptions {
                    requeue: true,
                    ..BasicNackOptions::default()
                })
                .await
                .ctx("raw nack")
        }
    }
}
