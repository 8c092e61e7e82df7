//! A three-node NATS JetStream cluster a test starts for itself, beside the shared server:
//! each node with its own client, cluster-route and monitoring port on loopback, its own
//! `server_name` and store directory in a temporary directory, and routes to the other two.
//! A node can be killed (SIGKILL) and started again on the same ports and store; every node
//! is killed on drop.
//!
//! The binary is `nats-server` from `POSTROOM_NATS_SERVER`, `/usr/sbin`, `/usr/bin` or the
//! `PATH`.

use super::free_port;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a node may take to be healthy (JetStream in contact with a meta leader).
const BOOT_LIMIT: Duration = Duration::from_secs(30);

pub(crate) fn binary() -> PathBuf {
    if let Ok(p) = std::env::var("POSTROOM_NATS_SERVER") {
        return p.into();
    }
    for p in ["/usr/sbin/nats-server", "/usr/bin/nats-server"] {
        if std::path::Path::new(p).exists() {
            return p.into();
        }
    }
    "nats-server".into()
}

/// One node's ports and process.
struct Node {
    name: String,
    client_port: u16,
    route_port: u16,
    monitor_port: u16,
    child: Option<Child>,
}

/// A running three-node cluster.
pub struct NatsCluster {
    dir: tempfile::TempDir,
    nodes: Vec<Node>,
}

impl std::fmt::Debug for NatsCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsCluster")
            .field("urls", &self.urls())
            .finish_non_exhaustive()
    }
}

impl NatsCluster {
    /// Start three nodes named `<prefix>-0`, `-1`, `-2` and return once each reports itself
    /// healthy with JetStream (a meta leader elected). Free ports are picked before the nodes
    /// bind them, so another process may take one meanwhile: the cluster is then started
    /// again on new ports (three attempts).
    #[must_use]
    pub fn start(prefix: &str) -> Self {
        let mut failures = Vec::new();
        for _ in 0..3 {
            match Self::try_start(prefix) {
                Ok(cluster) => return cluster,
                Err(e) => failures.push(e),
            }
        }
        panic!("the NATS cluster did not start: {failures:#?}");
    }

    fn try_start(prefix: &str) -> Result<Self, String> {
        let dir = tempfile::Builder::new()
            .prefix("postroom-nats-cluster-")
            .tempdir()
            .expect("temporary directory");
        let nodes = (0..3)
            .map(|i| Node {
                name: format!("{prefix}-{i}"),
                client_port: free_port(),
                route_port: free_port(),
                monitor_port: free_port(),
                child: None,
            })
            .collect();
        let mut cluster = Self { dir, nodes };
        for i in 0..3 {
            cluster.write_config(i);
            cluster.spawn(i);
        }
        for i in 0..3 {
            cluster.wait_healthy(i)?;
        }
        Ok(cluster)
    }

    /// The client URL of node `i`.
    #[must_use]
    pub fn url(&self, i: usize) -> String {
        format!("nats://127.0.0.1:{}", self.nodes[i].client_port)
    }

    /// The client URLs of every node, comma-separated (a client that fails over between
    /// them).
    #[must_use]
    pub fn urls(&self) -> String {
        (0..self.nodes.len())
            .map(|i| self.url(i))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The `server_name` of node `i`.
    #[must_use]
    pub fn server_name(&self, i: usize) -> &str {
        &self.nodes[i].name
    }

    /// The node whose `server_name` is `name`.
    #[must_use]
    pub fn node_named(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// SIGKILL node `i` (its store stays).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.nodes[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start node `i` again on its ports and store and wait until it is healthy.
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.spawn(i);
        if let Err(e) = self.wait_healthy(i) {
            panic!("{e}");
        }
    }

    fn config_path(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("{}.conf", self.nodes[i].name))
    }

    fn write_config(&self, i: usize) {
        let n = &self.nodes[i];
        let store = self.dir.path().join(&n.name);
        let routes: Vec<String> = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, o)| format!("\"nats-route://127.0.0.1:{}\"", o.route_port))
            .collect();
        let text = format!(
            "server_name: \"{name}\"\nlisten: \"127.0.0.1:{client}\"\nhttp: \"127.0.0.1:{monitor}\"\n\
             jetstream {{ store_dir: \"{store}\" }}\n\
             cluster {{\n  name: \"postroom\"\n  listen: \"127.0.0.1:{route}\"\n  routes: [{routes}]\n}}\n",
            name = n.name,
            client = n.client_port,
            monitor = n.monitor_port,
            store = store.display(),
            route = n.route_port,
            routes = routes.join(", "),
        );
        std::fs::write(self.config_path(i), text).expect("write the node's configuration");
    }

    fn log_path(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("{}.log", self.nodes[i].name))
    }

    fn spawn(&mut self, i: usize) {
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(self.log_path(i))
            .expect("node log file");
        let child = Command::new(binary())
            .arg("-c")
            .arg(self.config_path(i))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", binary().display()));
        self.nodes[i].child = Some(child);
    }

    /// Wait until the monitoring endpoint of node `i` answers `/healthz` with 200; when it
    /// does not, say why, with the end of the node's log.
    fn wait_healthy(&mut self, i: usize) -> Result<(), String> {
        let end = Instant::now() + BOOT_LIMIT;
        let mut last = String::new();
        while Instant::now() < end {
            match healthz(self.nodes[i].monitor_port) {
                Ok(200) => return Ok(()),
                Ok(code) => last = format!("status {code}"),
                Err(e) => last = e.to_string(),
            }
            if let Some(Ok(Some(status))) = self.nodes[i].child.as_mut().map(Child::try_wait) {
                last = format!("it exited: {status}");
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let log = std::fs::read_to_string(self.log_path(i)).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(5).collect();
        Err(format!(
            "NATS node {} was not healthy within {BOOT_LIMIT:?} ({last}); its log ends: {:?}",
            self.nodes[i].name,
            tail.into_iter().rev().collect::<Vec<_>>()
        ))
    }
}

/// The HTTP status of `GET /healthz` on the monitoring port.
pub(crate) fn healthz(port: u16) -> std::io::Result<u16> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.write_all(b"GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head)?;
    std::str::from_utf8(&head[9..12])
        .ok()
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other("not an HTTP status line"))
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
    }
}
