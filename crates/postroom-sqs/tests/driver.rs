//! The `sqs://` driver against the SQS endpoint (`POSTROOM_TEST_SQS`, default the local moto
//! server; credentials from the AWS environment, as `scripts/test.sh` sets them): two
//! transports opened separately for one workload — as a relay process and a consumer process
//! would — agree on the routes, because both derive them from the workload; a fresh open
//! empties the workload's queues; the topology plans and applies through the driver.

use postroom_core::driver::{Endpoint, TransportDriver, TransportSpec, Workload};
use postroom_core::{OutgoingMessage, Subscriber, Subscription, Transport};
use postroom_sqs::driver::SqsDriver;
use std::time::{Duration, Instant};

fn broker() -> Endpoint {
    let http =
        std::env::var("POSTROOM_TEST_SQS").unwrap_or_else(|_| "http://127.0.0.1:5000".into());
    let (scheme, rest) = http.split_once("://").expect("a URL");
    let region = std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".into());
    let tls = scheme == "https";
    Endpoint::broker(&format!("sqs://{rest}?region={region}&tls={tls}")).unwrap()
}

fn workload() -> Workload {
    let prefix = format!("props-{}", &uuid_like());
    Workload::new(prefix, "1s".parse().unwrap())
        .consumer("inventory", &["order.*"])
        .consumer("audit", &["#"])
}

fn uuid_like() -> String {
    format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

fn message(topic: &str) -> OutgoingMessage {
    let env = postroom_core::Envelope::builder("order.created", "tests")
        .aggregate("order", "o-1", 1)
        .build();
    OutgoingMessage::from_envelope(&env, topic)
}

async fn received(t: &dyn Transport, consumer: &str, routes: &[&str], want: usize) -> usize {
    let mut sub = t
        .subscribe(&Subscription::new(consumer, routes))
        .await
        .unwrap();
    let mut got = 0;
    let end = Instant::now() + Duration::from_secs(8);
    while Instant::now() < end && got < want + 1 {
        match sub.next(Duration::from_millis(1000)).await.unwrap() {
            Some(d) => {
                got += 1;
                postroom_core::Delivery::ack(d)
                    .await
                    .map_err(|(e, _)| e)
                    .unwrap();
            }
            None if got >= want => break,
            None => {}
        }
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn separate_transports_of_one_workload_route_alike_and_fresh_empties_the_queues() {
    let driver = SqsDriver;
    let w = workload();
    let plan = driver
        .topology(&broker(), &TransportSpec::of(w.clone()))
        .await
        .unwrap()
        .expect("SQS has a topology to plan");
    assert_eq!(
        plan.plan().await.unwrap().len(),
        4,
        "two queues per consumer"
    );
    assert_eq!(plan.apply().await.unwrap(), 4);
    assert!(plan.plan().await.unwrap().is_empty(), "nothing left to do");

    // The "relay process": its own transport, nothing bound at run time.
    let relay = driver
        .open(&broker(), &TransportSpec::of(w.clone()))
        .await
        .unwrap();
    relay
        .publisher()
        .publish(&message("order.created"))
        .await
        .unwrap();
    relay
        .publisher()
        .publish(&message("payment.done"))
        .await
        .unwrap();
    let unroutable = TransportSpec::of(Workload::new(w.prefix.clone(), "1s".parse().unwrap()));
    let lone = driver.open(&broker(), &unroutable).await.unwrap();
    assert!(
        lone.publisher()
            .publish(&message("order.created"))
            .await
            .is_err(),
        "a workload without consumers routes nowhere"
    );

    // The "consumer process": another transport of the same workload.
    let consumer = driver
        .open(&broker(), &TransportSpec::of(w.clone()))
        .await
        .unwrap();
    assert_eq!(
        received(consumer.as_ref(), "inventory", &["order.*"], 1).await,
        1
    );
    assert_eq!(received(consumer.as_ref(), "audit", &["#"], 2).await, 2);

    // A fresh open starts from empty queues.
    relay
        .publisher()
        .publish(&message("order.created"))
        .await
        .unwrap();
    let fresh = driver
        .open(&broker(), &TransportSpec::of(w.clone()).fresh())
        .await
        .unwrap();
    assert_eq!(
        received(fresh.as_ref(), "inventory", &["order.*"], 0).await,
        0
    );
    let b = fresh.backlog("audit").await.unwrap();
    assert_eq!(b.ready + b.unacked + b.delayed, 0);
}
