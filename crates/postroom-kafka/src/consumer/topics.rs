//! The topics one consumer group member subscribes to. Route patterns (`*`, `#`) are resolved
//! here, against the cluster's list of topics, the way Kafka's Java client resolves a pattern
//! subscription: the member subscribes to the explicit list of the topics that match, reads
//! the list again every couple of seconds, and subscribes anew when it changed (a new
//! matching topic; a rebalance follows, as it does for any change of subscription).
//!
//! A librdkafka regex subscription cannot do this: its regexes have no way to leave out the
//! topics shaped like a consumer's own (`….parking`, `….redrive`, `….deliveries`,
//! `….retry.<delay>`), so a member on `shop.*` was assigned consumer `shop`'s parking topic
//! and fetched every record of it only to skip it.

use crate::config::KafkaConfig;
use crate::error::kafka;
use crate::naming::has_own_topic_shape;
use postroom_core::Result;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use std::time::{Duration, Instant};

/// How often the list of topics is read again while patterns are subscribed.
const REFRESH: Duration = Duration::from_secs(2);

/// How long one read of the list may take (the poll thread waits for it).
const METADATA_WAIT: Duration = Duration::from_secs(1);

/// After a failed read of the list, the wait before the next one.
const AFTER_FAILURE: Duration = Duration::from_secs(10);

/// A member's subscription: the topics it reads by name and the route patterns it resolves.
pub(crate) struct Topics {
    /// Read by name, whatever the cluster holds: routes, retry stages, the redrive topic.
    fixed: Vec<String>,
    /// Route patterns, matched against topic names without the workload prefix.
    patterns: Vec<String>,
    prefix: String,
    /// What the member is subscribed to now.
    current: Vec<String>,
    next_read: Instant,
    /// Reads the list of topics, with patterns: a client of its own, outside the group (a
    /// request for every topic's metadata made on the member's own handle left librdkafka
    /// reporting its subscribed topics as unknown).
    lister: Option<BaseConsumer>,
}

impl Topics {
    /// With patterns, this creates the client that reads the list of topics.
    pub(crate) fn new(
        config: &KafkaConfig,
        fixed: Vec<String>,
        patterns: Vec<String>,
    ) -> Result<Self> {
        let lister = if patterns.is_empty() {
            None
        } else {
            Some(
                config
                    .client()
                    .create()
                    .map_err(|e| kafka("creating the client that lists topics", e))?,
            )
        };
        let mut topics = Self::resolver(fixed, patterns, config.prefix.clone());
        topics.lister = lister;
        Ok(topics)
    }

    /// Without a client: what [`resolve`](Self::resolve) needs.
    fn resolver(fixed: Vec<String>, patterns: Vec<String>, prefix: String) -> Self {
        Self {
            fixed,
            patterns,
            prefix,
            current: Vec::new(),
            next_read: Instant::now(),
            lister: None,
        }
    }

