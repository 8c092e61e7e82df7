//! A consumer's life on the real broker: `subscribe` returns with the consumer attached (the
//! broker counts it at once, so a program can tell it is ready), and a clean shutdown (the
//! consumer drained, then `close`) logs no error, with deliveries prefetched and retries in
//! flight when it starts; `close` returns once the connection has ended, so a process can exit
//! right after it.

mod common;

use common::{TestRabbit, eventually, order};
use postroom_core::consumer::{Consumer, ConsumerConfig};
use postroom_core::{
    EnvelopeDecoder, Handled, Handler, HandlerError, Incoming, OutgoingMessage, RetryPolicy,
    Subscription, Transport, async_trait,
};
use postroom_rabbitmq::RabbitTransport;
use postroom_testkit::cases::publish_all;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing_subscriber::layer::{Context, SubscriberExt};

/// Every ERROR event, as text.
#[derive(Clone, Default)]
struct Errors(Arc<Mutex<Vec<String>>>);

impl Errors {
    /// Collect every ERROR event of this process from now on (once per test process).
    fn install() -> Self {
        let errors = Self::default();
        tracing::subscriber::set_global_default(
            tracing_subscriber::registry().with(errors.clone()),
        )
        .expect("one subscriber per test process");
        errors
    }

    /// The ERROR events so far.
    fn logged(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!(" {}={value:?}", field.name()));
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Errors {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        if *event.metadata().level() == tracing::Level::ERROR {
            let mut fields = Fields(event.metadata().target().to_string());
            event.record(&mut fields);
            self.0.lock().unwrap().push(fields.0);
        }
    }
}

/// Fails the first delivery of every third message (a retry through the stage), applies the
/// rest, slowly enough that deliveries wait prefetched.
#[derive(Default)]
struct Slow {
    applied: AtomicU64,
}

#[async_trait]
impl Handler for Slow {
    async fn handle(&self, m: &Incoming) -> Result<Handled, HandlerError> {
        tokio::time::sleep(Duration::from_millis(20)).await;
        if m.attempt == 0 && m.envelope.id.as_uuid().as_u128().is_multiple_of(3) {
            return Err(HandlerError::transient("down", "dependency down"));
        }
        self.applied.fetch_add(1, Ordering::SeqCst);
        Ok(Handled::Applied)
    }
}

/// A consumer `name` of `order.created` (version 1), retried on the `1s` stage up to `retries`
/// times.
fn order_config(name: &str, retries: u32) -> ConsumerConfig {
    let mut cfg = ConsumerConfig::new(name, EnvelopeDecoder::new().accept("order.created", 1..=1));
    cfg.retry = RetryPolicy::default()
        .ladder("1s".parse().unwrap())
        .retries(retries);
    cfg
}

