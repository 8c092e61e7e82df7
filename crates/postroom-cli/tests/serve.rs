//! `postroom serve` as a user runs it, right after `postroom demo`: the real binaries, the
//! demo's SQLite file, users from the environment, and a real headless Chromium. The demo's
//! parked messages show grouped by cause; an operator redrives a group from the browser and
//! the run reaches its end, is audited, and the CLI sees the message redriven. Off loopback,
//! the console refuses to start without users. Screenshots go to
//! `target/console-screenshots/` (`demo-groups.png`, `demo-run.png`).

mod common;
#[path = "../../postroom-console/tests/common/webdriver.rs"]
mod webdriver;

use common::daemon::{Daemon, get};
use common::{json_lines, ok, postroom, postroom_cmd};
use std::path::PathBuf;
use std::time::Duration;
use webdriver::Browser;

const PASSWORD: &str = "a long operator passphrase";

fn shots() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target dir")
        .join("console-screenshots")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_parking_lot_is_grouped_by_cause_and_a_group_is_redriven_from_the_browser() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_path_buf();
    tokio::task::spawn_blocking({
        let d = d.clone();
        move || ok(&postroom(&d, &["demo"]))
    })
    .await
    .unwrap();
    let hash = postroom_console::auth::hash_password(PASSWORD).unwrap();
    let users = format!("operator operator {hash}; viewer viewer {hash}");
    let served = Daemon::start(
        &d,
        &[
            "serve",
            "--database",
            "postroom-demo.db",
            "--listen",
            "127.0.0.1:0",
            "--sample-every",
            "1s",
        ],
        &[("POSTROOM_CONSOLE_USERS", &users)],
    );
    let base = served.base.clone();
    let b = Browser::start().await;

    // Users came from the environment: the console asks for a login.
    b.goto(&format!("{base}/groups")).await;
    b.find("#login").await;
    b.find("#username").await.set("operator").await;
    b.find("#password").await.set(PASSWORD).await;
    b.find("#login").await.click().await;
    b.wait_text("#whoami", "operator (operator)", Duration::from_secs(10))
        .await;

    // The demo parked three messages, one for each cause.
    b.goto(&format!("{base}/groups")).await;
    b.wait_text("#group-count", "3", Duration::from_secs(10))
        .await;
    let codes = b
        .execute(
            "return [...document.querySelectorAll('#groups tr.group')].map(r => r.cells[4].textContent).sort().join(',')",
        )
        .await;
    assert_eq!(
        codes.as_str(),
        Some("db_unavailable,malformed,unknown_schema_version")
    );
    b.screenshot(&shots().join("demo-groups.png")).await;

    // Open the group of the corrupt JSON, dry-run it, redrive it.
    let link = b
        .execute(
            "return [...document.querySelectorAll('#groups tr.group')].find(r => r.cells[4].textContent === 'malformed').querySelector('a.group-link').href",
        )
        .await;
    b.goto(link.as_str().expect("a group link")).await;
    b.wait_text("#group-size", "1", Duration::from_secs(10))
        .await;
    b.find("#preview-group").await.click().await;
    b.wait_text("#preview-count", "1", Duration::from_secs(10))
        .await;
    b.find("#rate").await.set("5").await;
    b.find("#start-redrive").await.click().await;
    b.find("#run-progress").await;
    b.wait_for(r#"#run[data-final="true"]"#, Duration::from_secs(60))
        .await;
    assert_eq!(b.text("#run-state").await, "finished");
    assert_eq!(
        (b.text("#run-done").await, b.text("#run-total").await),
        ("1".to_string(), "1".to_string())
    );
    let audit = b.text("#run-audit").await;
    assert!(
        audit.contains("operator")
            && audit.contains("redrive.start")
            && audit.contains("redrive.end"),
        "{audit}"
    );
    b.screenshot(&shots().join("demo-run.png")).await;
    b.quit().await;

    // /metrics: the pipeline's gauges as the console samples them (the redriven copy waits
    // in the inventory queue), and the console's own counters; health and readiness.
    let metrics = format!("{base}/metrics");
    postroom_testkit::metrics::assert_lists_once_sampled(
        async || get(&metrics).await.1,
        "the redriven copy in the sampled gauges",
        r#"postroom_ready_messages{consumer="inventory"} 1"#,
        &[
            postroom_core::metrics::OLDEST_READY_AGE,
            postroom_core::metrics::OUTBOX_PENDING,
            postroom_console::metrics::PARKED_WAITING,
            postroom_console::metrics::RELAY_LAG,
            postroom_console::metrics::REDRIVEN,
        ],
    )
    .await;
    assert_eq!(get(&format!("{base}/healthz")).await.0, 200);
    assert_eq!(get(&format!("{base}/readyz")).await.0, 200);
    assert!(
        served.terminate(Duration::from_secs(30)).success(),
        "SIGTERM ends serve cleanly"
    );

    // The command line sees the same store: the run by the browser's operator, and the
    // corrupt message redriven.
    let runs = json_lines(&ok(&postroom(
        &d,
        &[
            "parking",
            "runs",
            "--database",
            "postroom-demo.db",
            "--json",
        ],
    )));
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(
        (runs[0]["operator"].as_str(), runs[0]["done"].as_u64()),
        (Some("operator"), Some(1))
    );
    let parked = json_lines(&ok(&postroom(
        &d,
        &[
            "parking",
            "list",
            "--database",
            "postroom-demo.db",
            "--include-redriven",
            "--error-code",
            "malformed",
            "--json",
        ],
    )));
    assert_eq!(parked.len(), 1);
    assert_eq!(parked[0]["status"], "redriven", "{:?}", parked[0]);
}

