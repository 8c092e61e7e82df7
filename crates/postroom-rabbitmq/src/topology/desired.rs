//! The desired state of a workload's topology, computed from its [`TopologyConfig`].

use crate::config::{RetryStyle, TopologyConfig};
use crate::management::PolicyInfo;
use crate::naming::{ConsumerNames, PARKING_KEY};
use postroom_core::message::headers::AGGREGATE_KEY;
use serde_json::{Map, Value, json};

/// An exchange postroom wants.
#[derive(Clone, Debug, PartialEq)]
pub struct ExchangeSpec {
    /// Name.
    pub name: String,
    /// `topic`, `direct` or `x-consistent-hash`.
    pub kind: String,
    /// Declared arguments (`hash-header` of a partition exchange).
    pub arguments: Map<String, Value>,
}

/// A queue postroom wants. Its only argument is `x-queue-type`; the rest comes from policies.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueSpec {
    /// Name.
    pub name: String,
    /// Declared arguments.
    pub arguments: Map<String, Value>,
}

/// A binding postroom wants.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct BindingSpec {
    /// Source exchange.
    pub source: String,
    /// Destination queue (or exchange, when `to_exchange`).
    pub destination: String,
    /// Whether the destination is an exchange.
    pub to_exchange: bool,
    /// Routing key.
    pub key: String,
}

/// Everything a workload needs on the broker.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DesiredTopology {
    /// Exchanges.
    pub exchanges: Vec<ExchangeSpec>,
    /// Queues.
    pub queues: Vec<QueueSpec>,
    /// Bindings.
    pub bindings: Vec<BindingSpec>,
    /// Policies (TTL, dead-lettering, overflow, delivery limit).
    pub policies: Vec<PolicyInfo>,
}

/// The policy name postroom gives to the policy of `queue`.
#[must_use]
pub fn policy_name(queue: &str) -> String {
    format!("postroom:{queue}")
}

/// A regex matching exactly `name`.
#[must_use]
pub fn exact_pattern(name: &str) -> String {
    let mut p = String::from("^");
    for c in name.chars() {
        if "\\.^$|?*+()[]{}".contains(c) {
            p.push('\\');
        }
        p.push(c);
    }
    p.push('$');
    p
}

fn policy(cfg: &TopologyConfig, queue: &str, definition: Value) -> PolicyInfo {
    let Value::Object(definition) = definition else {
        unreachable!("policy definitions are objects")
    };
    PolicyInfo {
        name: policy_name(queue),
        pattern: exact_pattern(queue),
        apply_to: "queues".into(),
        definition,
        priority: cfg.policy_priority,
    }
}

/// The retry stages that exist for `cfg`: every ladder stage for ack+publish, the first
/// (the fixed loop delay) for reject+DLX.
#[must_use]
pub fn stages(cfg: &TopologyConfig) -> Vec<std::time::Duration> {
    match cfg.retry_style {
        RetryStyle::AckPublish => {
            let mut v: Vec<_> = cfg.ladder.delays().to_vec();
            v.dedup();
            v
        }
        RetryStyle::RejectDlx => vec![cfg.ladder.delay(0)],
    }
}

impl DesiredTopology {
    /// The desired state for `cfg`.
    #[must_use]
    pub fn of(cfg: &TopologyConfig) -> Self {
        let mut d = DesiredTopology::default();
        let quorum = || {
            let mut m = Map::new();
            m.insert(
                "x-queue-type".into(),
                Value::String(cfg.queue_type.as_str().into()),
            );
            m
        };
        d.exchanges.push(ExchangeSpec {
            name: cfg.exchange.clone(),
            kind: "topic".into(),
            arguments: Map::new(),
        });
        for c in &cfg.consumers {
            let n = ConsumerNames::new(&cfg.prefix, &c.name);
            d.exchanges.push(ExchangeSpec {
                name: n.retry_exchange.clone(),
                kind: "direct".into(),
                arguments: Map::new(),
            });
            d.exchanges.push(ExchangeSpec {
                name: n.dlx_exchange.clone(),
                kind: "direct".into(),
                arguments: Map::new(),
            });
            let (dlx, dlk) = match cfg.retry_style {
                RetryStyle::AckPublish => (n.dlx_exchange.clone(), PARKING_KEY.to_string()),
                RetryStyle::RejectDlx => (
                    n.retry_exchange.clone(),
                    ConsumerNames::stage_key(cfg.ladder.delay(0)),
                ),
            };
            let work_policy = json!({
                "dead-letter-exchange": dlx,
                "dead-letter-routing-key": dlk,
                "dead-letter-strategy": "at-least-once",
                "overflow": "reject-publish",
                "delivery-limit": cfg.delivery_limit,
            });
            // Where the work arrives: the work queue, or (partitioned) a consistent-hash
            // exchange in front of N single-active-consumer queues. Retries return the same
            // way, so a retried message hashes to the same partition.
            let (entry, entry_is_exchange) = if c.partitions == 0 {
                d.queues.push(QueueSpec {
                    name: n.work_queue.clone(),
                    arguments: quorum(),
                });
                d.policies
                    .push(policy(cfg, &n.work_queue, work_policy.clone()));
                (n.work_queue.clone(), false)
            } else {
                let mut args = Map::new();
                args.insert("hash-header".into(), Value::String(AGGREGATE_KEY.into()));
                d.exchanges.push(ExchangeSpec {
                    name: n.partition_exchange(),
                    kind: "x-consistent-hash".into(),
                    arguments: args,
                });
                for i in 0..c.partitions {
                    let mut qargs = quorum();
                    qargs.insert("x-single-active-consumer".into(), Value::Bool(true));
                    let q = n.partition_queue(i);
                    d.queues.push(QueueSpec {
                        name: q.clone(),
                        arguments: qargs,
                    });
                    d.bindings.push(BindingSpec {
                        source: n.partition_exchange(),
                        destination: q.clone(),
                        to_exchange: false,
                        key: "1".into(),
                    });
                    d.policies.push(policy(cfg, &q, work_policy.clone()));
                }
                (n.partition_exchange(), true)
            };
            for key in &c.bindings {
                d.bindings.push(BindingSpec {
                    source: cfg.exchange.clone(),
                    destination: entry.clone(),
                    to_exchange: entry_is_exchange,
                    key: key.clone(),
                });
            }
            d.bindings.push(BindingSpec {
                source: n.retry_exchange.clone(),
                destination: entry,
                to_exchange: entry_is_exchange,
                key: n.return_key().into(),
            });
            for delay in stages(cfg) {
                let q = n.retry_queue(delay);
                d.queues.push(QueueSpec {
                    name: q.clone(),
                    arguments: quorum(),
                });
                d.bindings.push(BindingSpec {
                    source: n.retry_exchange.clone(),
                    destination: q.clone(),
                    to_exchange: false,
                    key: ConsumerNames::stage_key(delay),
                });
                d.policies.push(policy(
                    cfg,
                    &q,
                    json!({
                        "message-ttl": u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                        "dead-letter-exchange": n.retry_exchange,
                        "dead-letter-routing-key": n.return_key(),
                        "dead-letter-strategy": "at-least-once",
                        "overflow": "reject-publish",
                    }),
                ));
            }
            d.queues.push(QueueSpec {
                name: n.parking_queue.clone(),
                arguments: quorum(),
            });
            d.bindings.push(BindingSpec {
                source: n.dlx_exchange.clone(),
                destination: n.parking_queue.clone(),
                to_exchange: false,
                key: PARKING_KEY.into(),
            });
            d.policies.push(policy(
                cfg,
                &n.parking_queue,
                json!({"overflow": "reject-publish"}),
            ));
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The policy named `name` of `d` (the test fails if there is none).
    fn policy_named<'a>(d: &'a DesiredTopology, name: &str) -> &'a PolicyInfo {
        d.policies
            .iter()
            .find(|p| p.name == name)
            .unwrap_or_else(|| panic!("no policy {name}"))
    }

