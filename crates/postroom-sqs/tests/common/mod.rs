//! Shared test support: the SQS endpoint from the environment (`POSTROOM_TEST_SQS`, default
//! the local moto server on 127.0.0.1:5000; region and credentials from the AWS environment,
//! else fixed fake ones), a random queue prefix per test, and every queue under that prefix
//! deleted on drop. A missing endpoint fails the test; it is never skipped.
#![allow(dead_code)]

pub mod probe;

use aws_sdk_sqs::Client;
use aws_sdk_sqs::config::{Credentials, Region};
use postroom_core::{ParkedMessage, Subscriber, Subscription};
use postroom_sqs::{SqsDelivery, SqsSubscriber, SqsTransport, Topology, TopologyConfig};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The SQS endpoint.
pub fn endpoint() -> String {
    std::env::var("POSTROOM_TEST_SQS").unwrap_or_else(|_| "http://127.0.0.1:5000".into())
}

/// A client for the test endpoint.
pub async fn client() -> Client {
    let mut loader = postroom_sqs::client::loader();
    if std::env::var("AWS_REGION").is_err() && std::env::var("AWS_DEFAULT_REGION").is_err() {
        loader = loader.region(Region::new("us-east-1"));
    }
    if std::env::var("AWS_ACCESS_KEY_ID").is_err() {
        loader = loader.credentials_provider(Credentials::new(
            "postroom-test",
            "postroom-test",
            None,
            None,
            "postroom-tests",
        ));
    }
    let client = postroom_sqs::client::connect(loader, Some(&endpoint()))
        .await
        .expect("SQS client");
    client.list_queues().send().await.unwrap_or_else(|e| {
        panic!(
            "an SQS endpoint is required at {} (set POSTROOM_TEST_SQS; `bash scripts/services.sh sqs` starts one): {e:?}",
            endpoint()
        )
    });
    client
}

/// A random suffix.
pub fn rand_suffix() -> String {
    uuid::Uuid::now_v7().simple().to_string()[18..].to_string()
}

/// One test's queues on the shared endpoint, deleted on drop.
pub struct TestSqs {
    pub prefix: String,
    pub client: Client,
}

impl TestSqs {
    pub async fn new() -> Self {
        Self {
            prefix: format!("prt-{}", rand_suffix()),
            client: client().await,
        }
    }

    /// A configuration under this test's prefix: a 2 s visibility timeout, the rest default.
    pub fn config(&self) -> TopologyConfig {
        TopologyConfig {
            prefix: self.prefix.clone(),
            visibility_timeout: Duration::from_secs(2),
            ..TopologyConfig::default()
        }
    }

    /// [`TestSqs::config`] with a 1 s visibility timeout: a message received and left
    /// unsettled is back a second later.
    pub fn config_with_short_visibility(&self) -> TopologyConfig {
        TopologyConfig {
            visibility_timeout: Duration::from_secs(1),
            ..self.config()
        }
    }

    /// Create the queues `config` lists (apply its topology).
    pub async fn apply(&self, config: &TopologyConfig) {
        Topology::new(self.client.clone(), config.clone())
            .unwrap()
            .apply()
            .await
            .unwrap();
    }

    /// A transport on `config`.
    pub async fn transport(&self, config: TopologyConfig) -> Arc<SqsTransport> {
        Arc::new(
            SqsTransport::connect(self.client.clone(), config)
                .await
                .expect("transport"),
        )
    }
}

impl Drop for TestSqs {
    fn drop(&mut self) {
        let prefix = self.prefix.clone();
        postroom_testkit::servers::clean_up(async move {
            let client = client().await;
            let Ok(out) = client.list_queues().queue_name_prefix(&prefix).send().await else {
                eprintln!("cleanup of {prefix}: listing queues failed");
                return;
            };
            for url in out.queue_urls() {
                if let Err(e) = client.delete_queue().queue_url(url).send().await {
                    eprintln!("cleanup of {url} failed: {e:?}");
                }
            }
        });
    }
}

/// A subscriber of consumer `consumer` on `order.created`, with the default prefetch.
pub async fn order_subscriber(transport: &SqsTransport, consumer: &str) -> SqsSubscriber {
    transport
        .subscriber(&Subscription::new(consumer, &["order.created"]))
        .await
        .unwrap()
}

/// A subscriber of consumer `consumer` on `topics`, taking up to `prefetch` messages at once.
pub async fn subscriber_of(
    transport: &SqsTransport,
    consumer: &str,
    topics: &[&str],
    prefetch: usize,
) -> SqsSubscriber {
    transport
        .subscriber(&Subscription::new(consumer, topics).prefetch(prefetch))
        .await
        .unwrap()
}

/// The next delivery `subscriber` receives within `total`, or `None`.
pub async fn receive_within(
    subscriber: &mut SqsSubscriber,
    total: Duration,
) -> Option<SqsDelivery> {
    let end = Instant::now() + total;
    while Instant::now() < end {
        if let Some(d) = subscriber.next(Duration::from_millis(500)).await.unwrap() {
            return Some(d);
        }
    }
    None
}

/// Checks that `parked` is a copy SQS moved to the DLQ by itself (`max_receive_count`) whose
/// error message is joined with the last error the consumer recorded (`db_down`, connection
/// refused), first failed within 2 s of `failed_at`.
pub fn assert_moved_with_the_recorded_error(
    parked: &ParkedMessage,
    failed_at: chrono::DateTime<chrono::Utc>,
) {
    assert_eq!(parked.error_code, "max_receive_count");
    assert!(
        parked.error_message.contains("db_down")
            && parked.error_message.contains("connection refused"),
        "joined with the last error: {}",
        parked.error_message
    );
    assert!((parked.first_failure_at - failed_at).num_seconds().abs() <= 2);
}

/// Poll until a condition holds or a timeout passes.
#[allow(unused_imports)]
pub use postroom_testkit::cases::wait_for as eventually;

/// An `order.created` envelope.
#[allow(unused_imports)]
pub use postroom_testkit::cases::order;
