//! Names of streams, subjects and durables, and topic patterns translated to NATS filters.
//!
//! NATS 2.9 gives a consumer one filter subject, so a postroom consumer is a set of durables
//! ("lanes") on the work stream: one per filter its routes translate to, one per partition
//! when partitioned, and one for copies addressed to the consumer alone (redrive). The
//! subscriber pulls from all of them.

use crate::config::{ConsumerTopology, NatsConfig};
use postroom_core::{Error, ErrorKind, Result};

/// Where copies addressed to one consumer go (`Route::Consumer`): outside `<prefix>.>`, so
/// no topic pattern ever matches them.
#[must_use]
pub fn direct_subject(prefix: &str, consumer: &str) -> String {
    format!("_pr.{prefix}.direct.{consumer}")
}

/// The subject parked copies of `consumer` are published to.
#[must_use]
pub fn parking_subject(prefix: &str, consumer: &str) -> String {
    format!("_pr.{prefix}.parking.{consumer}")
}

/// The work stream of a workload.
#[must_use]
pub fn work_stream(prefix: &str) -> String {
    prefix.to_string()
}

/// The parking stream of one consumer: its parked copies and the advisories of its durables.
#[must_use]
pub fn parking_stream(prefix: &str, consumer: &str) -> String {
    format!("{prefix}_parking_{consumer}")
}

/// The durable that feeds a parking stream to the parking ingest.
pub const INGEST_DURABLE: &str = "ingest";

/// Subject of the server's advisory when a copy reached `max_deliver` on `durable`.
#[must_use]
pub fn max_deliveries_advisory(stream: &str, durable: &str) -> String {
    format!("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{stream}.{durable}")
}

/// Subject of the server's advisory when a copy of `durable` was terminated (`+TERM`).
#[must_use]
pub fn terminated_advisory(stream: &str, durable: &str) -> String {
    format!("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.{stream}.{durable}")
}

/// The subject a topic is published to (`partition` when the workload is partitioned).
#[must_use]
pub fn topic_subject(prefix: &str, topic: &str, partition: Option<u16>) -> String {
    match partition {
        Some(p) => format!("{prefix}.{topic}.{p}"),
        None => format!("{prefix}.{topic}"),
    }
}

/// Refuse a route NATS cannot express or that is malformed.
pub fn check_route(route: &str) -> Result<()> {
    let bad = |why: &str| {
        Err(Error::new(
            ErrorKind::Config,
            format!("route {route:?} {why}"),
        ))
    };
    if route.is_empty() || route.split('.').any(str::is_empty) {
        return bad("has an empty word");
    }
    if route
        .chars()
        .any(|c| c.is_whitespace() || c == '>' || c == '$')
    {
        return bad("must not contain whitespace, '>' or '$' (use '#' for any number of words)");
    }
    if route
        .split('.')
        .any(|w| w.len() > 1 && w.contains(['*', '#']))
    {
        return bad("uses '*' or '#' inside a word; they stand for whole words");
    }
    Ok(())
}

/// One route as NATS filters. `*` stays `*`; a trailing `#` becomes the bare prefix plus `>`
/// (AMQP `#` also matches zero words, NATS `>` needs one); a `#` anywhere else has no NATS
/// equivalent, so the filter is widened to the words before it plus `>` and the subscriber
/// keeps only subjects [`postroom_core::pattern::matches`] accepts (`exact` is false).
/// `partitioned` adds the partition word every topic subject then carries.
#[must_use]
pub fn route_filters(prefix: &str, route: &str, partition: Option<u16>) -> RouteFilters {
    let mut words: Vec<&str> = Vec::new();
    for w in route.split('.') {
        if w == "#" && words.last() == Some(&"#") {
            continue;
        }
        words.push(w);
    }
    let tail = match partition {
        Some(p) => format!(".{p}"),
        None => String::new(),
    };
    let hash_at = words.iter().position(|w| *w == "#");
    match hash_at {
        None => RouteFilters {
            filters: vec![format!("{prefix}.{}{tail}", words.join("."))],
            exact: true,
        },
        Some(i) if i + 1 == words.len() => {
            let head = &words[..i];
            let mut filters = Vec::new();
            if !head.is_empty() {
                filters.push(format!("{prefix}.{}{tail}", head.join(".")));
            }
            // With partitions every subject ends in the partition word: `>` would take other
            // partitions too, so the words are left to the subscriber's check.
            match partition {
                None => {
                    let h = if head.is_empty() {
                        String::new()
                    } else {
                        format!("{}.", head.join("."))
                    };
                    filters.push(format!("{prefix}.{h}>"));
                    RouteFilters {
                        filters,
                        exact: true,
                    }
                }
                Some(_) => RouteFilters {
                    filters: vec![widened(prefix, head)],
                    exact: false,
                },
            }
        }
        Some(i) => RouteFilters {
            filters: vec![widened(prefix, &words[..i])],
            exact: false,
        },
    }
}