    #[test]
    fn seed_topology_with_policies_not_arguments() {
        let cfg = TopologyConfig {
            prefix: "inventory".into(),
            ..TopologyConfig::default()
        }
        .with_consumer("orders", &["order.created"]);
        let d = DesiredTopology::of(&cfg);
        let names: Vec<_> = d.queues.iter().map(|q| q.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "inventory.orders",
                "inventory.orders.retry.5s",
                "inventory.orders.retry.30s",
                "inventory.orders.retry.5m",
                "inventory.orders.parking"
            ]
        );
        assert!(
            d.queues
                .iter()
                .all(|q| q.arguments.len() == 1 && q.arguments["x-queue-type"] == "quorum")
        );
        let p5 = policy_named(&d, "postroom:inventory.orders.retry.5s");
        assert_eq!(p5.pattern, "^inventory\\.orders\\.retry\\.5s$");
        assert_eq!(p5.definition["message-ttl"], 5000);
        assert_eq!(p5.definition["dead-letter-routing-key"], "inventory.orders");
        let main = policy_named(&d, "postroom:inventory.orders");
        assert_eq!(main.definition["delivery-limit"], 8);
        assert_eq!(main.definition["dead-letter-strategy"], "at-least-once");
        assert_eq!(main.definition["overflow"], "reject-publish");
    }

    #[test]
    fn reject_dlx_loops_through_the_first_stage() {
        let cfg = TopologyConfig {
            retry_style: RetryStyle::RejectDlx,
            ..TopologyConfig::default()
        }
        .with_consumer("c", &["k"]);
        let d = DesiredTopology::of(&cfg);
        assert_eq!(
            d.queues
                .iter()
                .filter(|q| q.name.contains(".retry."))
                .count(),
            1
        );
        let main = policy_named(&d, "postroom:c");
        assert_eq!(main.definition["dead-letter-exchange"], "c.retry");
        assert_eq!(main.definition["dead-letter-routing-key"], "5s");
    }

    #[test]
    fn partitioned_consumer_gets_a_hash_exchange_and_single_active_queues() {
        let cfg = TopologyConfig::default()
            .with_consumer("po", &["order.*"])
            .partitioned("po", 2);
        let d = DesiredTopology::of(&cfg);
        let x = d
            .exchanges
            .iter()
            .find(|e| e.name == "po.partitioned")
            .unwrap();
        assert_eq!(x.kind, "x-consistent-hash");
        assert_eq!(x.arguments["hash-header"], "x-aggregate-key");
        assert!(
            !d.queues.iter().any(|q| q.name == "po"),
            "no plain work queue"
        );
        let p0 = d.queues.iter().find(|q| q.name == "po.p0").unwrap();
        assert_eq!(p0.arguments["x-single-active-consumer"], true);
        assert!(
            d.bindings.iter().any(|b| b.source == "orders"
                && b.destination == "po.partitioned"
                && b.to_exchange)
        );
        assert!(
            d.bindings.iter().any(|b| b.source == "po.retry"
                && b.destination == "po.partitioned"
                && b.key == "po")
        );
        assert!(d.policies.iter().any(|p| p.name == "postroom:po.p1"));
    }
}
