//! `postroom relay` for services in other languages, as docs/other-languages.md describes it: rows
//! inserted by the docs' Python snippet (stdlib sqlite3) into a SQLite outbox, and by its
//! SQL for psql into a PostgreSQL outbox, are relayed to the consumers bound by a topology
//! file, every envelope decodable; two relays on one PostgreSQL outbox, one killed with
//! SIGKILL in the middle, lose nothing and keep each aggregate's order; SIGTERM drains
//! (nothing stays leased); with `--retention 0s` on PostgreSQL the relay deletes each row it
//! published and the outbox ends empty; a row the broker can never take (over NATS's
//! `max_payload`) is held with its reason while other aggregates flow; `/metrics`, `/healthz`
//! and `/readyz` answer. The docs' Node snippet is checked for syntax only (its `pg` module is not installed here).

mod common;

use common::daemon::{Daemon, get, on_broker, wait_for};
use common::{TestDb, postroom_cmd};
use postroom_core::EnvelopeDecoder;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const TOPOLOGY: &str =
    "prefix = \"billing\"\n[[consumers]]\nname = \"ledger\"\nbindings = [\"invoice.*\"]\n";

/// A temporary directory holding the topology file [`TOPOLOGY`] as `topology.toml`.
fn topology_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("topology.toml"), TOPOLOGY).unwrap();
    dir
}

/// The page of the docs with the outbox snippets for other languages.
const SNIPPETS: &str = "docs/other-languages.md";

fn readme() -> String {
    std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(SNIPPETS),
    )
    .expect(SNIPPETS)
}

/// The fenced block of `lang` in [`SNIPPETS`] that mentions `marker`.
fn readme_block(lang: &str, marker: &str) -> String {
    let text = readme();
    let fence = format!("```{lang}\n");
    text.match_indices(&fence)
        .filter_map(|(at, _)| {
            let body = &text[at + fence.len()..];
            body.find("\n```").map(|end| body[..=end].to_string())
        })
        .find(|b| b.contains(marker))
        .unwrap_or_else(|| panic!("{SNIPPETS} has no {lang} block with {marker}"))
}

async fn ready(d: &Daemon) {
    let url = format!("{}/readyz", d.base);
    wait_for(
        Duration::from_secs(30),
        "the relay to be ready",
        async || get(&url).await.0 == 200,
    )
    .await;
}

/// `(message id, aggregate key, aggregate version)` of each copy queued for `ledger`, in
/// queue order, every body decoded as a consumer decodes it.
fn decoded(rows: Vec<(String, Vec<u8>)>) -> Vec<(String, String, u64)> {
    let decoder = EnvelopeDecoder::new().accept("invoice.created", 1..=1);
    rows.into_iter()
        .map(|(id, body)| {
            let e = decoder
                .decode(&body)
                .unwrap_or_else(|err| panic!("undecodable body {id}: {err}"));
            assert_eq!(e.id.to_string(), id, "the row's id is the envelope's");
            (id, e.aggregate.key(), e.aggregate.version)
        })
        .collect()
}

/// Nothing lost (every outbox id was queued) and each aggregate's versions in order (a
/// republished copy after a kill may repeat a version, never go back).
fn check_nothing_lost_or_reordered(
    outbox: &BTreeSet<String>,
    queued: &[(String, String, u64)],
    per_aggregate: u64,
) {
    let ids: BTreeSet<String> = queued.iter().map(|(id, _, _)| id.clone()).collect();
    assert_eq!(
        &ids, outbox,
        "every outbox row reached the consumer's queue"
    );
    let mut seen: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for (_, key, version) in queued {
        seen.entry(key).or_default().push(*version);
    }
    for (key, versions) in &seen {
        assert!(
            versions.windows(2).all(|w| w[0] <= w[1]),
            "{key} reordered: {versions:?}"
        );
        let distinct: BTreeSet<u64> = versions.iter().copied().collect();
        assert_eq!(
            distinct,
            (1..=per_aggregate).collect::<BTreeSet<u64>>(),
            "{key}"
        );
    }
}

/// A relay process on `database` named `id`, running `lanes` pipelines.
fn relay(dir: &Path, database: &str, id: &str, lanes: &str) -> Daemon {
    relay_with(dir, database, id, lanes, &[])
}

