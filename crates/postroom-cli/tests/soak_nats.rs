//! The short soak on PostgreSQL + NATS JetStream: relays and consumers killed with SIGKILL,
//! and the NATS server itself killed and started again mid-run (`--restart-command`). The
//! server is one of the test's own (a free port, its own store directory), so its restart
//! never touches the shared one.

mod common;

use common::{TestDb, check_soak, run_for_report, workload};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn nats_server() -> PathBuf {
    ["/usr/sbin/nats-server", "/usr/bin/nats-server"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .unwrap_or_else(|| "nats-server".into())
}

/// A nats-server started by a script of the test's own, which the soak runs to restart it:
/// it SIGKILLs the server whose pid it wrote and starts it again on the same port and store.
struct OwnNats {
    port: u16,
    dir: tempfile::TempDir,
}

impl OwnNats {
    fn start() -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let dir = tempfile::tempdir().expect("server dir");
        let script = format!(
            "#!/bin/sh\n\
             # (Re)start the test's nats-server: kill the running one, wait for it to go (a zombie\n\
             # holds no socket: dead is enough), start.\n\
             set -e\n\
             cd '{dir}'\n\
             if [ -f pid ]; then\n\
               old=$(cat pid)\n\
               kill -KILL \"$old\" 2>/dev/null || true\n\
               i=0\n\
               while kill -0 \"$old\" 2>/dev/null && [ $i -lt 100 ] \\\n\
                 && ! ps -o stat= -p \"$old\" | grep -q Z; do sleep 0.1; i=$((i+1)); done\n\
             fi\n\
             setsid '{bin}' -a 127.0.0.1 -p {port} -js -sd '{dir}/store' >>'{dir}/log' 2>&1 </dev/null &\n\
             echo $! > pid\n",
            dir = dir.path().display(),
            bin = nats_server().display(),
        );
        std::fs::write(dir.path().join("restart.sh"), script).unwrap();
        let s = Self { port, dir };
        s.run_script();
        s
    }

    /// Run the script and wait for the port.
    fn run_script(&self) {
        let status = Command::new("sh")
            .arg(self.script())
            .status()
            .expect("run the start script");
        assert!(status.success(), "start script: {status}");
        let end = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < end,
                "nats-server did not open port {} within 20 s",
                self.port
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn script(&self) -> PathBuf {
        self.dir.path().join("restart.sh")
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    fn pid(dir: &Path) -> Option<String> {
        std::fs::read_to_string(dir.join("pid"))
            .ok()
            .map(|s| s.trim().to_string())
    }
}

impl Drop for OwnNats {
    fn drop(&mut self) {
        if let Some(pid) = Self::pid(self.dir.path()) {
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn soak_on_postgres_and_nats_with_kills_and_a_server_restart() {
    let server = OwnNats::start();
    let db = TestDb::create().await;
    let prefix = workload("soak").replace(['.', '-'], "_");
    let dir = tempfile::tempdir().unwrap();
    let restart = format!("sh '{}'", server.script().display());
    let first_pid = OwnNats::pid(server.dir.path());
    let r = run_for_report(
        dir.path(),
        &[
            "soak",
            "--messages",
            "5000",
            "--kill-every",
            "2",
            "--database",
            &db.url,
            "--broker",
            &server.url(),
            "--workload",
            &prefix,
            "--restart-broker",
            "--restart-command",
            &restart,
            "--timeout-secs",
            "240",
            "--json",
            "s.json",
        ],
        "s.json",
    )
    .await;
    check_soak(&r, 5000);
    assert_eq!(r["broker_restarts"], 1, "{r:#}");
    assert_ne!(
        OwnNats::pid(server.dir.path()),
        first_pid,
        "the server was killed and started again"
    );
}
