//! A RabbitMQ node of a test's own: its own name, ports (AMQP, management API, distribution),
//! data directory and Erlang cookie, so a test can block its publishers with a memory alarm or
//! kill it with SIGKILL and start it again without touching the shared broker. Killed and
//! removed on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const SBIN: &str = "/usr/lib/rabbitmq/bin";

/// A port below the kernel's ephemeral range (a node starting again must find its port free,
/// not taken by some outgoing connection) that nobody listens on now.
fn free_port() -> u16 {
    for _ in 0..200 {
        let port = 20_000 + (rand::random::<u16>() % 10_000);
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in 20000..30000");
}

/// A RabbitMQ node owned by one test.
pub struct OwnRabbit {
    dir: tempfile::TempDir,
    /// Node name.
    pub name: String,
    /// AMQP port.
    pub amqp_port: u16,
    /// Management API port.
    pub api_port: u16,
    dist_port: u16,
    server: Mutex<Option<Child>>,
}

impl OwnRabbit {
    /// Start a fresh node with the management plugin; waits until it is up.
    pub fn start() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("postroom-rabbit-")
            .tempdir()
            .unwrap();
        let (amqp_port, api_port, dist_port) = (free_port(), free_port(), free_port());
        let node = Self {
            name: format!(
                "prt{}@localhost",
                &uuid::Uuid::now_v7().simple().to_string()[20..]
            ),
            amqp_port,
            api_port,
            dist_port,
            server: Mutex::new(None),
            dir,
        };
        let d = node.dir.path();
        std::fs::create_dir_all(d.join("home")).unwrap();
        let cookie = d.join("home/.erlang.cookie");
        std::fs::write(
            &cookie,
            format!("POSTROOM{}", uuid::Uuid::now_v7().simple()),
        )
        .unwrap();
        let ok = Command::new("chmod")
            .arg("400")
            .arg(&cookie)
            .status()
            .unwrap();
        assert!(ok.success());
        std::fs::write(d.join("enabled_plugins"), "[rabbitmq_management].\n").unwrap();
        std::fs::write(d.join("env.conf"), "").unwrap();
        std::fs::write(
            d.join("rabbitmq.conf"),
            format!(
                "listeners.tcp.default = 127.0.0.1:{amqp_port}\nmanagement.tcp.port = {api_port}\nmanagement.tcp.ip = 127.0.0.1\nloopback_users = none\n"
            ),
        )
        .unwrap();
        node.launch();
        node
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn launch(&self) {
        let log = std::fs::File::create(self.path("server.out")).unwrap();
        let child = Command::new(format!("{SBIN}/rabbitmq-server"))
            .env("HOME", self.path("home"))
            .env("RABBITMQ_CONF_ENV_FILE", self.path("env.conf"))
            .env("RABBITMQ_NODENAME", &self.name)
            .env("RABBITMQ_DIST_PORT", self.dist_port.to_string())
            .env("RABBITMQ_MNESIA_BASE", self.path("mnesia"))
            .env("RABBITMQ_LOG_BASE", self.path("log"))
            .env("RABBITMQ_CONFIG_FILE", self.path("rabbitmq.conf"))
            .env(
                "RABBITMQ_ENABLED_PLUGINS_FILE",
                self.path("enabled_plugins"),
            )
            .env("RABBITMQ_PID_FILE", self.path("pid"))
            .env(
                "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS",
                "-kernel inet_dist_use_interface {127,0,0,1}",
            )
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start rabbitmq-server");
        *self.server.lock().unwrap() = Some(child);
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if self
                .ctl(&["await_startup", "--timeout", "10"])
                .status
                .success()
            {
                break;
            }
            let exited = self
                .server
                .lock()
                .unwrap()
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            assert!(
                exited.is_none() && Instant::now() < deadline,
                "the RabbitMQ node did not start: {}",
                std::fs::read_to_string(self.path("server.out")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
        // The management listener comes up with the node; wait for it to answer.
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", self.api_port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "the management API did not start"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Run `rabbitmqctl` against this node.
    pub fn ctl(&self, args: &[&str]) -> Output {
        Command::new(format!("{SBIN}/rabbitmqctl"))
            .env("HOME", self.path("home"))
            .args(["-n", &self.name])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run rabbitmqctl")
    }

    /// `rabbitmqctl` output as text; panics when the command fails.
    pub fn ctl_text(&self, args: &[&str]) -> String {
        let out = self.ctl(args);
        assert!(
            out.status.success(),
            "rabbitmqctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Messages in `queue` (ready and unacknowledged), asked of the node itself (not over
    /// AMQP, which an alarm may block).
    pub fn queue_messages(&self, queue: &str) -> Option<u64> {
        self.ctl_text(&[
            "list_queues",
            "-q",
            "--no-table-headers",
            "name",
            "messages",
        ])
        .lines()
        .find_map(|l| {
            let mut parts = l.split_whitespace();
            (parts.next()? == queue).then(|| parts.next()?.parse().ok())?
        })
    }

    /// The node's operating-system process id.
    pub fn pid(&self) -> u32 {
        std::fs::read_to_string(self.path("pid"))
            .expect("pid file: the node is running")
            .trim()
            .parse()
            .expect("a pid")
    }

    /// SIGKILL the node (a crash, not a shutdown) and wait until it and its port are gone.
    pub fn kill(&self) {
        let pid = self.pid();
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::path::Path::new(&format!("/proc/{pid}")).exists()
            || std::net::TcpListener::bind(("127.0.0.1", self.amqp_port)).is_err()
        {
            assert!(
                Instant::now() < deadline,
                "the RabbitMQ node survived SIGKILL"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Some(mut c) = self.server.lock().unwrap().take() {
            let _ = c.wait();
        }
        let _ = std::fs::remove_file(self.path("pid"));
    }

    /// Start the node again on the same data (after [`kill`](Self::kill)).
    pub fn start_again(&self) {
        self.launch();
    }

    /// The AMQP URL.
    pub fn amqp_url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.amqp_port)
    }

    /// The management API URL.
    pub fn api_url(&self) -> String {
        format!("http://guest:guest@127.0.0.1:{}", self.api_port)
    }
}

impl Drop for OwnRabbit {
    fn drop(&mut self) {
        if let Ok(text) = std::fs::read_to_string(self.path("pid"))
            && let Ok(pid) = text.trim().parse::<u32>()
        {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
        if let Some(mut c) = self.server.lock().unwrap().take() {
            let _ = c.wait();
        }
    }
}
