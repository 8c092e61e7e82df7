//! TLS to PostgreSQL against a cluster the test starts for itself (`initdb` + `pg_ctl` on a free
//! port, `ssl = on` with a certificate for `localhost` signed by a CA made in the test): a
//! verified connection is encrypted, a wrong CA or a wrong host name is refused with a clear
//! error, and a connection that requires TLS never falls back to plaintext.

use postroom_core::ErrorKind;
use postroom_postgres::PgStore;
use postroom_testkit::servers::{PgCluster, TestCa};
use std::path::PathBuf;

/// Whether the store's connection is encrypted, as the server sees it.
async fn encrypted(store: &PgStore) -> bool {
    sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(store.pool())
        .await
        .expect("read pg_stat_ssl")
}

/// A cluster with TLS for `localhost` only, the right CA's file and another CA's file.
fn tls_cluster() -> (PgCluster, PathBuf, PathBuf) {
    let ca = TestCa::new("postroom test CA");
    let cluster = PgCluster::start_tls(&ca.server_cert(&["localhost"]));
    let right = ca.write_cert(cluster.dir(), "ca.pem");
    let wrong = TestCa::new("another CA").write_cert(cluster.dir(), "other-ca.pem");
    (cluster, right, wrong)
}

async fn refused(what: &str, url: &str) -> postroom_core::Error {
    match PgStore::connect(url).await {
        Ok(store) => panic!(
            "{what}: connected (encrypted: {}) but it must be refused",
            encrypted(&store).await
        ),
        Err(e) => e,
    }
}

#[tokio::test]
async fn a_verified_connection_with_the_right_ca_is_encrypted() {
    let (cluster, ca, _) = tls_cluster();
    let ca = ca.display();
    for (host, mode) in [
        ("localhost", "verify-full"),
        ("localhost", "require"),
        ("localhost", "verify-ca"),
    ] {
        let url = cluster.url_on(host, &format!("?sslmode={mode}&sslrootcert={ca}"));
        let store = PgStore::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("{mode} to {host} with the right CA: {e}"));
        assert!(encrypted(&store).await, "{mode} to {host} is encrypted");
        store.pool().close().await;
    }
    // No sslmode on loopback: TLS when the server offers it (libpq's `prefer`).
    let store = PgStore::connect(&cluster.url_on("127.0.0.1", ""))
        .await
        .unwrap();
    assert!(
        encrypted(&store).await,
        "loopback default uses the TLS offered"
    );
}

#[tokio::test]
async fn a_wrong_ca_or_host_name_is_refused_with_a_clear_error() {
    let (cluster, right, wrong) = tls_cluster();
    let with_password = |host: &str, query: String| {
        cluster
            .url_on(host, &query)
            .replace("postgres@", "postgres:s3cr3t-pw@")
    };
    let cases = [
        (
            "another CA, verify-full",
            with_password(
                "localhost",
                format!("?sslmode=verify-full&sslrootcert={}", wrong.display()),
            ),
            "UnknownIssuer",
        ),
        (
            "another CA, require (verified by postroom)",
            with_password(
                "localhost",
                format!("?sslmode=require&sslrootcert={}", wrong.display()),
            ),
            "UnknownIssuer",
        ),
        (
            "no CA file: the system's roots do not know the test CA",
            with_password("localhost", "?sslmode=verify-full".into()),
            "UnknownIssuer",
        ),
        (
            "the right CA, a host name the certificate does not carry",
            with_password(
                "127.0.0.1",
                format!("?sslmode=verify-full&sslrootcert={}", right.display()),
            ),
            "not valid for name",
        ),
    ];
    for (what, url, cause) in cases {
        let err = refused(what, &url).await;
        let text = err.to_string();
        assert_eq!(err.kind(), ErrorKind::Config, "{what}: {text}");
        assert!(
            text.contains("TLS with PostgreSQL at") && text.contains("sslmode=verify-full"),
            "{what}: the error names the server and the mode: {text}"
        );
        assert!(text.contains(cause), "{what}: the cause {cause}: {text}");
        assert!(!text.contains("s3cr3t-pw"), "{what}: no password: {text}");
    }
}

#[tokio::test]
async fn a_connection_that_requires_tls_never_falls_back_to_plaintext() {
    let ca = TestCa::new("postroom test CA");
    let cluster = PgCluster::start();
    let ca = ca.write_cert(cluster.dir(), "ca.pem");
    for mode in ["require", "verify-ca", "verify-full"] {
        let url = cluster.url_on(
            "localhost",
            &format!("?sslmode={mode}&sslrootcert={}", ca.display()),
        );
        let err = refused(mode, &url).await;
        assert_eq!(err.kind(), ErrorKind::Config, "{mode}: {err}");
        assert!(
            err.to_string().contains("does not offer TLS"),
            "{mode}: says why: {err}"
        );
    }
    // The server is there: plaintext works when it is asked for, and only then.
    let store = PgStore::connect(&cluster.url_on("localhost", "?sslmode=disable"))
        .await
        .expect("sslmode=disable connects");
    assert!(!encrypted(&store).await);
}
