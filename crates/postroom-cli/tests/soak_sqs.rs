//! The short soak on PostgreSQL + SQS (a local endpoint): 2,000 messages written at a steady
//! 20 a second, relays and consumers in processes of their own, one of them killed with SIGKILL
//! every 3 s.
//!
//! The endpoint is one of the test's own: a moto server started on a free port for this run
//! and stopped after it, so nothing an earlier test left in the shared one (127.0.0.1:5000)
//! weighs on it. On the shared one the soak once slowed to a crawl after the rest of the suite
//! had used it, past its bound, and again when run alone right after; it settled in 167 s once
//! that endpoint was restarted.
//!
//! The soak's own bound (420 s) is well inside the test runner's (600 s): a run that does not
//! settle ends with its report (what was lost, what was still in flight, its progress lines)
//! instead of being stopped with nothing said.
//!
//! The rate is the local endpoint's, not postroom's: moto scans a queue's every message on each
//! receive, so a backlog of thousands of messages slows it to a few receives a second; a
//! producer that writes as fast as it can would measure moto. AWS itself has no such limit.
//! At 25 a second the run usually settled in about 130 s, but in whole-suite runs moto fell
//! behind early and never caught up (each receive, delete and visibility change slower as the
//! backlog grew): the rate leaves it more room.

mod common;

use common::{TestDb, sqs, workload};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// moto's server: `POSTROOM_MOTO_SERVER`, else the one `scripts/services.sh sqs` installs.
fn moto_server() -> PathBuf {
    if let Ok(p) = std::env::var("POSTROOM_MOTO_SERVER") {
        return p.into();
    }
    let venv = std::env::var("POSTROOM_MOTO_VENV").unwrap_or_else(|_| "/opt/postroom-moto".into());
    PathBuf::from(venv).join("bin/moto_server")
}

/// A moto server of the test's own, stopped when dropped.
struct OwnMoto {
    port: u16,
    child: Child,
}

impl OwnMoto {
    fn start() -> Self {
        let bin = moto_server();
        assert!(
            bin.exists(),
            "{} not found: install it with `bash scripts/services.sh sqs` (or set POSTROOM_MOTO_SERVER)",
            bin.display()
        );
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let child = Command::new(&bin)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
        let s = Self { port, child };
        let end = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < end,
                "moto did not open port {port} within 60 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        s
    }

    fn url(&self) -> String {
        sqs::url_for(&format!("http://127.0.0.1:{}", self.port))
    }
}

impl Drop for OwnMoto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn soak_on_postgres_and_sqs_with_kills() {
    let endpoint = OwnMoto::start();
    let db = TestDb::create().await;
    let prefix = workload("soak");
    let dir = tempfile::tempdir().unwrap();
    let r = sqs::run_for_report(
        dir.path(),
        &[
            "soak",
            "--messages",
            "2000",
            "--rate",
            "20",
            "--kill-every",
            "3",
            "--database",
            &db.url,
            "--broker",
            &endpoint.url(),
            "--workload",
            &prefix,
            "--timeout-secs",
            "420",
            "--json",
            "s.json",
        ],
        "s.json",
    )
    .await;
    assert_eq!(r["messages"], 2000, "{r}");
    assert_eq!(r["lost"], 0, "{r}");
    assert_eq!(r["duplicate_effects"], 0, "{r}");
    assert_eq!(r["order_violations"], 0, "{r}");
    assert_eq!(r["parked_unexpected"], 0, "{r}");
    assert!(r["kills"].as_u64().unwrap() >= 1, "{r}");
}
