//! Settings of one workload on Kafka: where the brokers are, the workload prefix of its topic
//! and group names, the retry ladder (one topic per stage), how topics are created, and the
//! ordering policy of retries.

use crate::security::KafkaSecurity;
use postroom_core::{Error, ErrorKind, Result, RetryLadder};
use std::time::Duration;

/// How a failed record of a partition is retried, and so what happens to the order of the
/// records after it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RetryOrdering {
    /// The failed record goes to a retry topic and the partition flows on: later records of
    /// its key may overtake it, and the handler's version guard keeps the state in order.
    #[default]
    RetryTopics,
    /// The partition does not advance until the failed record succeeds or is parked: one
    /// record of a partition in flight at a time, the retry delay kept by pausing the
    /// partition (no retry topic). Strict order, at the price of a stalled partition.
    Blocking,
    /// Retry topics, but once a key has a record in the retry path, later records of that key
    /// follow it there (in order, behind it) instead of overtaking it; other keys keep
    /// flowing. The chain of a key lives in the consumer process: after a restart a copy
    /// waiting in a retry topic is handled when due, with the version guard as the backstop.
    PerKeyRetry,
}

/// Who makes the workload's topics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TopicProvisioning {
    /// postroom creates missing topics through the admin API (CreateTopics) with the
    /// configured partitions, replication and retention.
    #[default]
    Create,
    /// An operator provisions them (the application may not create topics, or the broker has
    /// no admin API): postroom creates nothing and checks that every topic exists with at
    /// least the configured partitions, and a delivery ledger with exactly one.
    Existing,
}

/// One workload on a Kafka cluster.
#[derive(Clone, Debug)]
pub struct KafkaConfig {
    /// `bootstrap.servers`: `host:port[,host:port…]`.
    pub brokers: String,
    /// Workload prefix of topic and group names (`shop` → topic `shop.order.created`, group
    /// `shop.inventory`); empty: none.
    pub prefix: String,
    /// Delays of the retry stages: one topic `<group>.retry.<delay>` each.
    pub ladder: RetryLadder,
    /// Partitions of topics created by postroom.
    pub partitions: i32,
    /// Replication factor of topics created by postroom.
    pub replication: i32,
    /// `retention.ms` of the topics created by postroom (`None`: the broker's default).
    pub retention: Option<Duration>,
    /// How long a revoked partition's in-flight records may take to settle before their work is
    /// abandoned (they are then delivered again to the partition's new owner).
    pub revoke_wait: Duration,
    /// `session.timeout.ms` of consumers.
    pub session_timeout: Duration,
    /// How often stored offsets are committed.
    pub commit_interval: Duration,
    /// Retry ordering policy of consumers.
    pub ordering: RetryOrdering,
    /// Who makes the workload's topics.
    pub topics: TopicProvisioning,
    /// TLS and SASL of every client.
    pub security: KafkaSecurity,
    /// Extra librdkafka properties for every client (tuning), set after the security ones.
    pub extra: Vec<(String, String)>,
}

postroom_core::setters!(KafkaConfig {
    /// Set the ladder.
    ladder: RetryLadder,
    /// Set the partitions of created topics.
    partitions: i32,
    /// Set the retry ordering policy.
    ordering: RetryOrdering,
});

impl KafkaConfig {
    /// A workload on `brokers` in plaintext, no prefix, the default ladder, topics of three
    /// partitions (so that keys spread and per-key order is what holds), replication 1.
    #[must_use]
    pub fn new(brokers: impl Into<String>) -> Self {
        Self {
            brokers: brokers.into(),
            prefix: String::new(),
            ladder: RetryLadder::default(),
            partitions: 3,
            replication: 1,
            retention: None,
            revoke_wait: Duration::from_secs(10),
            session_timeout: Duration::from_secs(10),
            commit_interval: Duration::from_millis(200),
            ordering: RetryOrdering::RetryTopics,
            topics: TopicProvisioning::Create,
            security: KafkaSecurity::default(),
            extra: Vec::new(),
        }
    }

