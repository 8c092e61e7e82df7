//! The consumer's metrics reach a Prometheus exporter: handled, retries per stage,
//! parked, handling time, and the backlog gauges including the oldest ready message's age.

use postroom_core::consumer::{Consumer, ConsumerConfig};
use postroom_core::{
    BacklogProbe, Envelope, EnvelopeDecoder, Handled, Handler, HandlerError, Incoming,
    OutgoingMessage, Publisher, RetryPolicy, async_trait,
};
use postroom_sqlite::SqliteStore;
use postroom_testkit::wait::eventually;
use std::sync::Arc;
use std::time::Duration;

struct FailOnce;
#[async_trait]
impl Handler for FailOnce {
    async fn handle(&self, m: &Incoming) -> Result<Handled, HandlerError> {
        match (m.envelope.aggregate.id.as_str(), m.attempt) {
            ("bad", _) => Err(HandlerError::permanent("nope", "permanent")),
            (_, 0) => Err(HandlerError::transient("flaky", "first attempt fails")),
            _ => Ok(Handled::Applied),
        }
    }
}

#[tokio::test]
async fn prometheus_exposition_has_the_consumer_metrics() {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).expect("only test in this binary");

    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("m.db")).await.unwrap();
    let queue = store.queue();
    let sub = queue.subscribe("metered", &["t.#"]).await.unwrap();
    // A ready message nobody consumes yet, so the oldest-ready age is positive.
    queue.bind("idle", &["t.#"]).await.unwrap();
    for id in ["ok", "bad"] {
        let env = Envelope::builder("t.e", "p").aggregate("a", id, 1).build();
        queue
            .publish(&OutgoingMessage::from_envelope(&env, "t.e"))
            .await
            .unwrap();
    }
    let mut cfg = ConsumerConfig::new("metered", EnvelopeDecoder::new().accept("t.e", 1..=1));
    cfg.retry = RetryPolicy::with_ladder("200ms".parse().unwrap());
    let consumer = Consumer::new(cfg, Arc::new(FailOnce));
    let stats = consumer.stats();
    let (stop, rx) = tokio::sync::watch::channel(false);
    let run = tokio::spawn(async move { consumer.run(sub, rx).await });
    assert!(
        eventually(Duration::from_secs(30), async || {
            let s = stats.snapshot();
            s.applied == 1 && s.parked_by_code.len() == 1
        })
        .await,
        "one applied and one parked within 30 s: {:?}",
        stats.snapshot()
    );
    stop.send(true).unwrap();
    run.await.unwrap();
    let (tx, rx) = tokio::sync::watch::channel(false);
    let probe: Arc<dyn BacklogProbe> = Arc::new(store.clone());
    let reporter = tokio::spawn(postroom_core::transport::report_backlog(
        probe,
        "idle".into(),
        Duration::from_secs(1),
        rx,
    ));
    // The reporter has run once its gauges are in the exposition.
    assert!(
        eventually(Duration::from_secs(30), async || handle
            .render()
            .contains("postroom_oldest_ready_age_seconds{consumer=\"idle\"}"))
        .await,
        "the backlog reporter did not report within 30 s"
    );
    tx.send(true).unwrap();
    reporter.await.unwrap();

    let text = handle.render();
    for needle in [
        "postroom_handled_total{consumer=\"metered\",result=\"applied\"} 1",
        "postroom_retries_total{consumer=\"metered\",stage=\"0\"} 1",
        "postroom_parked_total{consumer=\"metered\",code=\"nope\"} 1",
        "postroom_handler_errors_total{consumer=\"metered\",class=\"transient\"} 1",
        "postroom_handling_seconds",
        "postroom_ready_messages{consumer=\"idle\"} 2",
    ] {
        assert!(text.contains(needle), "{needle} missing from:\n{text}");
    }
    let age_line = text
        .lines()
        .find(|l| l.starts_with("postroom_oldest_ready_age_seconds{consumer=\"idle\"}"))
        .expect("age gauge");
    let age: f64 = age_line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(age > 0.0, "{age_line}");
}
