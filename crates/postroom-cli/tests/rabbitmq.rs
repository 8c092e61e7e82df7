//! The CLI on RabbitMQ: topology plan/apply through the management API, the demo with its
//! invariants, parking ingest and redrive through the broker, and the short soak on
//! PostgreSQL + RabbitMQ with a broker restart. Real servers; a missing one fails.

mod common;

use common::{amqp, cleanup, management_api, ok, postroom, run_for_report, workload};

#[tokio::test(flavor = "multi_thread")]
async fn topology_plan_apply_then_nothing_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = workload("t");
    std::fs::write(
        dir.path().join("topology.toml"),
        format!(
            "prefix = \"{prefix}\"\nexchange = \"{prefix}.orders\"\nladder = \"5s,30s,5m\"\n\
             [[consumers]]\nname = \"inventory\"\nbindings = [\"order.created\"]\n"
        ),
    )
    .unwrap();
    let d = dir.path().to_path_buf();
    let url = amqp();
    let (plan, apply, again, json) = tokio::task::spawn_blocking(move || {
        let plan = ok(&postroom(&d, &["topology", "plan", "--broker", &url]));
        let apply = ok(&postroom(
            &d,
            &["topology", "apply", "--yes", "--broker", &url],
        ));
        let again = ok(&postroom(&d, &["topology", "plan", "--broker", &url]));
        let json = ok(&postroom(
            &d,
            &["topology", "plan", "--json", "--broker", &url],
        ));
        (plan, apply, again, json)
    })
    .await
    .unwrap();
    for needle in [
        format!("create queue {prefix}.inventory "),
        format!("create queue {prefix}.inventory.retry.5s"),
        format!("create queue {prefix}.inventory.retry.30s"),
        format!("create queue {prefix}.inventory.retry.5m"),
        format!("create queue {prefix}.inventory.parking"),
        format!("create exchange {prefix}.inventory.retry (direct)"),
        format!("create exchange {prefix}.inventory.dlx (direct)"),
        "set policy".to_string(),
    ] {
        assert!(plan.contains(&needle), "{needle} in plan:\n{plan}");
    }
    assert!(apply.contains("applied"), "{apply}");
    assert!(again.contains("nothing to do"), "{again}");
    assert!(json.trim().is_empty(), "{json}");
    // The policies are applied to the right queues.
    let api = management_api();
    let mut seen = None;
    for _ in 0..40 {
        if let Some(q) = api
            .queue(&format!("{prefix}.inventory.retry.30s"))
            .await
            .unwrap()
            && q.policy.is_some()
        {
            seen = Some(q);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    let q = seen.expect("the retry stage queue has its policy");
    let def = serde_json::to_string(&q.effective_policy_definition).unwrap();
    assert!(def.contains("\"message-ttl\":30000"), "{def}");
    assert!(def.contains("dead-letter-exchange"), "{def}");
    cleanup(&prefix).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn demo_on_rabbitmq() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = workload("demo");
    let r = run_for_report(
        dir.path(),
        &[
            "demo",
            "--broker",
            &amqp(),
            "--workload",
            &prefix,
            "--report-json",
            "r.json",
        ],
        "r.json",
    )
    .await;
    assert_eq!(r["lost"], 0);
    assert_eq!(r["duplicate_effects"], 0);
    assert_eq!(
        r["parked"], 3,
        "ingested from the parking queue into the store"
    );
    assert_eq!(r["killed_order_reservations"], 1);
    assert_eq!(r["failures"].as_array().unwrap().len(), 0);
    cleanup(&format!("{prefix}.")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn parking_ingest_list_and_redrive_through_rabbitmq() {
    use postroom_core::{
        Consumer, ConsumerConfig, Delivery, EnvelopeDecoder, MessageId, OutgoingMessage, Publisher,
        Route, Subscriber,
    };
    let dir = tempfile::tempdir().unwrap();
    let prefix = workload("t");
    let toml = format!(
        "prefix = \"{prefix}\"\nexchange = \"{prefix}.orders\"\nladder = \"1s\"\n[[consumers]]\nname = \"c\"\nbindings = [\"t.#\"]\n"
    );
    std::fs::write(dir.path().join("topology.toml"), &toml).unwrap();
    let config = postroom_rabbitmq::TopologyConfig::from_toml(&toml).unwrap();
    let topology = postroom_rabbitmq::Topology::new(config.clone(), management_api()).unwrap();
    topology.apply().await.unwrap();
    let broker = postroom_rabbitmq::Broker::connect(&amqp()).await.unwrap();
    let publisher = std::sync::Arc::new(postroom_rabbitmq::ConfirmingPublisher::new(
        broker.clone(),
        &config,
    ));
    // A corrupt message, parked by a real consumer into the parking queue.
    let id = MessageId::new();
    publisher
        .publish(&OutgoingMessage {
            id,
            route: Route::Topic("t.x".into()),
            headers: Default::default(),
            body: b"{oops".to_vec(),
        })
        .await
        .unwrap();
    let sub = postroom_rabbitmq::RabbitSubscriber::new(
        broker.clone(),
        publisher.clone(),
        &config,
        "c",
        postroom_rabbitmq::SubscriberOptions::new(4),
    )
    .unwrap();
    struct Never;
    #[async_trait::async_trait]
    impl postroom_core::Handler for Never {
        async fn handle(
            &self,
            _: &postroom_core::Incoming,
        ) -> Result<postroom_core::Handled, postroom_core::HandlerError> {
            unreachable!("corrupt bodies never reach the handler")
        }
    }
    let consumer = Consumer::new(
        ConsumerConfig::new("c", EnvelopeDecoder::new()),
        std::sync::Arc::new(Never),
    );
    let stats = consumer.stats();
    let (stop, rx) = tokio::sync::watch::channel(false);
    let run = tokio::spawn(async move { consumer.run(sub, rx).await });
    for _ in 0..100 {
        if !stats.snapshot().parked_by_code.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    stop.send(true).unwrap();
    run.await.unwrap();
    assert_eq!(stats.snapshot().parked_by_code.get("malformed"), Some(&1));

    let d = dir.path().to_path_buf();
    let url = amqp();
    let (ingest, list, redrive) = tokio::task::spawn_blocking(move || {
        let ingest = ok(&postroom(
            &d,
            &[
                "parking",
                "ingest",
                "--database",
                "p.db",
                "--broker",
                &url,
                "--idle",
                "1s",
            ],
        ));
        let list = ok(&postroom(
            &d,
            &["parking", "list", "--database", "p.db", "--json"],
        ));
        let redrive = ok(&postroom(
            &d,
            &[
                "parking",
                "redrive",
                "--database",
                "p.db",
                "--broker",
                &url,
                "--yes",
                "--json",
            ],
        ));
        (ingest, list, redrive)
    })
    .await
    .unwrap();
    assert!(ingest.contains("1 parked message(s) ingested"), "{ingest}");
    let parked: serde_json::Value =
        serde_json::from_str(list.lines().next().expect("one parked line")).unwrap();
    assert_eq!(parked["message_id"], id.to_string());
    assert_eq!(parked["error_code"], "malformed");
    assert_eq!(parked["consumer"], "c");
    assert!(redrive.contains("\"done\":1"), "{redrive}");
    // The redriven copy is back in the consumer's work queue, with the same id.
    let mut sub = postroom_rabbitmq::RabbitSubscriber::new(
        broker.clone(),
        publisher.clone(),
        &config,
        "c",
        postroom_rabbitmq::SubscriberOptions::new(1),
    )
    .unwrap();
    let mut got = None;
    for _ in 0..20 {
        if let Some(d) = sub
            .next(std::time::Duration::from_millis(500))
            .await
            .unwrap()
        {
            got = Some(d);
            break;
        }
    }
    let d = got.expect("the redriven message arrives");
    assert_eq!(d.message().id, Some(id));
    assert_eq!(
        d.message()
            .headers
            .get("x-redrive-count")
            .map(String::as_str),
        Some("1")
    );
    d.ack().await.map_err(|(e, _)| e).unwrap();
    broker.close().await;
    cleanup(&prefix).await;
}