    /// The subscription on a cluster that holds the topics `existing`: the fixed topics and
    /// every existing one the patterns match, sorted.
    pub(crate) fn resolve<'a>(&self, existing: impl IntoIterator<Item = &'a str>) -> Vec<String> {
        let mut out = self.fixed.clone();
        if !self.patterns.is_empty() {
            out.extend(
                existing
                    .into_iter()
                    .filter(|t| self.matches(t))
                    .map(str::to_string),
            );
        }
        out.sort();
        out.dedup();
        out
    }

    /// Whether a pattern takes `topic`: under the workload prefix, not one of Kafka's internal
    /// topics, not shaped like a consumer's own, and its route matches a pattern.
    fn matches(&self, topic: &str) -> bool {
        if topic.starts_with("__") {
            return false;
        }
        let route = if self.prefix.is_empty() {
            topic
        } else {
            match topic
                .strip_prefix(self.prefix.as_str())
                .and_then(|t| t.strip_prefix('.'))
            {
                Some(route) => route,
                None => return false,
            }
        };
        !has_own_topic_shape(route)
            && self
                .patterns
                .iter()
                .any(|p| postroom_core::pattern::matches(p, route))
    }

    /// Subscribe `consumer` for the first time. With patterns, to what they match now; when the
    /// list of topics cannot be read, to the fixed topics (the patterns follow on a later
    /// [`refresh`](Self::refresh)).
    pub(crate) fn subscribe<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
        group: &str,
    ) -> Result<()> {
        let wanted = self.read(group).unwrap_or_else(|| self.fixed.clone());
        self.apply(consumer, group, wanted)
    }

    /// With patterns, once every refresh interval: read the list of topics again and subscribe
    /// anew if what the patterns match changed. A failure is logged and tried again later.
    pub(crate) fn refresh<C: ConsumerContext>(&mut self, consumer: &BaseConsumer<C>, group: &str) {
        if self.patterns.is_empty() || Instant::now() < self.next_read {
            return;
        }
        let Some(wanted) = self.read(group) else {
            return;
        };
        if wanted != self.current
            && let Err(e) = self.apply(consumer, group, wanted)
        {
            tracing::warn!(consumer = %group, error = %e, "re-subscribing failed");
        }
    }

    /// What the patterns match now, or `None` (logged) when the list cannot be read.
    fn read(&mut self, group: &str) -> Option<Vec<String>> {
        let Some(lister) = &self.lister else {
            return Some(self.fixed.clone());
        };
        match lister.fetch_metadata(None, METADATA_WAIT) {
            Ok(md) => {
                self.next_read = Instant::now() + REFRESH;
                Some(self.resolve(md.topics().iter().map(|t| t.name())))
            }
            Err(e) => {
                self.next_read = Instant::now() + AFTER_FAILURE;
                tracing::debug!(consumer = %group, error = %e, "reading the list of topics failed");
                None
            }
        }
    }

    fn apply<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
        group: &str,
        wanted: Vec<String>,
    ) -> Result<()> {
        let names: Vec<&str> = wanted.iter().map(String::as_str).collect();
        consumer
            .subscribe(&names)
            .map_err(|e| kafka(format!("subscribing {group} to {names:?}"), e))?;
        if !self.current.is_empty() {
            tracing::info!(consumer = %group, topics = ?names, "the pattern routes match other topics now: subscribed anew");
        }
        self.current = wanted;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topics(prefix: &str, patterns: &[&str]) -> Topics {
        Topics::resolver(
            vec![format!("{prefix}.audit.redrive")],
            patterns.iter().map(|p| (*p).to_string()).collect(),
            prefix.to_string(),
        )
    }

    #[test]
    fn patterns_take_matching_topics_under_the_prefix_and_nothing_shaped_like_a_consumers_own() {
        let t = topics("pk", &["shop.*"]);
        let existing = [
            "pk.shop.created",
            "pk.shop.paid.late",
            "pk.shop.parking",
            "pk.shop.redrive",
            "pk.shop.deliveries",
            "other.shop.created",
            "__consumer_offsets",
        ];
        assert_eq!(
            t.resolve(existing),
            vec!["pk.audit.redrive", "pk.shop.created"]
        );
        let t = topics("pk", &["#"]);
        assert_eq!(
            t.resolve(["pk.a", "pk.a.b", "pk.a.retry.5s", "pk.a.retry.soon", "pk"]),
            vec!["pk.a", "pk.a.b", "pk.a.retry.soon", "pk.audit.redrive"]
        );
    }

    #[test]
    fn without_a_prefix_every_topic_is_a_route_but_kafkas_own_stay_out() {
        let t = Topics::resolver(Vec::new(), vec!["#".into()], String::new());
        assert_eq!(
            t.resolve(["orders", "__consumer_offsets", "orders.parking"]),
            vec!["orders"]
        );
    }

    #[test]
    fn without_patterns_only_the_fixed_topics() {
        let t = topics("pk", &[]);
        assert_eq!(t.resolve(["pk.shop.created"]), vec!["pk.audit.redrive"]);
    }
}
