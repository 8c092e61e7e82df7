//! AMQP over TLS against a RabbitMQ node the test starts for itself (its own name, ports and
//! files; TLS listener and https management API with a certificate for 127.0.0.1 signed by a
//! CA made in the test): a verified `amqps://` link publishes and consumes, the management API
//! is reached over https with the same CA file, and another CA or another host name is refused
//! with a clear error.

use postroom_core::{Delivery, ReceivedMessage};
use postroom_core::{ErrorKind, Publisher, Subscriber};
use postroom_rabbitmq::{
    Broker, BrokerOptions, ConfirmingPublisher, ManagementApi, RabbitSubscriber, SubscriberOptions,
    Topology, TopologyConfig,
};
use postroom_testkit::cases::raw_message;
use postroom_testkit::servers::{RabbitNode, TestCa, suffix};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn amqps(host: &str, node: &RabbitNode, ca: Option<&Path>) -> String {
    let query = ca.map_or(String::new(), |p| format!("?cacertfile={}", p.display()));
    format!(
        "amqps://guest:guest@{host}:{}/%2f{query}",
        node.amqps_port()
    )
}

fn https(node: &RabbitNode, ca: &Path) -> String {
    format!(
        "https://guest:guest@127.0.0.1:{}?cacertfile={}",
        node.management_port().expect("management API"),
        ca.display()
    )
}

/// Whether the broker sees the connection named `name` as TLS (its statistics refresh every
/// few seconds, hence the wait).
async fn broker_sees_tls(node: &RabbitNode, ca_pem: &str, name: &str) -> bool {
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes()).unwrap())
        .build()
        .unwrap();
    let url = format!(
        "https://127.0.0.1:{}/api/connections",
        node.management_port().unwrap()
    );
    let end = Instant::now() + Duration::from_secs(60);
    while Instant::now() < end {
        let conns: Vec<serde_json::Value> = client
            .get(&url)
            .basic_auth("guest", Some("guest"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if let Some(c) = conns.iter().find(|c| {
            c.pointer("/client_properties/connection_name")
                .and_then(serde_json::Value::as_str)
                == Some(name)
        }) {
            return c.get("ssl") == Some(&serde_json::Value::Bool(true));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("the connection {name} never appeared in the broker's list");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqps_with_the_right_ca_publishes_and_consumes_over_a_verified_link() {
    let ca = TestCa::new("postroom test CA");
    // The certificate names only the IP address the URL names.
    let node = RabbitNode::start_tls("pr-tls", &ca, &ca.server_cert(&["127.0.0.1"]), true);
    let ca_file = ca.write_cert(node.dir(), "client-ca.pem");

    let api = ManagementApi::new(&https(&node, &ca_file), "/").unwrap();
    let cfg = TopologyConfig::default().with_consumer("tls", &["order.created"]);
    Topology::new(cfg.clone(), api)
        .unwrap()
        .apply()
        .await
        .expect("the topology is applied through the https management API");

    let name = format!("pr-tls-{}", suffix());
    let broker = Broker::connect_with(
        &amqps("127.0.0.1", &node, Some(&ca_file)),
        BrokerOptions {
            connection_name: name.clone(),
            ..BrokerOptions::default()
        },
    )
    .await
    .expect("amqps with the right CA connects");
    let publisher = Arc::new(ConfirmingPublisher::new(broker.clone(), &cfg));
    let message = raw_message("order.created", br#"{"over":"tls"}"#);
    let id = message.id;
    publisher
        .publish(&message)
        .await
        .expect("a confirmed publish over TLS");
    let mut sub = RabbitSubscriber::new(
        broker.clone(),
        publisher,
        &cfg,
        "tls",
        SubscriberOptions::new(4),
    )
    .unwrap();
    let delivery = sub
        .next(Duration::from_secs(30))
        .await
        .unwrap()
        .expect("the message arrives over TLS");
    let got: &ReceivedMessage = delivery.message();
    assert_eq!(got.body, br#"{"over":"tls"}"#);
    assert_eq!(got.stable_id(), id);
    delivery.ack().await.map_err(|(e, _)| e).unwrap();
    assert!(
        broker_sees_tls(&node, ca.cert_pem(), &name).await,
        "the broker lists the connection as TLS"
    );
    sub.close().await;
    broker.close().await;

    // The management API with another CA is refused, clearly.
    let other = TestCa::new("another CA").write_cert(node.dir(), "other-ca.pem");
    let err = ManagementApi::new(&https(&node, &other), "/")
        .unwrap()
        .exchanges()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    assert!(
        err.to_string().contains("TLS with the management API"),
        "{err}"
    );
    assert!(!err.to_string().contains("guest:guest"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqps_with_a_wrong_ca_or_host_name_is_refused_with_a_clear_error() {
    let ca = TestCa::new("postroom test CA");
    let node = RabbitNode::start_tls("pr-tls", &ca, &ca.server_cert(&["127.0.0.1"]), false);
    let right = ca.write_cert(node.dir(), "client-ca.pem");
    let wrong = TestCa::new("another CA").write_cert(node.dir(), "other-ca.pem");
    let cases = [
        (
            "another CA",
            amqps("127.0.0.1", &node, Some(&wrong)),
            "UnknownIssuer",
        ),
        (
            "no CA file: the system's roots do not know the test CA",
            amqps("127.0.0.1", &node, None),
            "UnknownIssuer",
        ),
        (
            "the right CA, a host name the certificate does not carry",
            amqps("localhost", &node, Some(&right)),
            "not valid for name",
        ),
    ];
    for (what, url, cause) in cases {
        let url = url.replace("guest:guest@", "guest:s3cr3t-pw@");
        let err = match Broker::connect(&url).await {
            Ok(_) => panic!("{what}: connected, but it must be refused"),
            Err(e) => e,
        };
        let text = format!("{err} / {:?}", std::error::Error::source(&err));
        assert_eq!(err.kind(), ErrorKind::Config, "{what}: {text}");
        assert!(text.contains("TLS with RabbitMQ at"), "{what}: {text}");
        assert!(text.contains(cause), "{what}: the cause {cause}: {text}");
        assert!(!text.contains("s3cr3t-pw"), "{what}: no password: {text}");
    }
    // The same node accepts the right CA: the refusals were about trust, not reachability.
    let broker = Broker::connect(&amqps("127.0.0.1", &node, Some(&right)))
        .await
        .expect("the right CA connects");
    broker.channel().await.expect("a channel over TLS");
    broker.close().await;
}
