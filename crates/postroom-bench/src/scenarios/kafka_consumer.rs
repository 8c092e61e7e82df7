//! Kafka consumer with inbox: topic → handler → inbox row + business update in one PostgreSQL
//! transaction → offset stored, postroom's `Consumer` on its Kafka subscriber (offset
//! tracker, delivery ledger) beside a raw rdkafka loop at the same concurrency: poll up to
//! `concurrency` records, run their transactions at once, commit the offset after the last.
//! Each round on fresh topics and groups; timed from the first record handled, so that the
//! group join (seconds on some brokers) counts on neither side. Target ≥ 80 %.
//! The scenario itself is [`broker::consumer`](super::broker::consumer); here is Kafka's part.

use super::broker::Figure;
use super::broker::consumer::{Clock, ConsumerLoad, RawConsumer};
use super::broker::raw_inbox::apply_body;
use super::handler::{Progress, timed_from_first};
use crate::Ctx;
use crate::error::BenchError;
use crate::payload::ROUTING_KEY;
use crate::report::Measurement;
use crate::resources::kafka::Workload;
use postroom_core::{OutgoingMessage, async_trait};
use rdkafka::Message;
use rdkafka::consumer::{CommitMode, Consumer as _, StreamConsumer};
use sqlx::PgPool;

/// Run the pair `--rounds` times, alternating which goes first.
pub async fn run(ctx: &Ctx) -> Result<Measurement, BenchError> {
    let figure = Figure {
        name: "consumer_inbox_pg_kafka",
        group: "consumer",
        baseline: "raw rdkafka poll + sqlx transactions + offset commit, same concurrency",
        fresh_per_round: true,
    };
    super::broker::consumer::run::<Workload>(ctx, figure, Clock::AtFirstHandled).await
}

#[async_trait]
impl RawConsumer for Workload {
    /// The consumer's topics bound, then `messages` published by a raw producer, 1000 in
    /// flight.
    async fn fill(&self, messages: &[OutgoingMessage], prefetch: u16) -> Result<(), BenchError> {
        self.bind(prefetch).await?;
        let producer = self.raw_producer()?;
        self.raw_publish(&producer, messages, 1000).await
    }

    const BINDING: &'static str = ROUTING_KEY;

    /// A raw consumer in a group of its own: poll up to `concurrency` records, run their
    /// transactions at once, commit the offset after the last; timed from the first handled.
    async fn raw_round(&self, pool: &PgPool, load: &ConsumerLoad) -> Result<f64, BenchError> {
        let (n, conc) = (load.n, load.concurrency);
        let mut c = self.config.client_config();
        c.set("group.id", format!("{}.raw", self.prefix))
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest");
        let consumer: StreamConsumer = c
            .create()
            .map_err(|e| BenchError::Config(format!("raw Kafka consumer: {e}")))?;
        consumer
            .subscribe(&[&self.topic()])
            .map_err(|e| BenchError::Stalled(format!("raw subscribe: {e}")))?;
        let progress = Progress::default();
        let work = async {
            let mut done = 0;
            while done < n {
                let mut batch = Vec::with_capacity(conc);
                let first = consumer
                    .recv()
                    .await
                    .map_err(|e| BenchError::Stalled(format!("raw poll: {e}")))?;
                batch.push(first.detach());
                while batch.len() < conc.min(n - done) {
                    match tokio::time::timeout(std::time::Duration::ZERO, consumer.recv()).await {
                        Ok(Ok(m)) => batch.push(m.detach()),
                        Ok(Err(e)) => return Err(BenchError::Stalled(format!("raw poll: {e}"))),
                        Err(_) => break,
                    }
                }
                let txs = batch
                    .iter()
                    .map(|m| apply_body(pool, m.payload().unwrap_or_default()));
                for r in futures::future::join_all(txs).await {
                    r?;
                }
                let last = batch.last().expect("one record at least");
                let mut tpl = rdkafka::TopicPartitionList::new();
                tpl.add_partition_offset(
                    last.topic(),
                    last.partition(),
                    rdkafka::Offset::Offset(last.offset() + 1),
                )
                .map_err(|e| BenchError::Stalled(format!("raw offset: {e}")))?;
                consumer
                    .commit(&tpl, CommitMode::Async)
                    .map_err(|e| BenchError::Stalled(format!("raw commit: {e}")))?;
                done += batch.len();
                progress.add(batch.len());
            }
            Ok::<_, BenchError>(())
        };
        let (worked, per_sec) = tokio::join!(work, timed_from_first(&progress, n, "raw consumer"));
        worked?;
        per_sec
    }
}
