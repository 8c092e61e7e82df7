//! Names of one consumer's topics and group: the workload prefix, then the suffixes
//! `.retry.<delay>`, `.redrive`, `.parking`, as on RabbitMQ (`shop.inventory.retry.30s`).

use crate::config::valid_topic_char;
use postroom_core::{Error, ErrorKind, Result, RetryLadder};
use std::time::Duration;

/// The topic a route (a postroom topic, e.g. `order.created`) is stored in:
/// `<prefix>.<route>`.
#[must_use]
pub fn topic_of(prefix: &str, route: &str) -> String {
    if prefix.is_empty() {
        route.to_string()
    } else {
        format!("{prefix}.{route}")
    }
}

/// The route of a topic: the topic without the workload prefix.
#[must_use]
pub fn route_of<'a>(prefix: &str, topic: &'a str) -> &'a str {
    if prefix.is_empty() {
        return topic;
    }
    topic
        .strip_prefix(prefix)
        .and_then(|t| t.strip_prefix('.'))
        .unwrap_or(topic)
}

/// Refuse a name Kafka would refuse, with a clear message.
pub fn check_topic(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > 249 || name == "." || name == ".." {
        return Err(Error::new(
            ErrorKind::InvalidData,
            format!("{name:?} is not a valid Kafka topic name (1 to 249 characters)"),
        ));
    }
    if let Some(bad) = name.chars().find(|c| !valid_topic_char(*c)) {
        return Err(Error::new(
            ErrorKind::InvalidData,
            format!(
                "{name:?} has {bad:?}: Kafka topic names take letters, digits, '.', '_' and '-'"
            ),
        ));
    }
    Ok(())
}

/// The names of one consumer's group and topics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerTopics {
    /// Consumer name.
    pub consumer: String,
    /// Consumer group: `<prefix>.<consumer>`; the base of the other names.
    pub group: String,
    /// Where a redrive sends copies back to this consumer only: `<group>.redrive`.
    pub redrive: String,
    /// The parking topic: `<group>.parking`.
    pub parking: String,
    /// The group that moves parked copies into the parking store: `<group>.parking-ingest`.
    pub parking_group: String,
    /// The delivery ledger (compacted, one partition): how many times each uncommitted record
    /// was handed out, the crash-loop bound: `<group>.deliveries`.
    pub deliveries: String,
}

impl ConsumerTopics {
    /// Names for `consumer` under `prefix`.
    #[must_use]
    pub fn new(prefix: &str, consumer: &str) -> Self {
        let group = topic_of(prefix, consumer);
        Self {
            consumer: consumer.to_string(),
            redrive: format!("{group}.redrive"),
            parking: format!("{group}.parking"),
            parking_group: format!("{group}.parking-ingest"),
            deliveries: format!("{group}.deliveries"),
            group,
        }
    }

    /// The stage topic of a delay: `<group>.retry.5s`.
    #[must_use]
    pub fn retry(&self, delay: Duration) -> String {
        format!("{}.retry.{}", self.group, stage_name(delay))
    }

    /// Every stage topic of `ladder`.
    #[must_use]
    pub fn retries(&self, ladder: &RetryLadder) -> Vec<String> {
        ladder.delays().iter().map(|d| self.retry(*d)).collect()
    }

    /// The stage index of `topic` in `ladder`, when it is one of this consumer's stage topics.
    #[must_use]
    pub fn stage_of(&self, ladder: &RetryLadder, topic: &str) -> Option<usize> {
        ladder.delays().iter().position(|d| self.retry(*d) == topic)
    }
}

/// The last words of a consumer's own topics (`<group>.parking`, `.redrive`, `.deliveries`);
/// its stage topics end in `.retry.<delay>`.
const OWN_LAST_WORDS: [&str; 3] = ["parking", "redrive", "deliveries"];

/// Whether `route` (a topic name without the workload prefix) ends the way a consumer's own
/// topics do: `….parking`, `….redrive`, `….deliveries` or `….retry.<delay>`. On Kafka a
/// consumer's topics and the route topics share one namespace (`<prefix>.<consumer>.parking`
/// beside `<prefix>.<route>`), so such a route would be read, or written, as another
/// consumer's parking, redrive, ledger or stage topic; a pattern route never takes a topic
/// of this shape.
#[must_use]
pub fn has_own_topic_shape(route: &str) -> bool {
    let words: Vec<&str> = route.split('.').collect();
    match words.as_slice() {
        [_, .., last] if OWN_LAST_WORDS.contains(last) => true,
        [_, .., "retry", delay] => postroom_core::retry::ladder::parse_duration(delay).is_ok(),
        _ => false,
    }
}

/// Refuse a route (a topic or a pattern) that ends like a consumer's own topics (see
/// [`has_own_topic_shape`]).
pub fn check_route(route: &str) -> Result<()> {
    if has_own_topic_shape(route) {
        return Err(Error::new(
            ErrorKind::Config,
            format!(
                "route {route:?} ends like a consumer's own topics (`.parking`, `.redrive`, `.deliveries`, `.retry.<delay>`), which Kafka keeps beside the route topics under the prefix: give the route another last word"
            ),
        ));
    }
    Ok(())
}

/// `5s`, `30s`, `5m`, `250ms`: the name of a stage.
#[must_use]
pub fn stage_name(delay: Duration) -> String {
    RetryLadder::new(vec![delay]).map_or_else(|| "0ms".to_string(), |l| l.stage_name(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_shaped_like_a_consumers_own_topics_are_refused() {
        for own in [
            "inventory.parking",
            "a.b.redrive",
            "x.deliveries",
            "x.retry.5s",
            "x.retry.250ms",
            "#.parking",
            "*.retry.1m",
        ] {
            assert!(has_own_topic_shape(own), "{own}");
            assert!(check_route(own).is_err(), "{own}");
        }
        for route in [
            "parking",
            "parking.reserved",
            "payment.retry.requested",
            "retry.5s",
            "order.created",
            "shop.*",
            "#",
        ] {
            assert!(!has_own_topic_shape(route), "{route}");
            check_route(route).unwrap();
        }
    }

    #[test]
    fn names_follow_the_rabbitmq_ones() {
        let n = ConsumerTopics::new("shop", "inventory");
        assert_eq!(n.group, "shop.inventory");
        assert_eq!(n.retry(Duration::from_secs(30)), "shop.inventory.retry.30s");
        assert_eq!(n.parking, "shop.inventory.parking");
        assert_eq!(n.redrive, "shop.inventory.redrive");
        assert_eq!(n.deliveries, "shop.inventory.deliveries");
        assert_eq!(topic_of("shop", "order.created"), "shop.order.created");
        assert_eq!(route_of("shop", "shop.order.created"), "order.created");
        assert_eq!(route_of("", "order.created"), "order.created");
        let ladder: RetryLadder = "1s,2s".parse().unwrap();
        assert_eq!(n.stage_of(&ladder, "shop.inventory.retry.2s"), Some(1));
        assert_eq!(n.stage_of(&ladder, "shop.inventory.retry.3s"), None);
    }

    #[test]
    fn bad_topic_names_are_refused_clearly() {
        assert!(check_topic("order.created").is_ok());
        let e = check_topic("order created").unwrap_err();
        assert!(e.to_string().contains("' '"), "{e}");
        assert!(check_topic(&"x".repeat(250)).is_err());
    }
}
