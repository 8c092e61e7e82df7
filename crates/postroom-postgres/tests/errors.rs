//! `sqlx::Error` → postroom `ErrorKind`, with real errors from a real server.

mod common;

use postroom_core::ErrorKind;
use postroom_postgres::error::{map, map_commit};
use postroom_testkit::servers::TestDb;
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection, PgPool};
use std::time::Duration;

async fn setup() -> (TestDb, PgPool) {
    let db = TestDb::create().await;
    let pool = db.pool(6).await;
    sqlx::raw_sql(
        "CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL); INSERT INTO t VALUES (1, 0), (2, 0);",
    )
    .execute(&pool)
    .await
    .unwrap();
    (db, pool)
}

async fn pid(conn: &mut PgConnection) -> i32 {
    sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(conn)
        .await
        .unwrap()
}

#[tokio::test]
async fn constraint_and_data_errors_are_permanent() {
    let (_db, pool) = setup().await;
    let e = sqlx::query("INSERT INTO t VALUES (1, 0)")
        .execute(&pool)
        .await
        .unwrap_err();
    let e = map(e);
    assert_eq!(e.kind(), ErrorKind::ConstraintViolation, "{e}");
    assert!(!e.is_transient());
    let e = map(sqlx::query("SELECT 'x'::int")
        .execute(&pool)
        .await
        .unwrap_err());
    assert_eq!(e.kind(), ErrorKind::InvalidData, "{e}");
    let e = map(sqlx::query("SELECT * FROM no_such_table")
        .execute(&pool)
        .await
        .unwrap_err());
    assert_eq!(e.kind(), ErrorKind::Config, "{e}");
}

#[tokio::test]
async fn serialization_failure_is_transient() {
    let (db, pool) = setup().await;
    let mut a = PgConnection::connect(&db.url).await.unwrap();
    let mut tx = a.begin().await.unwrap();
    common::execute(&mut *tx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ").await;
    common::execute(&mut *tx, "SELECT v FROM t WHERE id = 1").await;
    common::execute(&pool, "UPDATE t SET v = v + 1 WHERE id = 1").await;
    let e = map(sqlx::query("UPDATE t SET v = v + 1 WHERE id = 1")
        .execute(&mut *tx)
        .await
        .unwrap_err());
    assert_eq!(e.kind(), ErrorKind::SerializationFailure, "{e}");
    assert!(e.is_transient());
}

#[tokio::test]
async fn deadlock_is_transient() {
    let (db, _pool) = setup().await;
    // Both transactions hold their first row before either asks for the other's.
    let both_hold = std::sync::Arc::new(tokio::sync::Barrier::new(2));
    let lock = |first: i32, second: i32, url: String| {
        let both_hold = both_hold.clone();
        async move {
            let mut c = PgConnection::connect(&url).await.unwrap();
            let mut tx = c.begin().await.unwrap();
            sqlx::query("UPDATE t SET v = v + 1 WHERE id = $1")
                .bind(first)
                .execute(&mut *tx)
                .await
                .unwrap();
            both_hold.wait().await;
            let r = sqlx::query("UPDATE t SET v = v + 1 WHERE id = $1")
                .bind(second)
                .execute(&mut *tx)
                .await;
            r.map(|_| ())
        }
    };
    let (x, y) = tokio::join!(lock(1, 2, db.url.clone()), lock(2, 1, db.url.clone()));
    let e = x
        .err()
        .or(y.err())
        .expect("one of the two is the deadlock victim");
    let e = map(e);
    assert_eq!(e.kind(), ErrorKind::Deadlock, "{e}");
    assert!(e.is_transient());
}

#[tokio::test]
async fn admin_shutdown_is_a_lost_connection() {
    let (db, pool) = setup().await;
    let mut a = PgConnection::connect(&db.url).await.unwrap();
    let p = pid(&mut a).await;
    common::terminate(&pool, p).await;
    let e = map(sqlx::query("SELECT 1").execute(&mut a).await.unwrap_err());
    assert_eq!(e.kind(), ErrorKind::Connection, "{e}");
}

#[tokio::test]
async fn commit_on_a_dead_connection_has_an_unknown_outcome() {
    let (db, pool) = setup().await;
    let mut a = PgConnection::connect(&db.url).await.unwrap();
    let p = pid(&mut a).await;
    let mut tx = a.begin().await.unwrap();
    common::execute(&mut *tx, "UPDATE t SET v = 42 WHERE id = 2").await;
    common::terminate(&pool, p).await;
    let e = map_commit(tx.commit().await.unwrap_err());
    assert_eq!(e.kind(), ErrorKind::CommitOutcomeUnknown, "{e}");
    assert!(
        e.is_transient(),
        "goes down the retry path; the inbox makes the repeat harmless"
    );
}

#[tokio::test]
async fn unreachable_server_and_pool_timeout_are_connection_errors() {
    let e = map(
        PgConnection::connect("postgres://postgres@127.0.0.1:1/postgres")
            .await
            .unwrap_err(),
    );
    assert_eq!(e.kind(), ErrorKind::Connection, "{e}");
    let (db, _pool) = setup().await;
    let small = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_millis(200))
        .connect(&db.url)
        .await
        .unwrap();
    let _held = small.acquire().await.unwrap();
    let e = map(small.acquire().await.unwrap_err());
    assert_eq!(e.kind(), ErrorKind::Connection, "{e}");
}
