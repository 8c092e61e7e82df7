//! A Kafka test broker: librdkafka's mock cluster, run as a process of its own.
//!
//! `postroom-kafka-mock [BROKERS]` holds a cluster of `BROKERS` brokers (default 3), each on a
//! loopback port of its own, and prints `bootstrap <host:port,…>` on its first line. It then
//! reads one command a line on standard input and answers each with `ok` or `error <why>`:
//!
//! | command | what |
//! |---|---|
//! | `create-topic <topic> <partitions> <replication>` | make a topic (the mock has no CreateTopics) |
//! | `leader <topic> <partition> <broker-id>` | move a partition's leader (none: the mock of librdkafka 2.12.1 crashes on a produce to a partition without one) |
//! | `coordinator <group> <broker-id>` | make a broker the coordinator of a consumer group |
//! | `down <broker-id>`, `up <broker-id>` | take a broker down (its connections are closed and refused) and up |
//! | `request-errors <api> <code>…` | the next requests of `api` (`Produce`, `Fetch`, `OffsetCommit`, …) fail with these Kafka error codes, one each |
//! | `clear-request-errors <api>` | forget the errors still queued for `api` |
//! | `topic-error <topic> <code>` | metadata answers `code` for the topic (0 clears) |
//! | `rtt <broker-id> <ms>` | delay every answer of a broker |
//!
//! It ends when standard input closes, so a test that dies takes its broker with it. The
//! mock keeps everything in memory; it has no TLS and no SASL.

use rdkafka::mocking::{MockCluster, MockCoordinator};
use rdkafka::producer::DefaultProducerContext;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use std::io::{BufRead, Write};
use std::time::Duration;

fn main() {
    let brokers = match std::env::args().nth(1).map(|a| a.parse::<i32>()) {
        None => 3,
        Some(Ok(n)) if (1..=16).contains(&n) => n,
        Some(_) => {
            eprintln!("usage: postroom-kafka-mock [BROKERS] (1 to 16, default 3)");
            std::process::exit(2);
        }
    };
    let cluster = match MockCluster::new(brokers) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("postroom-kafka-mock: cannot start the mock cluster: {e}");
            std::process::exit(1);
        }
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "bootstrap {}", cluster.bootstrap_servers());
    let _ = out.flush();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let answer = match run(&cluster, &line) {
            Ok(()) => "ok".to_string(),
            Err(why) => format!("error {why}"),
        };
        if writeln!(out, "{answer}")
            .and_then(|()| out.flush())
            .is_err()
        {
            break;
        }
    }
}

/// Carry out one command line.
fn run(cluster: &MockCluster<'static, DefaultProducerContext>, line: &str) -> Result<(), String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let int = |i: usize| -> Result<i32, String> {
        let w = words.get(i).ok_or("a number is missing")?;
        w.parse::<i32>()
            .map_err(|_| format!("{w:?} is not a number"))
    };
    let word = |i: usize| -> Result<&str, String> {
        words
            .get(i)
            .copied()
            .ok_or_else(|| "a name is missing".to_string())
    };
    let done = |r: rdkafka::error::KafkaResult<()>| r.map_err(|e| e.to_string());
    match words.first().copied() {
        Some("create-topic") => done(cluster.create_topic(word(1)?, int(2)?, int(3)?)),
        Some("leader") => done(cluster.partition_leader(word(1)?, int(2)?, Some(int(3)?))),
        Some("coordinator") => {
            done(cluster.coordinator(MockCoordinator::Group(word(1)?.to_string()), int(2)?))
        }
        Some("down") => done(cluster.broker_down(int(1)?)),
        Some("up") => done(cluster.broker_up(int(1)?)),
        Some("request-errors") => {
            let api = api_key(word(1)?)?;
            let codes = (2..words.len())
                .map(|i| int(i).and_then(error_code))
                .collect::<Result<Vec<_>, _>>()?;
            if codes.is_empty() {
                return Err("no error codes given".into());
            }
            cluster.request_errors(api, &codes);
            Ok(())
        }
        Some("clear-request-errors") => {
            cluster.clear_request_errors(api_key(word(1)?)?);
            Ok(())
        }
        Some("topic-error") => done(cluster.topic_error(word(1)?, error_code(int(2)?)?)),
        Some("rtt") => {
            let ms = u64::try_from(int(2)?).map_err(|_| "a delay is not negative".to_string())?;
            done(cluster.broker_round_trip_time(int(1)?, Duration::from_millis(ms)))
        }
        Some(other) => Err(format!("unknown command {other:?}")),
        None => Err("empty command".into()),
    }
}

/// A Kafka error code (`6`: NOT_LEADER_OR_FOLLOWER, …) as librdkafka's enum.
fn error_code(code: i32) -> Result<RDKafkaRespErr, String> {
    RDKafkaRespErr::try_from(code).map_err(|_| format!("{code} is not a Kafka error code"))
}

/// The request kinds a test may make fail.
fn api_key(name: &str) -> Result<RDKafkaApiKey, String> {
    Ok(match name {
        "Produce" => RDKafkaApiKey::Produce,
        "Fetch" => RDKafkaApiKey::Fetch,
        "ListOffsets" => RDKafkaApiKey::ListOffsets,
        "Metadata" => RDKafkaApiKey::Metadata,
        "OffsetCommit" => RDKafkaApiKey::OffsetCommit,
        "OffsetFetch" => RDKafkaApiKey::OffsetFetch,
        "FindCoordinator" => RDKafkaApiKey::FindCoordinator,
        "JoinGroup" => RDKafkaApiKey::JoinGroup,
        "Heartbeat" => RDKafkaApiKey::Heartbeat,
        "LeaveGroup" => RDKafkaApiKey::LeaveGroup,
        "SyncGroup" => RDKafkaApiKey::SyncGroup,
        "InitProducerId" => RDKafkaApiKey::InitProducerId,
        other => return Err(format!("unknown request kind {other:?}")),
    })
}