/// Publish `n` orders, with ids `<prefix>-0` onwards, in one batch through `transport`.
async fn publish_orders(transport: &RabbitTransport, prefix: &str, n: usize) {
    let messages: Vec<_> = (0..n)
        .map(|i| {
            OutgoingMessage::from_envelope(&order(&format!("{prefix}-{i}"), 1), "order.created")
        })
        .collect();
    publish_all(transport.publisher().as_ref(), &messages).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_returns_with_the_consumer_attached() {
    let t = TestRabbit::new("1s").await;
    let topo = t.add_consumer("ready", &["order.created"]).await;
    let transport = t.transport();
    let queue = topo.names("ready").work_queue;
    let consumers = || t.consumers(&queue);
    assert_eq!(consumers().await, 0);
    let mut sub = transport
        .subscribe(&Subscription::new("ready", &["order.created"]))
        .await
        .unwrap();
    // No receive yet: the broker knows the consumer as soon as subscribe returned.
    assert_eq!(consumers().await, 1, "attached when subscribe returned");
    postroom_core::Subscriber::close(&mut sub).await;
    assert!(
        eventually(Duration::from_secs(10), || async { consumers().await == 0 }).await,
        "detached on close"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_shutdown_and_close_log_no_error() {
    let errors = Errors::install();

    let t = TestRabbit::new("1s").await;
    t.add_consumer("calm", &["order.created"]).await;
    let transport = Arc::new(t.transport());
    let cfg = order_config("calm", 3);
    let handler = Arc::new(Slow::default());
    let consumer =
        Consumer::for_transport(cfg, handler.clone(), &transport.capabilities()).unwrap();
    let sub = transport
        .subscribe(&Subscription::new("calm", &["order.created"]).prefetch(32))
        .await
        .unwrap();
    let (stop, rx) = tokio::sync::watch::channel(false);
    let run = tokio::spawn(async move { consumer.run(sub, rx).await });

    publish_orders(&transport, "c", 300).await;
    // Shut down mid-stream: deliveries prefetched, handlers running, retries in the stage.
    assert!(
        eventually(Duration::from_secs(30), || async {
            handler.applied.load(Ordering::SeqCst) >= 50
        })
        .await
    );
    stop.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("the consumer drains")
        .unwrap();
    transport.close().await;
    t.broker.close().await;

    let errors = errors.logged();
    assert!(
        errors.is_empty(),
        "a clean close logged errors: {errors:#?}"
    );
}

/// Fails every delivery transiently: each one is a retry publish.
struct AlwaysDown;

#[async_trait]
impl Handler for AlwaysDown {
    async fn handle(&self, _m: &Incoming) -> Result<Handled, HandlerError> {
        tokio::time::sleep(Duration::from_millis(5)).await;
        Err(HandlerError::transient("down", "dependency down"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_the_broker_with_retries_in_flight_logs_no_error_and_loses_nothing() {
    let errors = Errors::install();

    let t = TestRabbit::new("1s").await;
    let topo = t.add_consumer("closing", &["order.created"]).await;
    let transport = Arc::new(t.transport());
    let mut cfg = order_config("closing", 100);
    cfg.concurrency = 8;
    // Keep pulling: the failures here are the point, not a dependency to protect.
    cfg.breaker = postroom_core::BreakerConfig {
        failure_threshold: u32::MAX,
        cooldown: Duration::from_millis(100),
    };
    let consumer = Arc::new(
        Consumer::for_transport(cfg, Arc::new(AlwaysDown), &transport.capabilities()).unwrap(),
    );
    let sub = transport
        .subscribe(&Subscription::new("closing", &["order.created"]).prefetch(32))
        .await
        .unwrap();
    let (stop, rx) = tokio::sync::watch::channel(false);
    let run = {
        let consumer = consumer.clone();
        tokio::spawn(async move { consumer.run(sub, rx).await })
    };
    publish_orders(&transport, "r", 300).await;
    assert!(
        eventually(Duration::from_secs(30), || async {
            consumer
                .stats()
                .snapshot()
                .retries_by_stage
                .values()
                .sum::<u64>()
                >= 20
        })
        .await
    );
    // The program closes the broker while handlers and retry publishes are still running.
    transport.close().await;
    stop.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("the consumer stops")
        .unwrap();

    let errors = errors.logged();
    assert!(errors.is_empty(), "closing logged errors: {errors:#?}");
    // Nothing was lost: every message is in the work queue or its retry stage.
    let names = topo.names("closing");
    let stage = names.retry_queue(Duration::from_secs(1));
    assert!(
        eventually(Duration::from_secs(30), || async {
            t.queue_messages(&names.work_queue).await + t.queue_messages(&stage).await >= 300
        })
        .await,
        "300 messages kept: work {} + stage {}",
        t.queue_messages(&names.work_queue).await,
        t.queue_messages(&stage).await
    );
}

/// Threads of this process running a lapin connection's I/O loop.
fn io_loop_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim() == "lapin-io-loop")
        .count()
}

/// `close` returns only once the connection's I/O loop has ended: a process that exits right
/// after it (every postroom command does) must not tear the runtime down under a loop still
/// finishing its close, which lapin logs as errors ("A Tokio 1.x context was found, but it is
/// being shutdown").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_returns_after_the_connection_has_ended() {
    for round in 0..20 {
        let broker = postroom_rabbitmq::Broker::connect(&common::amqp_url())
            .await
            .expect("connect");
        let channel = broker.channel().await.expect("channel");
        assert!(channel.status().connected());
        assert_eq!(io_loop_threads(), 1, "round {round}: one connection open");
        broker.close().await;
        assert_eq!(
            io_loop_threads(),
            0,
            "round {round}: close returned with the connection's I/O loop still running"
        );
    }
}

/// `close` on a runtime whose threads are busy (handlers under load hold them a few
/// milliseconds at a time) logs no error: the client's own tasks, which run on the same
/// runtime, fall behind the broker's answers, and a channel closed just before the connection
/// must not be forgotten twice by it ("Connection error: invalid channel").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_while_the_runtime_is_busy_logs_no_error() {
    let errors = Errors::install();
    let busy = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let hogs: Vec<_> = (0..4)
        .map(|_| {
            let busy = busy.clone();
            tokio::spawn(async move {
                while busy.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(10));
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    for round in 0..45 {
        let broker = postroom_rabbitmq::Broker::connect(&common::amqp_url())
            .await
            .expect("connect");
        let mut channels = Vec::new();
        for _ in 0..3 {
            channels.push(broker.channel().await.expect("channel"));
        }
        let holder = channels.pop().expect("a channel");
        if round % 3 == 2 {
            // A holder dropped without closing (a subscriber whose task was aborted): the
            // client closes the channel with its last handle, in a task of its own.
            broker.forget(&holder);
            drop(holder);
            broker.close().await;
        } else if round % 3 == 0 {
            // A holder closes its channel as the program closes the link.
            let watched = holder.clone();
            let closing = tokio::spawn(async move { holder.close(200, "done").await });
            while watched.status().connected() {
                tokio::task::yield_now().await;
            }
            broker.close().await;
            let _ = closing.await;
        } else {
            // A holder closed its channel just before (a subscriber that stopped).
            holder.close(200, "done").await.expect("channel closed");
            broker.close().await;
        }
    }
    busy.store(false, Ordering::SeqCst);
    for hog in hogs {
        hog.await.unwrap();
    }
    // What the client logs from its own tasks after the close has had time to run.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let errors = errors.logged();
    assert!(errors.is_empty(), "closing logged errors: {errors:#?}");
}