/// [`relay`] with `extra` arguments.
fn relay_with(dir: &Path, database: &str, id: &str, lanes: &str, extra: &[&str]) -> Daemon {
    let args = [
        &[
            "relay",
            "--database",
            database,
            "--topology",
            "topology.toml",
            "--listen",
            "127.0.0.1:0",
            "--relay-id",
            id,
            "--lease",
            "2s",
            "--batch-size",
            "20",
            "--lanes",
            lanes,
        ][..],
        extra,
    ]
    .concat();
    Daemon::start(dir, &args, &[])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_a_python_service_inserts_into_a_sqlite_outbox_are_relayed_and_sigterm_drains() {
    let dir = topology_dir();
    let d = dir.path();
    std::fs::write(
        d.join("outbox.py"),
        readme_block("python", "postroom_outbox"),
    )
    .unwrap();
    // The relay creates the tables; the service writes once they exist.
    let r = relay(d, "app.db", "py-relay", "1");
    ready(&r).await;
    assert_eq!(get(&format!("{}/healthz", r.base)).await.0, 200);
    let out = Command::new("python3")
        .current_dir(d)
        .args(["outbox.py", "app.db", "200"])
        .output()
        .expect("python3 must be installed");
    common::ok(&out);

    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", d.join("app.db").display()))
        .await
        .unwrap();
    let unpublished = || {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(
                "SELECT COUNT(*) FROM postroom_outbox WHERE published_at IS NULL",
            )
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    wait_for(Duration::from_secs(60), "every row relayed", || async {
        unpublished().await == 0
    })
    .await;
    let outbox: BTreeSet<String> = sqlx::query_scalar("SELECT message_id FROM postroom_outbox")
        .fetch_all(&pool)
        .await
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(outbox.len(), 200);
    let invoices: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM invoices")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(
        invoices, 200,
        "each business row committed with its outbox row"
    );
    let rows: Vec<(String, Vec<u8>)> = sqlx::query_as(
        "SELECT message_id, body FROM postroom_queue WHERE consumer = 'ledger' ORDER BY seq",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    check_nothing_lost_or_reordered(&outbox, &decoded(rows), 20);

    let (status, metrics) = get(&format!("{}/metrics", r.base)).await;
    assert_eq!(status, 200);
    assert!(
        metrics.contains(r#"postroom_relay_published_total{relay="py-relay"} 200"#),
        "{metrics}"
    );
    assert!(metrics.contains(postroom_core::metrics::OUTBOX_PENDING));

    let status = r.terminate(Duration::from_secs(30));
    assert!(status.success(), "SIGTERM ends the relay cleanly: {status}");
    let leased: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM postroom_outbox WHERE locked_by IS NOT NULL")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(leased, 0, "a drained relay leaves no row leased");
}

/// The docs' SQL for psql, repeated for `n` invoices of ten customers.
fn psql_script(n: usize) -> String {
    let snippet = readme_block("sql", "postroom_outbox");
    let mut script = String::from(
        "\\set ON_ERROR_STOP on\nCREATE TABLE invoices (id BIGSERIAL PRIMARY KEY, customer TEXT, amount INTEGER);\n",
    );
    for i in 0..n {
        script.push_str(&format!(
            "\\set customer c{}\n\\set version {}\n\\set invoice {i}\n\\set amount {}\n{snippet}",
            i % 10,
            i / 10 + 1,
            100 + i
        ));
    }
    script
}

/// Run the docs' SQL for `n` rows with psql in `dir`, against `url`; psql's output.
fn run_psql(dir: &Path, url: &str, n: usize) -> std::process::Output {
    std::fs::write(dir.join("rows.sql"), psql_script(n)).unwrap();
    Command::new("psql")
        .current_dir(dir)
        .args(["-q", "-X", "-f", "rows.sql", url])
        .output()
        .expect("psql must be installed")
}

/// Wait until `sql` (a count) reads 0, or fail naming `what`.
async fn until_zero(pool: &sqlx::PgPool, sql: &'static str, bound: Duration, what: &str) {
    wait_for(bound, what, async || {
        sqlx::query_scalar::<_, i64>(sql)
            .fetch_one(pool)
            .await
            .unwrap()
            == 0
    })
    .await;
}

/// `(message id, body)` of each copy queued for `ledger`, in queue order.
async fn queued(pool: &sqlx::PgPool) -> Vec<(String, Vec<u8>)> {
    sqlx::query_as(
        "SELECT message_id::text, body FROM postroom_queue WHERE consumer = 'ledger' ORDER BY id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// The ids of the rows in the outbox.
async fn outbox_ids(pool: &sqlx::PgPool) -> BTreeSet<String> {
    sqlx::query_scalar("SELECT id::text FROM postroom_outbox")
        .fetch_all(pool)
        .await
        .unwrap()
        .into_iter()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_relays_on_postgres_one_killed_lose_and_reorder_nothing() {
    let db = TestDb::create().await;
    let dir = topology_dir();
    let d = dir.path();
    // Three pipelines each: aggregate order must hold across lanes as across relays.
    let a = relay(d, &db.url, "relay-a", "3");
    let b = relay(d, &db.url, "relay-b", "3");
    ready(&a).await;
    ready(&b).await;
    let n = 1500;
    let psql = {
        let (dir, url) = (d.to_path_buf(), db.url.clone());
        tokio::task::spawn_blocking(move || run_psql(&dir, &url, n))
    };
    // Both relays claim from the same outbox and either may win every claim while the rows
    // arrive: kill the first one seen publishing, in the middle of its work; the other must
    // finish alone.
    let published = |d: &Daemon, id: &str| {
        let (url, prefix) = (
            format!("{}/metrics", d.base),
            format!(r#"postroom_relay_published_total{{relay="{id}"}} "#),
        );
        async move {
            get(&url).await.1.lines().any(|l| {
                l.strip_prefix(&prefix)
                    .and_then(|v| v.parse::<f64>().ok())
                    .is_some_and(|v| v > 0.0)
            })
        }
    };
    let first = std::sync::Mutex::new(None);
    let (ra, rb, rf, p) = (&a, &b, &first, &published);
    wait_for(
        Duration::from_secs(60),
        "a relay to publish",
        move || async move {
            for (name, d) in [("relay-a", ra), ("relay-b", rb)] {
                if p(d, name).await {
                    *rf.lock().unwrap() = Some(name);
                    return true;
                }
            }
            false
        },
    )
    .await;
    let (killed, survivor) = match first.into_inner().unwrap() {
        Some("relay-a") => (a, b),
        _ => (b, a),
    };
    killed.kill();
    common::ok(&psql.await.unwrap());

    let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
    until_zero(
        &pool,
        "SELECT COUNT(*) FROM postroom_outbox WHERE published_at IS NULL",
        Duration::from_secs(120),
        "the surviving relay to publish everything",
    )
    .await;
    let outbox = outbox_ids(&pool).await;
    assert_eq!(outbox.len(), n);
    check_nothing_lost_or_reordered(&outbox, &decoded(queued(&pool).await), (n / 10) as u64);
    assert!(survivor.terminate(Duration::from_secs(30)).success());
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_with_retention_zero_on_postgres_deletes_each_row_once_published() {
    let db = TestDb::create().await;
    let dir = topology_dir();
    let d = dir.path();
    // A first relay migrates the database; the rows are written while none runs.
    let first = relay(d, &db.url, "relay-a", "1");
    ready(&first).await;
    assert!(first.terminate(Duration::from_secs(30)).success());
    let n = 300;
    common::ok(&run_psql(d, &db.url, n));
    let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
    let written = outbox_ids(&pool).await;
    assert_eq!(written.len(), n);
    let deleting = relay_with(d, &db.url, "relay-b", "2", &["--retention", "0s"]);
    ready(&deleting).await;
    until_zero(
        &pool,
        "SELECT COUNT(*) FROM postroom_outbox",
        Duration::from_secs(60),
        "every row published and deleted",
    )
    .await;
    check_nothing_lost_or_reordered(&written, &decoded(queued(&pool).await), (n / 10) as u64);
    assert!(deleting.terminate(Duration::from_secs(30)).success());
    pool.close().await;
}

#[test]
fn the_readme_node_snippet_parses() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("outbox.js");
    std::fs::write(&file, readme_block("js", "postroom_outbox")).unwrap();
    let out = Command::new("node")
        .arg("--check")
        .arg(&file)
        .output()
        .expect("node must be installed");
    common::ok(&out);
}

#[test]
fn a_relay_refuses_bad_input_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let out = postroom_cmd(
        dir.path(),
        &[
            "relay",
            "--database",
            "x.db",
            "--lease",
            "0s",
            "--listen",
            "127.0.0.1:0",
        ],
    )
    .output()
    .unwrap();
    common::usage_error(&out, "--lease");
    let out = postroom_cmd(
        dir.path(),
        &["relay", "--database", "x.db", "--topology", "missing.toml"],
    )
    .output()
    .unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.toml"));
}

/// Insert an outbox row of `aggregate` to route `t.big` with `body` into the SQLite outbox at
/// `db`; returns its id.
async fn insert_row(db: &sqlx::SqlitePool, aggregate: &str, body: Vec<u8>) -> String {
    let id = uuid::Uuid::now_v7().to_string();
    let now = chrono::Utc::now().timestamp_millis();
    sqlx::query(
        "INSERT INTO postroom_outbox (message_id, route_kind, route, headers, body, aggregate_key, \
         created_at, available_at) VALUES (?, 'topic', 't.big', '{}', ?, ?, ?, ?)",
    )
    .bind(&id)
    .bind(body)
    .bind(aggregate)
    .bind(now)
    .bind(now)
    .execute(db)
    .await
    .unwrap();
    id
}

/// A row the broker can never take as it is (2 MiB, over the NATS server's 1 MiB
/// `max_payload`) stays in the outbox with the reason, is logged as an error and not tried
/// again at once; the later row of its aggregate waits behind it (order holds), and another
/// aggregate's row is published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_the_broker_can_never_take_is_held_with_its_reason_and_other_aggregates_flow() {
    use common::parking::ParkingPlace;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let nats = common::nats::NatsWorkload::start(d, "too-big").await;
    let log = d.join("relay.log");
    let url = common::nats::url();
    let r = Daemon::start_logging(
        d,
        &on_broker("relay", "app.db", &url, &["--relay-id", "big"]),
        &[],
        &log,
    );
    ready(&r).await;
    let db = sqlx::SqlitePool::connect(&format!("sqlite://{}", d.join("app.db").display()))
        .await
        .unwrap();
    let huge = insert_row(&db, "a", vec![b'x'; 2 * 1024 * 1024]).await;
    let after_huge = insert_row(&db, "a", b"{}".to_vec()).await;
    let other = insert_row(&db, "b", b"{}".to_vec()).await;
    let state = |id: String| {
        let db = db.clone();
        async move {
            sqlx::query_as::<_, (i64, Option<String>, Option<i64>)>(
                "SELECT publish_attempts, last_error, published_at FROM postroom_outbox WHERE message_id = ?",
            )
            .bind(id)
            .fetch_one(&db)
            .await
            .unwrap()
        }
    };
    wait_for(
        Duration::from_secs(30),
        "the other aggregate's row published",
        || async { state(other.clone()).await.2.is_some() },
    )
    .await;
    wait_for(
        Duration::from_secs(30),
        "the huge row tried once",
        || async { state(huge.clone()).await.0 >= 1 },
    )
    .await;
    // Not tried again soon: a retry cannot help it.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (attempts, error, published) = state(huge.clone()).await;
    assert_eq!(attempts, 1, "tried again at once: {error:?}");
    assert!(published.is_none());
    let error = error.expect("the reason is kept on the row");
    assert!(error.contains("payload"), "{error}");
    assert!(
        state(after_huge.clone()).await.2.is_none(),
        "the next row of its aggregate waits behind it"
    );
    assert_eq!(nats.stream_messages(&nats.prefix).await, 1);
    let status = r.terminate(Duration::from_secs(30));
    assert!(status.success(), "{status}");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.lines().any(|l| l.contains("ERROR")
            && l.contains("cannot take this outbox row")
            && l.contains(&huge)),
        "{logged}"
    );
    nats.close().await;
}
