//! Connection settings against a real PostgreSQL: tables in a schema of their own (two
//! installations with one prefix in one database stay apart, their relays woken only by their
//! own rows), the pool's size, and a bad URL reported without its password.

mod common;

use postroom_core::OutboxStore;
use postroom_postgres::{PgOptions, PgStore, commit, outbox};
use postroom_testkit::child::this_test_again;
use postroom_testkit::servers::TestDb;
use sqlx::postgres::PgListener;

async fn enqueue_one(store: &PgStore) {
    let mut tx = store.begin().await.unwrap();
    outbox::enqueue(&mut tx, store.prefix(), &common::outgoing("o1", 1))
        .await
        .unwrap();
    commit(tx).await.unwrap();
}

/// The channels a listener saw before the sentinel arrived.
async fn channels_before_sentinel(l: &mut PgListener) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        let n = tokio::time::timeout(std::time::Duration::from_secs(20), l.recv())
            .await
            .expect("notifications arrive")
            .expect("listener works");
        if n.channel() == "sentinel" {
            return seen;
        }
        seen.push(n.channel().to_string());
    }
}

#[tokio::test]
async fn two_schemas_with_one_prefix_keep_their_rows_and_wake_only_their_relays() {
    let db = TestDb::create().await;
    let a = PgStore::connect_with(&db.url, PgOptions::default().schema("billing").unwrap())
        .await
        .unwrap();
    let b = PgStore::connect_with(&db.url, PgOptions::default().schema("shipping").unwrap())
        .await
        .unwrap();
    a.migrate().await.unwrap();
    b.migrate().await.unwrap();
    let mut la = PgListener::connect(&db.url).await.unwrap();
    la.listen_all(["billing.postroom_outbox", "sentinel"])
        .await
        .unwrap();
    let mut lb = PgListener::connect(&db.url).await.unwrap();
    lb.listen_all(["shipping.postroom_outbox", "sentinel"])
        .await
        .unwrap();

    enqueue_one(&a).await;
    enqueue_one(&a).await;
    enqueue_one(&b).await;
    common::execute(a.pool(), "NOTIFY sentinel").await;
    // Notifications reach each listener in commit order, so everything before the sentinel
    // is what the inserts sent.
    assert_eq!(
        channels_before_sentinel(&mut la).await,
        vec!["billing.postroom_outbox"; 2]
    );
    assert_eq!(
        channels_before_sentinel(&mut lb).await,
        vec!["shipping.postroom_outbox"]
    );
    assert_eq!(a.outbox().pending().await.unwrap(), 2);
    assert_eq!(b.outbox().pending().await.unwrap(), 1);
    let in_schemas: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'postroom_outbox' AND table_schema IN ('billing', 'shipping')",
    )
    .fetch_one(a.pool())
    .await
    .unwrap();
    assert_eq!(in_schemas, 2, "one outbox table in each schema");

    // A relay of `b` claims only `b`'s row.
    let claimed = b
        .outbox()
        .claim("rb", 10, std::time::Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
}

#[tokio::test]
async fn the_pool_size_is_the_callers_and_a_bad_url_keeps_its_password() {
    let db = TestDb::create().await;
    let s = PgStore::connect_with(&db.url, PgOptions::default().max_connections(3))
        .await
        .unwrap();
    assert_eq!(s.pool().options().get_max_connections(), 3);
    let err = PgStore::connect_with(
        "postgres://app:s3cr3t-pw@127.0.0.1:notaport/x",
        PgOptions::default(),
    )
    .await
    .unwrap_err();
    assert!(!err.to_string().contains("s3cr3t-pw"), "{err}");
    assert!(PgOptions::default().max_connections(0).validate().is_err());
    assert!(PgOptions::default().schema("Bad-Name").is_err());
}

/// The pool retries a refused connection until its acquire timeout and then says only that it
/// timed out; the error names the cause.
#[tokio::test]
async fn a_server_that_refuses_connections_is_reported_as_refusing_not_as_a_pool_timeout() {
    let options = PgOptions {
        acquire_timeout: std::time::Duration::from_millis(500),
        ..PgOptions::default()
    };
    let e = PgStore::connect_with("postgres://postgres@127.0.0.1:1/postgres", options)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), postroom_core::ErrorKind::Connection, "{e}");
    let text = e.to_string();
    assert!(text.contains("refused"), "the cause is named: {text}");
    assert!(text.contains("127.0.0.1:1"), "the address is named: {text}");
}

/// A database or a role that does not exist is the URL's mistake, not an outage: a
/// configuration error at start-up that says which.
#[tokio::test]
async fn a_missing_database_or_role_at_start_up_is_a_configuration_error() {
    use postroom_testkit::servers::postgres::{server_url, with_database};
    use sqlx::ConnectOptions as _;
    let server = server_url();
    let e = PgStore::connect(&with_database(&server, "postroom_no_such_database"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), postroom_core::ErrorKind::Config, "{e}");
    assert!(e.to_string().contains("does not exist"), "{e}");
    let stranger = <sqlx::postgres::PgConnectOptions as std::str::FromStr>::from_str(&server)
        .unwrap()
        .username("postroom_no_such_role")
        .to_url_lossy();
    let e = PgStore::connect(stranger.as_str()).await.unwrap_err();
    assert_eq!(e.kind(), postroom_core::ErrorKind::Config, "{e}");
    assert!(e.to_string().contains("postroom_no_such_role"), "{e}");
}

