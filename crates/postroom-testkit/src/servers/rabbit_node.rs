//! A RabbitMQ node a test starts for itself, beside the shared one: its own node name
//! (`<prefix>-<random>@localhost`), ports, data, log and Erlang cookie in a temporary
//! directory, started with `rabbitmq-server -detached` and stopped with `rabbitmqctl stop` on
//! drop (also when the test panics; its process is killed by id when the stop fails). The
//! node offers AMQP over TLS and, when asked, the management API over https only, both with a
//! certificate made in the test.
//!
//! The scripts are run directly (`/usr/lib/rabbitmq/bin`, or `POSTROOM_RABBITMQ_BIN`), as the
//! test's own user: the Debian wrappers in `/usr/sbin` would switch to the `rabbitmq` user,
//! which cannot read the test's files. The shared environment file
//! (`/etc/rabbitmq/rabbitmq-env.conf`) and enabled plugins are replaced by the node's own.

use super::free_port;
use super::test_ca::{ServerCert, TestCa};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// How long a node may take to boot before the test fails.
const BOOT_LIMIT: Duration = Duration::from_secs(120);

/// A running node of one's own.
pub struct RabbitNode {
    dir: tempfile::TempDir,
    bin: PathBuf,
    name: String,
    amqp_port: u16,
    amqps_port: u16,
    dist_port: u16,
    management_port: Option<u16>,
}

postroom_core::debug_showing!(RabbitNode { name, amqps_port });

fn bin_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("POSTROOM_RABBITMQ_BIN") {
        return PathBuf::from(dir);
    }
    let debian = PathBuf::from("/usr/lib/rabbitmq/bin");
    if debian.join("rabbitmq-server").exists() {
        return debian;
    }
    panic!("RabbitMQ's scripts are not in /usr/lib/rabbitmq/bin: set POSTROOM_RABBITMQ_BIN");
}

/// A free port for Erlang distribution low enough that the command-line tools' own range
/// (10000 above it) stays below 65536.
fn dist_port() -> u16 {
    loop {
        let p = free_port();
        if p < 55_000 {
            return p;
        }
    }
}

fn port_open(port: u16) -> bool {
    TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(500),
    )
    .is_ok()
}

