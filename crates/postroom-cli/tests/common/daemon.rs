//! A long-running `postroom` command (serve, relay, ingest) as a child process: started,
//! its printed address read, then stopped with SIGTERM or killed with SIGKILL.

/// Wait until a condition holds, up to a bound, or fail naming what was awaited.
#[allow(unused_imports)]
pub use postroom_testkit::wait::until as wait_for;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The arguments of the daemon `command` (`relay`, `ingest`) on `database` and `broker`,
/// with the `topology.toml` of its directory and a port the system picks, then `extra`.
pub fn on_broker<'a>(
    command: &'a str,
    database: &'a str,
    broker: &'a str,
    extra: &[&'a str],
) -> Vec<&'a str> {
    let mut args = vec![
        command,
        "--database",
        database,
        "--broker",
        broker,
        "--topology",
        "topology.toml",
        "--listen",
        "127.0.0.1:0",
    ];
    args.extend_from_slice(extra);
    args
}

/// A running command; killed on drop if still running.
pub struct Daemon {
    child: Child,
    /// `http://ADDR` it listens on.
    pub base: String,
}

impl Daemon {
    /// Start `postroom args…` in `dir` with `env` and wait for the `… listening on URL` line
    /// it prints once its store is open and its port bound.
    pub fn start(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::start_with(dir, args, env, Stdio::inherit())
    }

    /// [`Daemon::start`], its standard error written to the file `log`.
    pub fn start_logging(dir: &Path, args: &[&str], env: &[(&str, &str)], log: &Path) -> Self {
        let file = std::fs::File::create(log).expect("create the log file");
        Self::start_with(dir, args, env, Stdio::from(file))
    }

    fn start_with(dir: &Path, args: &[&str], env: &[(&str, &str)], stderr: Stdio) -> Self {
        let mut cmd = super::postroom_cmd(dir, args);
        cmd.stdout(Stdio::piped()).stderr(stderr);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start postroom");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        // A command that fails ends its stdout: the line is then empty.
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read stdout");
        let base = line
            .trim()
            .rsplit(' ')
            .next()
            .filter(|u| u.starts_with("http://"))
            .unwrap_or_else(|| panic!("postroom {args:?} printed no address: {line:?}"))
            .to_string();
        Self { child, base }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn signal(&self, sig: &str) {
        let sent = std::process::Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(sent.success(), "kill {sig} {}", self.child.id());
    }

    /// SIGHUP (a relay reads its brokers file again at once).
    pub fn hangup(&self) {
        self.signal("-HUP");
    }

    /// SIGTERM, then its exit status (it must end within `bound`).
    pub fn terminate(mut self, bound: Duration) -> ExitStatus {
        self.signal("-TERM");
        self.ended_within(bound)
            .unwrap_or_else(|| panic!("still running {bound:?} after SIGTERM"))
    }

    /// Its exit status once it ends, or `None` if it still runs after `bound`.
    pub fn ended_within(&mut self, bound: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return Some(status);
            }
            if start.elapsed() >= bound {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL: no chance to finish anything.
    pub fn kill(mut self) {
        self.signal("-KILL");
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// GET `url`: its status and body (status 0 when nothing answers).
pub async fn get(url: &str) -> (u16, String) {
    match reqwest::get(url).await {
        Ok(r) => {
            let status = r.status().as_u16();
            (status, r.text().await.unwrap_or_default())
        }
        Err(_) => (0, String::new()),
    }
}
