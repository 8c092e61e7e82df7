//! A TLS broker's management API, as the operator tools reach it: the `cacertfile` of the
//! broker URL is trusted for the API's https certificate too (one CA file for both links),
//! on a RabbitMQ node the test starts for itself with a CA made in the test.

use postroom_core::driver::Endpoint;
use postroom_rabbitmq::driver::management_api;
use postroom_testkit::servers::{RabbitNode, TestCa};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_broker_urls_ca_file_verifies_the_management_api_too() {
    let ca = TestCa::new("postroom ops test CA");
    let node = RabbitNode::start_tls("pr-ops-tls", &ca, &ca.server_cert(&["127.0.0.1"]), true);
    let ca_file = ca.write_cert(node.dir(), "ca.pem");
    let broker = Endpoint::broker(&format!(
        "amqps://guest:guest@127.0.0.1:{}/%2f?cacertfile={}",
        node.amqps_port(),
        ca_file.display()
    ))
    .unwrap();
    // The API named without a CA file of its own (as POSTROOM_BROKER_API often is).
    let api_url = format!(
        "https://guest:guest@127.0.0.1:{}",
        node.management_port().expect("management API")
    );
    let api = management_api(&broker, Some(&api_url), "/").unwrap();
    api.exchanges()
        .await
        .expect("the API's certificate is verified with the broker URL's CA file");

    // Without that CA file (a broker URL trusting only the system's roots) it is refused.
    let bare = Endpoint::broker(&format!(
        "amqps://guest:guest@127.0.0.1:{}/%2f",
        node.amqps_port()
    ))
    .unwrap();
    let err = management_api(&bare, Some(&api_url), "/")
        .unwrap()
        .exchanges()
        .await
        .expect_err("a certificate from an unknown CA is refused");
    assert!(
        err.to_string().contains("TLS with the management API"),
        "{err}"
    );
    assert!(!err.to_string().contains("guest:guest"), "{err}");
}
