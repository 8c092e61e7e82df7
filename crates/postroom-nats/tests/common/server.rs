//! A nats-server of a test's own, on a random port with its own store directory, for faults
//! that must not touch the shared server (a restart). Killed on drop.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The nats-server binary.
pub fn binary() -> PathBuf {
    for p in ["/usr/sbin/nats-server", "/usr/bin/nats-server"] {
        if std::path::Path::new(p).exists() {
            return p.into();
        }
    }
    "nats-server".into()
}

/// A private server.
pub struct OwnServer {
    pub port: u16,
    pub dir: tempfile::TempDir,
    child: Option<Child>,
}

impl OwnServer {
    /// Start on a free port with JetStream and a fresh store directory.
    pub fn start() -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let dir = tempfile::tempdir().expect("store dir");
        let mut s = Self {
            port,
            dir,
            child: None,
        };
        s.spawn();
        s
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) {
        let child = Command::new(binary())
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", binary().display()));
        self.child = Some(child);
        let end = Instant::now() + Duration::from_secs(20);
        while Instant::now() < end {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("nats-server did not open port {} within 20 s", self.port);
    }

    /// Kill the server (SIGKILL) and start it again on the same port and store.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Kill it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        self.kill();
    }
}