    /// Set the workload prefix.
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Refuse settings that cannot work.
    pub fn validate(&self) -> Result<()> {
        if self.brokers.trim().is_empty() {
            return Err(Error::new(ErrorKind::Config, "no Kafka brokers given"));
        }
        if self.partitions < 1 || self.replication < 1 {
            return Err(Error::new(
                ErrorKind::Config,
                "partitions and replication factor must be at least 1",
            ));
        }
        if let Some(bad) = self.prefix.chars().find(|c| !valid_topic_char(*c)) {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "the prefix {:?} has {bad:?}: Kafka names take letters, digits, '.', '_' and '-'",
                    self.prefix
                ),
            ));
        }
        self.security.validate()
    }

    /// Set the security settings.
    #[must_use]
    pub fn security(mut self, security: KafkaSecurity) -> Self {
        self.security = security;
        self
    }

    /// The librdkafka client settings shared by every client of this workload (brokers,
    /// client id, security, the extra properties).
    #[must_use]
    pub fn client_config(&self) -> rdkafka::ClientConfig {
        self.client()
    }

    pub(crate) fn client(&self) -> rdkafka::ClientConfig {
        let mut c = rdkafka::ClientConfig::new();
        c.set("bootstrap.servers", &self.brokers);
        c.set("client.id", "postroom");
        self.security.apply(&mut c);
        for (k, v) in &self.extra {
            c.set(k, v);
        }
        // librdkafka writes its own log lines straight to stderr, in a format of its own
        // (`%3|<time>|FAIL|…`; rdkafka asks it for no log events), past postroom's log filter
        // and JSON output, so they are off. postroom says what failed in its own words: an
        // operation that fails carries librdkafka's error ("reading the cluster's topics: …
        // BrokerTransportFailure"), and the error events a client polls go through postroom's
        // logging (the consumer's context; rdkafka's default one through the `log` bridge).
        // When librdkafka's `debug` contexts are asked for, its debug lines are what the user
        // wants to see: they stay on.
        let debugging = self.extra.iter().any(|(k, _)| k == "debug");
        let level = if debugging {
            rdkafka::config::RDKafkaLogLevel::Debug
        } else {
            rdkafka::config::RDKafkaLogLevel::Emerg
        };
        // Both: rdkafka applies its level only once the client exists, and by then the
        // client's broker threads may already have logged a refused connection at
        // librdkafka's default level; the `log_level` property is there from the start.
        c.set("log_level", (level as i32).to_string());
        c.set_log_level(level);
        c
    }
}

/// Whether Kafka accepts `c` in a topic name.
#[must_use]
pub fn valid_topic_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::producer::BaseProducer;

    const CHILD: &str = "POSTROOM_KAFKA_LOG_CHILD";

    /// librdkafka's own log lines never reach stderr, not even those its broker threads write
    /// in the instant after a client is created: the level is part of the configuration the
    /// client starts with, not only set once it exists. A broker that refuses at once (on
    /// port 1) makes those first lines come as early as they can; the clients are created in
    /// a child process, whose stderr is what a user of the CLI would see.
    #[test]
    fn clients_of_a_broker_that_refuses_write_nothing_of_their_own_to_stderr() {
        if std::env::var_os(CHILD).is_some() {
            let config = KafkaConfig::new("127.0.0.1:1");
            for _ in 0..40 {
                let _producer: BaseProducer = config.client().create().expect("a client");
                std::thread::sleep(Duration::from_millis(20));
            }
            return;
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "config::tests::clients_of_a_broker_that_refuses_write_nothing_of_their_own_to_stderr",
                "--exact",
                "--nocapture",
            ])
            .env(CHILD, "1")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "the child failed: {err}");
        assert!(
            !err.lines().any(|l| l.starts_with('%')),
            "a raw librdkafka line on stderr: {err}"
        );
    }
}
