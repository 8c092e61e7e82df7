//! Connection security against a nats-server each test starts with the setting under test:
//! TLS verified against a CA made in the test, mutual TLS, users with passwords, a token, an
//! NKey user, and operator mode with a `.creds` file. Each success publishes one message and
//! consumes it through the transport (a JetStream round trip); each failure must say which
//! setting is wrong, and no message or `Debug` output may hold a secret.

use postroom_core::driver::{Endpoint, TopologyFile, TransportDriver, TransportSpec, Workload};
use postroom_core::{Delivery, Subscriber, Subscription, Transport};
use postroom_nats::driver::NatsDriver;
use postroom_nats::{NatsConnection, NatsSecurity, NatsTarget};
use postroom_testkit::cases::{order, publish_to};
use postroom_testkit::servers::{NatsOperator, NatsSecureConfig, NatsSecureServer, TestCa, suffix};
use std::sync::Arc;
use std::time::Duration;

const HOSTS: [&str; 2] = ["127.0.0.1", "localhost"];

fn spec(prefix: &str) -> TransportSpec {
    TransportSpec::of(
        Workload::new(prefix, "1s".parse().unwrap()).consumer("inventory", &["order.created"]),
    )
    .fresh()
}

/// Open the transport through the driver (what `Service::builder().broker(url)` does).
async fn open(url: &str, spec: &TransportSpec) -> postroom_core::Result<Arc<dyn Transport>> {
    NatsDriver.open(&Endpoint::broker(url)?, spec).await
}

/// Publish one message and consume it, acknowledged by the server.
async fn round_trip(transport: Arc<dyn Transport>) {
    let mut sub = transport
        .subscribe(&Subscription::new("inventory", &["order.created"]).prefetch(1))
        .await
        .expect("subscribe");
    let env = order(&format!("sec-{}", suffix()), 1);
    publish_to(transport.publisher(), &env, "order.created").await;
    let delivery = sub
        .next(Duration::from_secs(20))
        .await
        .expect("next")
        .expect("the message published is delivered");
    assert_eq!(delivery.message().id, Some(env.id));
    delivery.ack().await.map_err(|(e, _)| e).expect("ack");
    sub.close().await;
}

async fn works(url: &str) {
    let transport = open(url, &spec(&format!("sec{}", suffix())))
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    round_trip(transport).await;
}

/// The error of opening `url`, with its text; no `secrets` in it.
async fn refused(url: &str, secrets: &[&str]) -> String {
    let e = match open(url, &spec(&format!("sec{}", suffix()))).await {
        Ok(_) => panic!("{url} connected"),
        Err(e) => e,
    };
    let text = format!("{e} {e:?}");
    for s in secrets {
        assert!(!text.contains(s), "a secret is in the error: {text}");
    }
    e.to_string()
}