impl RabbitNode {
    /// Start a node named `<prefix>-<random>@localhost` with an AMQP TLS listener using
    /// `cert` (signed by `ca`), a plain AMQP listener (both on loopback and free ports), user
    /// `guest`/`guest`, and, with `management`, the management API over https only. Returns
    /// once every listener accepts connections.
    #[must_use]
    pub fn start_tls(prefix: &str, ca: &TestCa, cert: &ServerCert, management: bool) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("postroom-rabbit-")
            .tempdir()
            .expect("temporary directory");
        let node = Self {
            bin: bin_dir(),
            name: format!("{prefix}-{}@localhost", super::suffix()),
            amqp_port: free_port(),
            amqps_port: free_port(),
            dist_port: dist_port(),
            management_port: management.then(free_port),
            dir,
        };
        let d = node.dir.path();
        for sub in ["home", "mnesia", "log"] {
            std::fs::create_dir(d.join(sub)).expect("node directory");
        }
        let ca_file = ca.write_cert(d, "ca.pem");
        let crt = d.join("server.crt");
        let key = d.join("server.key");
        std::fs::write(&crt, &cert.cert_pem).expect("write the certificate");
        write_private(&key, &cert.key_pem);
        let tls_files = |scope: &str| {
            format!(
                "{scope}.cacertfile = {}\n{scope}.certfile = {}\n{scope}.keyfile = {}\n",
                ca_file.display(),
                crt.display(),
                key.display()
            )
        };
        let mut conf = format!(
            "listeners.tcp.default = 127.0.0.1:{}\nlisteners.ssl.default = 127.0.0.1:{}\n\
             ssl_options.verify = verify_none\nssl_options.fail_if_no_peer_cert = false\n{}",
            node.amqp_port,
            node.amqps_port,
            tls_files("ssl_options")
        );
        if let Some(port) = node.management_port {
            conf.push_str(&format!(
                "management.ssl.port = {port}\nmanagement.ssl.ip = 127.0.0.1\n{}",
                tls_files("management.ssl")
            ));
        }
        std::fs::write(d.join("rabbitmq.conf"), conf).expect("write rabbitmq.conf");
        let plugins = if management {
            "[rabbitmq_management]."
        } else {
            "[]."
        };
        std::fs::write(d.join("enabled_plugins"), plugins).expect("write enabled_plugins");
        std::fs::write(
            d.join("rabbitmq-env.conf"),
            "ERL_EPMD_ADDRESS=127.0.0.1\n\
             export ERL_FLAGS=\"-kernel inet_dist_use_interface {127,0,0,1}\"\n",
        )
        .expect("write rabbitmq-env.conf");
        let out = node
            .command("rabbitmq-server")
            .arg("-detached")
            .output()
            .expect("run rabbitmq-server");
        assert!(
            out.status.success(),
            "rabbitmq-server -detached failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut ports = vec![node.amqps_port, node.amqp_port];
        ports.extend(node.management_port);
        let started = Instant::now();
        while !ports.iter().all(|p| port_open(*p)) {
            if started.elapsed() > BOOT_LIMIT {
                panic!(
                    "the test node {} did not open ports {ports:?} within {BOOT_LIMIT:?}:\n{}",
                    node.name,
                    node.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        node
    }

    fn command(&self, script: &str) -> Command {
        let d = self.dir.path();
        let mut c = Command::new(self.bin.join(script));
        c.current_dir(d)
            .env("HOME", d.join("home"))
            .env("RABBITMQ_NODENAME", &self.name)
            .env("RABBITMQ_NODE_PORT", self.amqp_port.to_string())
            .env("RABBITMQ_DIST_PORT", self.dist_port.to_string())
            .env("RABBITMQ_MNESIA_BASE", d.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", d.join("log"))
            .env("RABBITMQ_CONFIG_FILE", d.join("rabbitmq.conf"))
            .env("RABBITMQ_ADVANCED_CONFIG_FILE", d.join("advanced.config"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", d.join("enabled_plugins"))
            .env("RABBITMQ_CONF_ENV_FILE", d.join("rabbitmq-env.conf"))
            .env("RABBITMQ_PID_FILE", d.join("pid"));
        c
    }

    fn log_tail(&self) -> String {
        let log = self
            .dir
            .path()
            .join("log")
            .join(format!("{}.log", self.name));
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let start = text.len().saturating_sub(4000);
        let start = (start..text.len())
            .find(|i| text.is_char_boundary(*i))
            .unwrap_or(text.len());
        text[start..].to_string()
    }

    /// The node's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The AMQP-over-TLS port.
    #[must_use]
    pub fn amqps_port(&self) -> u16 {
        self.amqps_port
    }

    /// The plain AMQP port.
    #[must_use]
    pub fn amqp_port(&self) -> u16 {
        self.amqp_port
    }

    /// The management API's https port, when it was asked for.
    #[must_use]
    pub fn management_port(&self) -> Option<u16> {
        self.management_port
    }

    /// A directory for the test's own files (CA certificates), removed with the node.
    #[must_use]
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

fn write_private(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).expect("write a key");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod 600");
}

impl Drop for RabbitNode {
    fn drop(&mut self) {
        let pid_file = self.dir.path().join("pid");
        let stopped = self
            .command("rabbitmqctl")
            .args(["-n", &self.name, "stop"])
            .arg(&pid_file)
            .output()
            .is_ok_and(|o| o.status.success());
        if !stopped && let Ok(pid) = std::fs::read_to_string(&pid_file) {
            let pid = pid.trim();
            if !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()) {
                eprintln!("rabbitmqctl stop failed for {}: killing {pid}", self.name);
                let _ = Command::new("kill").args(["-KILL", pid]).status();
            }
        }
    }
}