const HOLDER_URL: &str = "POSTROOM_LOCK_HOLDER_URL";

/// A process killed in the middle of a statement leaves no row locked behind it for long:
/// the server notices within a second or two that the client is gone and ends the
/// statement. Without that, another relay skips the rows the dead one was claiming for as
/// long as its statement runs. The holder is this test binary, re-run with this test alone
/// and the database URL in the environment: it locks the row, then runs a minute-long
/// statement, and is killed with SIGKILL.
#[tokio::test]
async fn a_killed_clients_statement_does_not_keep_its_row_locks() {
    if let Ok(url) = std::env::var(HOLDER_URL) {
        let store = PgStore::connect(&url).await.unwrap();
        let mut tx = store.begin().await.unwrap();
        common::execute(&mut *tx, "SELECT id FROM held WHERE id = 1 FOR UPDATE").await;
        let _ = sqlx::query("SELECT pg_sleep(60)").execute(&mut *tx).await;
        return;
    }
    let db = TestDb::create().await;
    let pool = db.pool(2).await;
    common::execute(&pool, "CREATE TABLE held (id int PRIMARY KEY)").await;
    common::execute(&pool, "INSERT INTO held VALUES (1)").await;
    let mut holder = this_test_again("a_killed_clients_statement_does_not_keep_its_row_locks")
        .env(HOLDER_URL, &db.url)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let free = async || {
        let mut tx = pool.begin().await.unwrap();
        let got = sqlx::query("SELECT id FROM held WHERE id = 1 FOR UPDATE NOWAIT")
            .execute(&mut *tx)
            .await
            .is_ok();
        tx.rollback().await.unwrap();
        got
    };
    postroom_testkit::wait::until(
        std::time::Duration::from_secs(30),
        "the holder to lock the row and sleep",
        async || {
            !free().await
                && sqlx::query_scalar::<_, i64>(
                    "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(60)' AND state = 'active' AND datname = current_database()",
                )
                .fetch_one(&pool)
                .await
                .unwrap()
                    == 1
        },
    )
    .await;
    holder.kill().unwrap();
    holder.wait().unwrap();
    postroom_testkit::wait::until(
        std::time::Duration::from_secs(10),
        "the killed holder's row lock to go (its statement would run for a minute)",
        async || free().await,
    )
    .await;
}

async fn backend_pid(pool: &sqlx::PgPool) -> Result<i32, sqlx::Error> {
    sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(pool)
        .await
}

/// A store on a pool of one connection, a second pool to end server processes with, and the
/// server process of the store's connection, just used.
async fn one_connection_store() -> (TestDb, sqlx::PgPool, PgStore, i32) {
    let db = TestDb::create().await;
    let admin = db.pool(1).await;
    let one = PgOptions {
        max_connections: 1,
        ..PgOptions::default()
    };
    let store = PgStore::connect_with(&db.url, one).await.unwrap();
    let first = backend_pid(store.pool()).await.unwrap();
    (db, admin, store, first)
}

/// The store's pool pings a connection that sat idle for `PING_WHEN_IDLE_FOR` before handing
/// it out: one whose server process ended meanwhile is replaced, and the caller never sees it.
#[tokio::test]
async fn a_connection_that_died_while_idle_is_never_handed_out() {
    let (_db, admin, store, first) = one_connection_store().await;
    common::terminate(&admin, first).await;
    tokio::time::sleep(
        postroom_postgres::PING_WHEN_IDLE_FOR + std::time::Duration::from_millis(200),
    )
    .await;
    let second = backend_pid(store.pool())
        .await
        .expect("the dead idle connection was handed out");
    assert_ne!(
        first, second,
        "the pool kept a connection whose server process ended"
    );
}

/// A connection used within `PING_WHEN_IDLE_FOR` is handed out without a ping (a round trip
/// less per transaction): when its server process ended meanwhile, the next statement fails
/// with a connection error, which is transient, and the pool replaces the connection at once.
#[tokio::test]
async fn a_hot_connection_is_not_pinged_and_its_death_costs_one_transient_failure() {
    let (_db, admin, store, first) = one_connection_store().await;
    // The pool takes a connection back in a task of its own (pinging it): wait until it is
    // idle again, so that ping cannot be what finds it dead.
    common::wait_until(
        std::time::Duration::from_secs(10),
        "the store's connection idle in its pool",
        async || store.pool().num_idle() == 1,
    )
    .await;
    let used = std::time::Instant::now();
    common::terminate(&admin, first).await;
    let next = backend_pid(store.pool()).await;
    if used.elapsed() < postroom_postgres::PING_WHEN_IDLE_FOR {
        let e = postroom_postgres::error::map(next.expect_err("a hot connection was pinged"));
        assert!(
            e.is_transient(),
            "a dead connection's failure must be retryable: {e}"
        );
    }
    let after = backend_pid(store.pool())
        .await
        .expect("the pool replaced the dead connection");
    assert_ne!(first, after);
}