fn tls_server(ca: &TestCa) -> NatsSecureServer {
    NatsSecureServer::start(&NatsSecureConfig::new().tls(ca.server_cert(&HOSTS)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_the_ca_file_round_trips_from_the_url_and_from_the_topology_file() {
    let ca = TestCa::new("nats test CA");
    let server = tls_server(&ca);
    let ca_file = ca.write_cert(server.dir(), "ca.pem");
    works(&format!(
        "{}?cacertfile={}",
        server.url("tls"),
        ca_file.display()
    ))
    .await;
    // The host name is verified too: `localhost` is in the certificate.
    works(&format!(
        "tls://localhost:{}?cacertfile={}",
        server.port(),
        ca_file.display()
    ))
    .await;
    // nats:// with tls=required, and the same settings in the topology file's [nats] table.
    works(&format!(
        "{}?tls=required&cacertfile={}",
        server.url("nats"),
        ca_file.display()
    ))
    .await;
    let text = format!(
        "prefix = \"sec{}\"\nladder = \"1s\"\n[[consumers]]\nname = \"inventory\"\nbindings = [\"order.created\"]\n\
         [nats]\ntls = \"required\"\ncacertfile = {:?}\n",
        suffix(),
        ca_file.display().to_string()
    );
    let file_spec = TransportSpec::from_file(TopologyFile::parse(&text).unwrap()).fresh();
    round_trip(open(&server.url("nats"), &file_spec).await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_certificate_of_another_ca_is_not_trusted() {
    let ca = TestCa::new("nats test CA");
    let server = tls_server(&ca);
    let other = TestCa::new("another CA").write_cert(server.dir(), "other-ca.pem");
    let e = refused(
        &format!("{}?cacertfile={}", server.url("tls"), other.display()),
        &[],
    )
    .await;
    assert!(e.contains("certificate is not trusted"), "{e}");
    assert!(
        e.contains(&other.display().to_string()),
        "names the CA file: {e}"
    );
    // Without a CA file, the system's roots do not know the test CA either.
    let e = refused(&server.url("tls"), &[]).await;
    assert!(
        e.contains("not trusted") && e.contains("system's CA"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_certificate_for_another_host_is_refused() {
    let ca = TestCa::new("nats test CA");
    let server =
        NatsSecureServer::start(&NatsSecureConfig::new().tls(ca.server_cert(&["nats.example"])));
    let ca_file = ca.write_cert(server.dir(), "ca.pem");
    let e = refused(
        &format!("{}?cacertfile={}", server.url("tls"), ca_file.display()),
        &[],
    )
    .await;
    assert!(e.contains("does not name the host"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_server_certificate_is_named() {
    let ca = TestCa::new("nats test CA");
    let server =
        NatsSecureServer::start(&NatsSecureConfig::new().tls(ca.expired_server_cert(&HOSTS)));
    let ca_file = ca.write_cert(server.dir(), "ca.pem");
    let e = refused(
        &format!("{}?cacertfile={}", server.url("tls"), ca_file.display()),
        &[],
    )
    .await;
    assert!(e.contains("certificate has expired"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plaintext_url_to_a_tls_only_server_says_that_it_requires_tls() {
    let ca = TestCa::new("nats test CA");
    let server = tls_server(&ca);
    let e = refused(&server.url("nats"), &[]).await;
    assert!(e.contains("the server requires TLS"), "{e}");
    assert!(e.contains("tls://"), "says what to write: {e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_url_to_a_plaintext_server_says_that_it_offers_no_tls() {
    let ca = TestCa::new("nats test CA");
    let server = NatsSecureServer::start(&NatsSecureConfig::new());
    let ca_file = ca.write_cert(server.dir(), "ca.pem");
    let e = refused(
        &format!("{}?cacertfile={}", server.url("tls"), ca_file.display()),
        &[],
    )
    .await;
    assert!(e.contains("the server does not offer TLS"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_round_trips_and_a_missing_or_foreign_client_certificate_is_named() {
    let ca = TestCa::new("nats test CA");
    let server = NatsSecureServer::start(
        &NatsSecureConfig::new()
            .tls(ca.server_cert(&HOSTS))
            .verify_clients(&ca),
    );
    let ca_file = ca.write_cert(server.dir(), "ca.pem");
    let client = ca.client_cert("inventory");
    let cert = server.write_file("client.pem", &client.cert_pem);
    let key = server.write_file("client.key", &client.key_pem);
    let base = format!("{}?cacertfile={}", server.url("tls"), ca_file.display());
    works(&format!(
        "{base}&certfile={}&keyfile={}",
        cert.display(),
        key.display()
    ))
    .await;
    let e = refused(&base, &[]).await;
    assert!(e.contains("requires a client certificate"), "{e}");
    let stranger = TestCa::new("another CA").client_cert("inventory");
    let scert = server.write_file("stranger.pem", &stranger.cert_pem);
    let skey = server.write_file("stranger.key", &stranger.key_pem);
    let e = refused(
        &format!(
            "{base}&certfile={}&keyfile={}",
            scert.display(),
            skey.display()
        ),
        &[],
    )
    .await;
    assert!(e.contains("refused the client certificate"), "{e}");
    assert!(
        e.contains(&scert.display().to_string()),
        "names the file: {e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_and_password_from_a_file_or_the_url_round_trip_and_a_wrong_one_is_refused() {
    let server = NatsSecureServer::start(&NatsSecureConfig::new().user("app", "Pw-s3cret-1"));
    let pw = server.write_file("password", "Pw-s3cret-1\n");
    let url = server.url("nats").replace("://", "://app@");
    works(&format!("{url}?password_file={}", pw.display())).await;
    // The command line's POSTROOM_BROKER_PASSWORD and --broker-password-file set the URL's
    // password (Endpoint::with_password): that password reaches the server.
    let endpoint = Endpoint::broker(&url)
        .unwrap()
        .with_password("Pw-s3cret-1")
        .unwrap();
    let transport = NatsDriver
        .open(&endpoint, &spec(&format!("sec{}", suffix())))
        .await
        .unwrap();
    round_trip(transport).await;
    let wrong = server.write_file("wrong", "Wrong-s3cret-2\n");
    let e = refused(
        &format!("{url}?password_file={}", wrong.display()),
        &["Wrong-s3cret-2", "Pw-s3cret-1"],
    )
    .await;
    assert!(e.contains("refused the credentials"), "{e}");
    assert!(e.contains("user \"app\""), "{e}");
    assert!(
        e.contains(&wrong.display().to_string()),
        "names the file: {e}"
    );
    let e = refused(&server.url("nats"), &[]).await;
    assert!(
        e.contains("requires authentication and none was given"),
        "{e}"
    );
    let e = refused(&format!("{url}?password_file=/surely/missing/pw"), &[]).await;
    assert!(e.contains("/surely/missing/pw"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_in_the_url_reaches_the_server() {
    let server = NatsSecureServer::start(&NatsSecureConfig::new().user("app", "Pw-s3cret-1"));
    let url = server.url("nats").replace("://", "://app:Pw-s3cret-1@");
    let conn = NatsConnection::connect(&url, "postroom-tests")
        .await
        .unwrap_or_else(|e| panic!("the URL's user and password are used: {e}"));
    conn.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_from_a_file_round_trips_and_a_wrong_one_is_refused() {
    let server = NatsSecureServer::start(&NatsSecureConfig::new().token("Tok-s3cret-1"));
    let token = server.write_file("token", "Tok-s3cret-1\n");
    works(&format!(
        "{}?token_file={}",
        server.url("nats"),
        token.display()
    ))
    .await;
    // A password without a user is a token: what POSTROOM_BROKER_PASSWORD gives a bare URL.
    let endpoint = Endpoint::broker(&server.url("nats"))
        .unwrap()
        .with_password("Tok-s3cret-1")
        .unwrap();
    assert!(!endpoint.to_string().contains("Tok-s3cret"), "{endpoint}");
    let transport = NatsDriver
        .open(&endpoint, &spec(&format!("sec{}", suffix())))
        .await
        .unwrap();
    round_trip(transport).await;
    let wrong = server.write_file("wrong", "Tok-wrong-2\n");
    let e = refused(
        &format!("{}?token_file={}", server.url("nats"), wrong.display()),
        &["Tok-wrong-2", "Tok-s3cret-1"],
    )
    .await;
    assert!(
        e.contains("refused the credentials: the token from file"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_nkey_user_round_trips_and_an_unknown_or_broken_nkey_is_named() {
    let user = nkeys::KeyPair::new_user();
    let server = NatsSecureServer::start(&NatsSecureConfig::new().nkey_user(&user.public_key()));
    let seed = server.write_file("user.nk", &user.seed().unwrap());
    works(&format!(
        "{}?nkey_file={}",
        server.url("nats"),
        seed.display()
    ))
    .await;
    let stranger = nkeys::KeyPair::new_user();
    let other = server.write_file("stranger.nk", &stranger.seed().unwrap());
    let e = refused(
        &format!("{}?nkey_file={}", server.url("nats"), other.display()),
        &[&stranger.seed().unwrap(), &user.seed().unwrap()],
    )
    .await;
    assert!(e.contains("refused the credentials"), "{e}");
    assert!(e.contains(&stranger.public_key()), "names the NKey: {e}");
    let broken = server.write_file("broken.nk", "SUBROKENSEED\n");
    let e = refused(
        &format!("{}?nkey_file={}", server.url("nats"), broken.display()),
        &["SUBROKENSEED"],
    )
    .await;
    assert!(e.contains("holds no valid seed"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_creds_file_in_operator_mode_round_trips_and_a_stranger_is_refused() {
    let operator = NatsOperator::new();
    let ca = TestCa::new("nats test CA");
    let server = NatsSecureServer::start(
        &NatsSecureConfig::new()
            .tls(ca.server_cert(&HOSTS))
            .operator(&operator),
    );
    let ca_file = ca.write_cert(server.dir(), "ca.pem");
    let creds = server.write_file("app.creds", &operator.user_creds("inventory"));
    let base = format!("{}?cacertfile={}", server.url("tls"), ca_file.display());
    works(&format!("{base}&creds_file={}", creds.display())).await;
    let stranger_text = operator.stranger_creds("x");
    let seed = stranger_text
        .lines()
        .find(|l| l.starts_with("SU"))
        .expect("the creds hold a user seed");
    let stranger = server.write_file("stranger.creds", &stranger_text);
    let e = refused(
        &format!("{base}&creds_file={}", stranger.display()),
        &[seed],
    )
    .await;
    assert!(
        e.contains("refused the credentials: the user JWT of creds file"),
        "{e}"
    );
    let broken = server.write_file("broken.creds", "not a creds file\n");
    let e = refused(&format!("{base}&creds_file={}", broken.display()), &[]).await;
    assert!(e.contains("not a NATS credentials file"), "{e}");
}

#[tokio::test]
async fn missing_files_are_named_before_any_connection() {
    // Port 9 (discard) is never a NATS server: each error must come before connecting.
    for (url, path) in [
        (
            "tls://127.0.0.1:9?cacertfile=/surely/missing/ca.pem",
            "/surely/missing/ca.pem",
        ),
        (
            "tls://127.0.0.1:9?certfile=/surely/missing/c.pem&keyfile=/surely/missing/k.pem",
            "/surely/missing/c.pem",
        ),
        (
            "nats://127.0.0.1:9?creds_file=/surely/missing/a.creds",
            "/surely/missing/a.creds",
        ),
        (
            "nats://127.0.0.1:9?nkey_file=/surely/missing/u.nk",
            "/surely/missing/u.nk",
        ),
        (
            "nats://127.0.0.1:9?token_file=/surely/missing/t",
            "/surely/missing/t",
        ),
    ] {
        let e = refused(url, &[]).await;
        assert!(e.contains(path) && e.contains("cannot read"), "{url}: {e}");
    }
    let target = NatsTarget::from_url("tls://app:Pw-s3cret-9@h:4222").unwrap();
    assert!(!format!("{target:?}").contains("Pw-s3cret"), "{target:?}");
    assert!(NatsSecurity::default().validate().is_ok());
}
