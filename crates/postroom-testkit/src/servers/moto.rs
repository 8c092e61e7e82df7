//! A local SQS endpoint of a test's own: a moto server on a free loopback port, stopped when
//! dropped, so nothing earlier tests left in the shared endpoint weighs on the test.

use super::free_port;
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// moto's server program: `POSTROOM_MOTO_SERVER`, else the one `scripts/services.sh sqs`
/// installs (`$POSTROOM_MOTO_VENV/bin/moto_server`, `/opt/postroom-moto` by default).
fn program() -> PathBuf {
    if let Ok(p) = std::env::var("POSTROOM_MOTO_SERVER") {
        return p.into();
    }
    let venv = std::env::var("POSTROOM_MOTO_VENV").unwrap_or_else(|_| "/opt/postroom-moto".into());
    PathBuf::from(venv).join("bin/moto_server")
}

/// A moto server of the test's own.
pub struct MotoServer {
    port: u16,
    child: Child,
}

impl MotoServer {
    /// Start one and wait (at most 60 s) until it listens; a missing moto fails the test with
    /// how to install it.
    #[must_use]
    pub fn start() -> Self {
        let bin = program();
        assert!(
            bin.exists(),
            "{} not found: install it with `bash scripts/services.sh sqs` (or set POSTROOM_MOTO_SERVER)",
            bin.display()
        );
        let port = free_port();
        let child = Command::new(&bin)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
        let server = Self { port, child };
        let end = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < end,
                "moto did not open port {port} within 60 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        server
    }

    /// Its endpoint, `http://127.0.0.1:<port>`.
    #[must_use]
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
