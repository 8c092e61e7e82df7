//! Pipelines: a stage consumes `order.created` and publishes `order.enriched`; a downstream
//! consumer receives every output; a tap on the stage's output copies the traffic without
//! touching it.

mod common;

use common::probe::{Mode, Probe, policy};
use common::{TestRabbit, eventually, order, publish_each};
use postroom_core::{Consumer, ConsumerConfig, EnvelopeDecoder};
use postroom_rabbitmq::{PipelineStage, Tap};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stage_consumes_and_publishes_and_a_tap_copies_without_touching() {
    let t = TestRabbit::new("1s").await;
    t.add_consumer("enrich", &["order.created"]).await;
    t.add_consumer("ship", &["order.enriched"]).await;
    let publisher = t.publisher();
    let tap = Tap::create(
        &t.api,
        &format!("{}.tap.enriched", t.prefix),
        &t.cfg().exchange,
        "order.enriched",
        1000,
    )
    .await
    .unwrap();

    let stage = Arc::new(PipelineStage::new("enrich", publisher.clone(), |env| {
        let out = env
            .follow_up("order.enriched", "enricher")
            .aggregate("order", env.aggregate.id.clone(), env.aggregate.version)
            .build();
        Ok(vec![(out, "order.enriched".to_string())])
    }));
    let mut cfg = ConsumerConfig::new(
        "enrich",
        EnvelopeDecoder::new().accept("order.created", 1..=1),
    );
    cfg.retry = policy("1s", 3);
    let consumer = Consumer::new(cfg, stage);
    let sub = t.subscriber("enrich", 4, publisher.clone());
    let (stop, rx) = tokio::sync::watch::channel(false);
    let stage_task = tokio::spawn(async move { consumer.run(sub, rx).await });

    let ship_probe = Probe::new(Mode::Ok);
    let ship = {
        let sub = t.subscriber("ship", 4, publisher.clone());
        let mut cfg = ConsumerConfig::new(
            "ship",
            EnvelopeDecoder::new().accept("order.enriched", 1..=1),
        );
        cfg.retry = policy("1s", 3);
        let c = Consumer::new(cfg, ship_probe.clone());
        let (stop, rx) = tokio::sync::watch::channel(false);
        (stop, tokio::spawn(async move { c.run(sub, rx).await }))
    };

    let inputs: Vec<_> = (0..5).map(|i| order(&format!("p{i}"), 1)).collect();
    publish_each(publisher.as_ref(), &inputs).await;
    assert!(
        eventually(Duration::from_secs(20), || async {
            ship_probe.calls().len() >= 5
        })
        .await,
        "every output reached the next stage"
    );
    let _ = stop.send(true);
    let _ = ship.0.send(true);
    for (name, task) in [("stage", stage_task), ("ship", ship.1)] {
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .unwrap_or_else(|_| panic!("the {name} consumer loop stops within 30 s"))
            .unwrap_or_else(|e| panic!("the {name} consumer loop ends without a panic: {e}"));
    }

    let shipped: BTreeSet<_> = ship_probe.calls().iter().map(|c| c.id).collect();
    let expected: BTreeSet<_> = inputs
        .iter()
        .map(|e| PipelineStage::output_id("enrich", e.id, 0))
        .collect();
    assert_eq!(shipped, expected, "output ids derive from input ids");
    assert_eq!(ship_probe.calls().len(), 5, "the tap took nothing away");

    let copies = tap
        .read(&t.broker, 10, Duration::from_secs(3))
        .await
        .unwrap();
    let tapped: BTreeSet<_> = copies.iter().filter_map(|m| m.id).collect();
    assert_eq!(tapped, expected, "the tap saw a copy of each");
    tap.remove().await.unwrap();
}