fn widened(prefix: &str, head: &[&str]) -> String {
    if head.is_empty() {
        format!("{prefix}.>")
    } else {
        format!("{prefix}.{}.>", head.join("."))
    }
}

/// What a route becomes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteFilters {
    /// NATS filter subjects (one durable each).
    pub filters: Vec<String>,
    /// Whether the filters select exactly the route's topics (else the subscriber checks).
    pub exact: bool,
}

/// Whether a NATS `subject` matches `filter` (`*` one token, `>` one or more at the end; an
/// empty filter matches everything).
#[must_use]
pub fn subject_matches(filter: &str, subject: &str) -> bool {
    if filter.is_empty() {
        return true;
    }
    let f: Vec<&str> = filter.split('.').collect();
    let s: Vec<&str> = subject.split('.').collect();
    for (i, fw) in f.iter().enumerate() {
        match *fw {
            ">" => return s.len() > i,
            "*" => {
                if i >= s.len() {
                    return false;
                }
            }
            w => {
                if s.get(i) != Some(&w) {
                    return false;
                }
            }
        }
    }
    f.len() == s.len()
}

/// One durable of a consumer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lane {
    /// Durable name.
    pub durable: String,
    /// Its filter subject.
    pub filter: String,
    /// The routes it serves, when the filter is wider than they are (the subscriber keeps a
    /// topic that matches any of them); empty when the filter is exact.
    pub checks: Vec<String>,
    /// The partition it serves (one copy in flight at a time).
    pub partition: Option<u16>,
    /// Copies addressed to this consumer alone.
    pub direct: bool,
}

/// The durables of `consumer` in `config`.
#[must_use]
pub fn lanes(config: &NatsConfig, consumer: &ConsumerTopology) -> Vec<Lane> {
    let prefix = &config.prefix;
    let workload_partitions = config.partitions();
    let mut out: Vec<Lane> = Vec::new();
    if let Some(filter) = merged_filter(prefix, consumer, workload_partitions) {
        out.push(Lane {
            durable: format!("{}__{}", consumer.name, short_hash(&filter)),
            filter,
            checks: consumer.routes.clone(),
            partition: None,
            direct: false,
        });
        out.push(direct_lane(prefix, &consumer.name));
        return out;
    }
    let partitions: Vec<Option<u16>> = if consumer.partitions > 0 {
        (0..consumer.partitions).map(Some).collect()
    } else {
        vec![None]
    };
    for route in &consumer.routes {
        for part in &partitions {
            let rf = route_filters(prefix, route, *part);
            // In a partitioned workload every topic subject ends in a partition word; an
            // unpartitioned consumer takes them all.
            let filters: Vec<String> = if part.is_none() && workload_partitions > 0 {
                let w = route_filters(prefix, &format!("{route}.*"), None);
                w.filters
            } else {
                rf.filters.clone()
            };
            let check = (!rf.exact).then(|| route.clone());
            for filter in filters {
                if out.iter().any(|l| l.filter == filter) {
                    continue;
                }
                let durable = match part {
                    Some(p) => format!("{}__{}_p{p}", consumer.name, short_hash(&filter)),
                    None => format!("{}__{}", consumer.name, short_hash(&filter)),
                };
                out.push(Lane {
                    durable,
                    filter,
                    checks: check.iter().cloned().collect(),
                    partition: *part,
                    direct: false,
                });
            }
        }
    }
    out.push(direct_lane(prefix, &consumer.name));
    out
}

/// The durable of copies addressed to `consumer` alone.
fn direct_lane(prefix: &str, consumer: &str) -> Lane {
    Lane {
        durable: format!("{consumer}__direct"),
        filter: direct_subject(prefix, consumer),
        checks: Vec::new(),
        partition: None,
        direct: true,
    }
}

