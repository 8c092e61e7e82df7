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

use common::{TestDb, check_soak, sqs, workload};
use postroom_testkit::servers::MotoServer;

#[tokio::test(flavor = "multi_thread")]
async fn soak_on_postgres_and_sqs_with_kills() {
    let moto = MotoServer::start();
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
            &sqs::url_for(&moto.endpoint()),
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
    check_soak(&r, 2000);
}
