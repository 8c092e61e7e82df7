//! The limits a topology stays within: what RabbitMQ can carry (names and routing keys are AMQP
//! short strings of at most 255 bytes; a message TTL is at most 2^32 - 1 ms), and a size that
//! keeps planning it bounded — a topology file of a few kilobytes must not plan millions of
//! queues.

use super::TopologyConfig;
use crate::naming::ConsumerNames;
use postroom_core::{Error, ErrorKind, Result};
use std::time::Duration;

/// Most delay stages in a ladder (each is a queue of every consumer).
pub const MAX_STAGES: usize = 32;
/// Most partitions of one consumer.
pub const MAX_PARTITIONS: u16 = 1024;
/// Most queues in one workload: work or partition queues, stage queues and parking queues of
/// every consumer.
pub const MAX_QUEUES: usize = 10_000;
/// Longest stage delay: RabbitMQ's longest message TTL.
pub const MAX_STAGE_DELAY: Duration = Duration::from_millis(u32::MAX as u64);
/// Longest queue, exchange or routing key name (an AMQP short string).
pub const MAX_NAME_BYTES: usize = 255;

fn refuse(message: String) -> Result<()> {
    Err(Error::new(ErrorKind::Config, message))
}

fn name(what: &str, text: &str) -> Result<()> {
    if text.len() > MAX_NAME_BYTES {
        return refuse(format!(
            "{what} is {} bytes long; AMQP names and routing keys hold at most {MAX_NAME_BYTES}",
            text.len()
        ));
    }
    Ok(())
}

/// Check `cfg` against the limits above.
pub(super) fn check(cfg: &TopologyConfig) -> Result<()> {
    if cfg.ladder.len() > MAX_STAGES {
        return refuse(format!(
            "the ladder has {} stages; at most {MAX_STAGES}",
            cfg.ladder.len()
        ));
    }
    if let Some(d) = cfg.ladder.delays().iter().find(|d| **d > MAX_STAGE_DELAY) {
        return refuse(format!(
            "the ladder stage of {} ms is longer than RabbitMQ's longest message TTL ({} ms)",
            d.as_millis(),
            MAX_STAGE_DELAY.as_millis()
        ));
    }
    name("the work exchange name", &cfg.exchange)?;
    let stages = crate::topology::desired::stages(cfg);
    let mut queues = 0usize;
    for c in &cfg.consumers {
        if c.partitions > MAX_PARTITIONS {
            return refuse(format!(
                "consumer {:?} has {} partitions; at most {MAX_PARTITIONS}",
                c.name, c.partitions
            ));
        }
        queues += usize::from(c.partitions.max(1)) + stages.len() + 1;
        if queues > MAX_QUEUES {
            return refuse(format!(
                "the topology would have more than {MAX_QUEUES} queues (each consumer has its \
                 work or partition queues, one per ladder stage and a parking queue)"
            ));
        }
        let n = ConsumerNames::new(&cfg.prefix, &c.name);
        name("a retry exchange name", &n.retry_exchange)?;
        name("a dead-letter exchange name", &n.dlx_exchange)?;
        name("a parking queue name", &n.parking_queue)?;
        for delay in &stages {
            name("a stage queue name", &n.retry_queue(*delay))?;
        }
        if c.partitions > 0 {
            name("a partition exchange name", &n.partition_exchange())?;
            name(
                "a partition queue name",
                &n.partition_queue(c.partitions - 1),
            )?;
        }
        for key in &c.bindings {
            name("a binding key", key)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn consumers(n: usize, extra: &str) -> String {
        (0..n)
            .map(|i| format!("[[consumers]]\nname = \"c{i}\"\n{extra}"))
            .collect()
    }

    #[test]
    fn a_small_file_that_would_plan_millions_of_queues_is_refused() {
        // 40 consumers of 65535 partitions each (15 KB of TOML) made planning allocate
        // gigabytes: the topology fuzz target's memory limit stopped it.
        let text = consumers(40, "partitions = 65535\n");
        let err = TopologyConfig::from_toml(&text).unwrap_err();
        assert!(err.to_string().contains("at most 1024"), "{err}");
        let text = consumers(12, "partitions = 1000\n");
        let err = TopologyConfig::from_toml(&text).unwrap_err();
        assert!(err.to_string().contains("more than 10000 queues"), "{err}");
        let ladder: Vec<String> = (1..=33).map(|i| format!("{i}s")).collect();
        let err =
            TopologyConfig::from_toml(&format!("ladder = \"{}\"\n", ladder.join(","))).unwrap_err();
        assert!(err.to_string().contains("at most 32"), "{err}");
        assert!(TopologyConfig::from_toml(&consumers(3, "partitions = 1024\n")).is_ok());
    }

    #[test]
    fn what_the_broker_cannot_carry_is_refused() {
        let long = "x".repeat(250);
        let err = TopologyConfig::from_toml(&format!("prefix = \"{long}\"\n{}", consumers(1, "")))
            .unwrap_err();
        assert!(err.to_string().contains("at most 255"), "{err}");
        let err = TopologyConfig::from_toml(&format!(
            "[[consumers]]\nname = \"a\"\nbindings = [\"{}\"]\n",
            "k".repeat(256)
        ))
        .unwrap_err();
        assert!(err.to_string().contains("binding key"), "{err}");
        let err = TopologyConfig::from_toml("ladder = \"1s,1200h\"\n").unwrap_err();
        assert!(err.to_string().contains("longest message TTL"), "{err}");
        assert!(TopologyConfig::from_toml("ladder = \"1s,1193h\"\n").is_ok());
    }
}
