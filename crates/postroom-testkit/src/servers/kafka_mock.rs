//! A Kafka cluster of a test's own: librdkafka's mock cluster in a process of its own
//! (`postroom-kafka-mock`, built with `postroom-kafka`), several brokers on loopback ports,
//! driven by commands on its standard input: move a partition's leader, take a broker down
//! and up, make the next requests of a kind fail. It stops when dropped, and by itself when
//! the test process dies (its standard input closes).
//!
//! The mock speaks Kafka as librdkafka expects (consumer groups, offset commits, the
//! idempotent producer) but has no admin API: topics are made with
//! [`KafkaMockCluster::create_topic`] (or by the broker on first use, with 4 partitions).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Mutex;

/// The mock broker program: `POSTROOM_KAFKA_MOCK` when set, else `built` (a test of
/// `postroom-kafka` passes `env!("CARGO_BIN_EXE_postroom-kafka-mock")`).
#[must_use]
pub fn program(built: &str) -> PathBuf {
    std::env::var_os("POSTROOM_KAFKA_MOCK").map_or_else(|| PathBuf::from(built), PathBuf::from)
}

/// A running mock cluster.
pub struct KafkaMockCluster {
    child: Child,
    io: Mutex<(ChildStdin, BufReader<ChildStdout>)>,
    bootstrap: String,
}

impl KafkaMockCluster {
    /// Start `program` with `brokers` brokers; a program that cannot start fails the test.
    #[must_use]
    pub fn start(program: &Path, brokers: u32) -> Self {
        let mut child = Command::new(program)
            .arg(brokers.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "start the Kafka mock cluster {} (built by `cargo build -p postroom-kafka`): {e}",
                    program.display()
                )
            });
        let stdin = child.stdin.take().expect("piped stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut first = String::new();
        stdout
            .read_line(&mut first)
            .expect("the mock cluster's first line");
        let bootstrap = first
            .trim()
            .strip_prefix("bootstrap ")
            .unwrap_or_else(|| panic!("the mock cluster said {first:?}, not its bootstrap servers"))
            .to_string();
        Self {
            child,
            io: Mutex::new((stdin, stdout)),
            bootstrap,
        }
    }

    /// Its brokers, `host:port,…` (broker ids 1, 2, … in this order).
    #[must_use]
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// Send one command and wait for its answer: `Err` with the mock's reason when refused.
    pub fn command(&self, line: &str) -> Result<(), String> {
        let mut io = self
            .io
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        writeln!(io.0, "{line}")
            .and_then(|()| io.0.flush())
            .map_err(|e| format!("the mock cluster is gone: {e}"))?;
        let mut answer = String::new();
        io.1.read_line(&mut answer)
            .map_err(|e| format!("the mock cluster is gone: {e}"))?;
        match answer.trim() {
            "ok" => Ok(()),
            other => Err(other.strip_prefix("error ").unwrap_or(other).to_string()),
        }
    }

    fn must(&self, line: &str) {
        self.command(line)
            .unwrap_or_else(|e| panic!("mock cluster command {line:?}: {e}"));
    }

    /// Make topic `topic`.
    pub fn create_topic(&self, topic: &str, partitions: i32, replication: i32) {
        self.must(&format!("create-topic {topic} {partitions} {replication}"));
    }

    /// Make `broker` the leader of `topic`'s `partition`.
    pub fn move_leader(&self, topic: &str, partition: i32, broker: i32) {
        self.must(&format!("leader {topic} {partition} {broker}"));
    }

    /// Make `broker` the coordinator of consumer group `group`.
    pub fn coordinator(&self, group: &str, broker: i32) {
        self.must(&format!("coordinator {group} {broker}"));
    }

    /// Take `broker` down: its connections are closed and new ones refused.
    pub fn broker_down(&self, broker: i32) {
        self.must(&format!("down {broker}"));
    }

    /// Bring `broker` up again.
    pub fn broker_up(&self, broker: i32) {
        self.must(&format!("up {broker}"));
    }

    /// The next requests of kind `api` (`Produce`, `OffsetCommit`, …) fail with these Kafka
    /// error codes, one request each.
    pub fn fail_requests(&self, api: &str, codes: &[i32]) {
        let codes: Vec<String> = codes.iter().map(i32::to_string).collect();
        self.must(&format!("request-errors {api} {}", codes.join(" ")));
    }

    /// Metadata answers error `code` for `topic` (0: no error again).
    pub fn topic_error(&self, topic: &str, code: i32) {
        self.must(&format!("topic-error {topic} {code}"));
    }
}

impl Drop for KafkaMockCluster {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