#[test]
fn off_loopback_the_console_needs_users() {
    let dir = tempfile::tempdir().unwrap();
    let out = postroom_cmd(
        dir.path(),
        &["serve", "--database", "x.db", "--listen", "0.0.0.0:0"],
    )
    .env_remove("POSTROOM_CONSOLE_USERS")
    .env_remove("POSTROOM_CONSOLE_USERS_FILE")
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(2), "a usage error");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("POSTROOM_CONSOLE_USERS"), "{err}");
    assert!(!dir.path().join("x.db").exists(), "nothing was opened");
    // An empty users file is refused too: nobody could log in.
    let users = dir.path().join("users");
    std::fs::write(&users, "# nobody yet\n").unwrap();
    let out = postroom_cmd(dir.path(), &["serve", "--database", "x.db"])
        .env("POSTROOM_CONSOLE_USERS_FILE", &users)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no console users"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!dir.path().join("x.db").exists());
}

#[test]
fn hash_password_reads_stdin_and_prints_a_hash_the_console_accepts() {
    use std::io::Write;
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let hash_of = |input: &[u8]| {
        let mut child = postroom_cmd(dir.path(), &["console", "hash-password"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input).unwrap();
        child.wait_with_output().unwrap()
    };
    let out = hash_of(b"a long operator passphrase\n");
    let hash = ok(&out).trim().to_string();
    assert!(
        hash.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"),
        "{hash}"
    );
    assert!(!hash.contains("passphrase"));
    let users = postroom_console::Users::parse(&format!("alice operator {hash}")).unwrap();
    assert!(
        users.verify("alice", PASSWORD).is_some(),
        "the hash is of the line read"
    );
    assert!(
        users
            .verify("alice", "a long operator passphrase\n")
            .is_none()
    );
    // Two hashes of one password differ (a salt each).
    let again = ok(&hash_of(PASSWORD.as_bytes())).trim().to_string();
    assert_ne!(again, hash);
    let empty = hash_of(b"");
    assert_eq!(empty.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&empty.stderr).contains("no password on stdin"),
        "{}",
        String::from_utf8_lossy(&empty.stderr)
    );
    let help = ok(&postroom(
        dir.path(),
        &["console", "hash-password", "--help"],
    ));
    assert!(
        help.contains("stdin") && help.contains("users file"),
        "{help}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_answers_only_to_its_own_names_and_those_it_is_given() {
    let dir = tempfile::tempdir().unwrap();
    // An empty store: serve opens an existing one only.
    postroom_sqlite::SqliteStore::open(dir.path().join("console.db"))
        .await
        .unwrap();
    let served = Daemon::start(
        dir.path(),
        &[
            "serve",
            "--database",
            "console.db",
            "--listen",
            "127.0.0.1:0",
            "--allowed-host",
            "console.internal",
        ],
        &[],
    );
    let port = served.base.rsplit(':').next().unwrap().to_string();
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    for (host, want) in [
        (format!("127.0.0.1:{port}"), 200),
        (format!("console.internal:{port}"), 200),
        (format!("attacker.example:{port}"), 403),
    ] {
        let r = client
            .get(format!("{}/parking", served.base))
            .header("host", &host)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), want, "Host {host}");
    }
    assert!(served.terminate(Duration::from_secs(30)).success());
}