/// One filter for all of an unpartitioned consumer's routes, when they have the same number
/// of words and no `#`: each word kept where every route has it, `*` where they differ
/// (`order.created` + `order.cancelled` → `<prefix>.order.*`, the subscriber keeping the
/// routes' topics only). One durable then delivers the consumer's topics in stream order: an
/// aggregate's `order.cancelled` never overtakes its `order.created` by a backlog, as it
/// would from a durable of its own (the version guard would wait for the created event
/// beyond its retry budget).
fn merged_filter(
    prefix: &str,
    consumer: &ConsumerTopology,
    workload_partitions: u16,
) -> Option<String> {
    let routes = &consumer.routes;
    if routes.len() < 2 || consumer.partitions > 0 || workload_partitions > 0 {
        return None;
    }
    let split: Vec<Vec<&str>> = routes.iter().map(|r| r.split('.').collect()).collect();
    let len = split[0].len();
    if split.iter().any(|w| w.len() != len || w.contains(&"#")) {
        return None;
    }
    let words: Vec<&str> = (0..len)
        .map(|i| {
            let w = split[0][i];
            if split.iter().all(|r| r[i] == w) {
                w
            } else {
                "*"
            }
        })
        .collect();
    Some(format!("{prefix}.{}", words.join(".")))
}

/// Eight hex digits naming a filter in a durable name (durable names cannot hold dots).
#[must_use]
pub fn short_hash(text: &str) -> String {
    let u = uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, text.as_bytes());
    u.simple().to_string()[..8].to_string()
}

/// The partition of an aggregate key (FNV-1a, stable across processes and versions).
#[must_use]
pub fn partition_of(key: &str, partitions: u16) -> u16 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % u64::from(partitions.max(1))) as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use postroom_core::pattern::matches;

    #[test]
    fn routes_translate_to_filters_that_agree_with_the_reference_matcher() {
        let cases = [
            "order.created",
            "order.*",
            "order.#",
            "#",
            "*.created",
            "#.created",
            "order.#.paid",
            "a.*.#",
        ];
        let topics = [
            "order",
            "order.created",
            "order.paid",
            "order.x.paid",
            "refund.created",
            "a.b",
            "a.b.c",
            "x",
        ];
        for route in cases {
            check_route(route).unwrap();
            let rf = route_filters("p", route, None);
            for topic in topics {
                let subject = topic_subject("p", topic, None);
                let by_filter = rf.filters.iter().any(|f| subject_matches(f, &subject));
                let kept = by_filter && (rf.exact || matches(route, topic));
                assert_eq!(kept, matches(route, topic), "{route} vs {topic}: {rf:?}");
                if matches(route, topic) {
                    assert!(by_filter, "{route} filter must take {topic}");
                }
            }
        }
    }

    #[test]
    fn routes_of_one_shape_share_one_durable_that_keeps_their_topics_only() {
        let mut cfg =
            NatsConfig::new("p").with_consumer("inv", &["order.created", "order.cancelled"]);
        let inv = cfg.consumer("inv").unwrap().clone();
        let l = lanes(&cfg, &inv);
        assert_eq!(l.len(), 2, "{l:?}");
        assert_eq!(l[0].filter, "p.order.*");
        assert_eq!(l[0].checks, ["order.created", "order.cancelled"]);
        assert!(l[1].direct);
        let kept = |topic: &str| l[0].checks.iter().any(|r| matches(r, topic));
        assert!(kept("order.created") && kept("order.cancelled") && !kept("order.shipped"));
        // Other shapes keep a durable per filter.
        cfg = cfg.with_consumer("inv", &["order.created", "order.#"]);
        let inv = cfg.consumer("inv").unwrap().clone();
        assert_eq!(lanes(&cfg, &inv).len(), 4);
        cfg = cfg.with_consumer("inv", &["order.created", "refund.issued.late"]);
        let inv = cfg.consumer("inv").unwrap().clone();
        assert_eq!(lanes(&cfg, &inv).len(), 3);
        let part = NatsConfig::new("p")
            .with_consumer("inv", &["order.created", "order.cancelled"])
            .partitioned("inv", 2);
        let inv = part.consumer("inv").unwrap().clone();
        assert_eq!(lanes(&part, &inv).len(), 2 * 2 + 1);
    }

    #[test]
    fn nats_matching_and_partitions() {
        assert!(subject_matches("a.>", "a.b.c"));
        assert!(!subject_matches("a.>", "a"));
        assert!(subject_matches("a.*.c", "a.b.c"));
        assert!(!subject_matches("a.*", "a.b.c"));
        assert!(subject_matches("", "x"));
        assert_eq!(partition_of("order:1", 4), partition_of("order:1", 4));
        assert!((0..100).all(|i| partition_of(&format!("k{i}"), 3) < 3));
        assert!(check_route("a.>").is_err());
        assert!(check_route("a..b").is_err());
        assert!(check_route("a.b*").is_err());
    }
}
