//! The topics of a workload: every consumer's subscribed topics, one retry topic per ladder
//! stage, its redrive topic and its parking topic, created through the admin client with the
//! configured partitions, replication and retention. [`Topology::plan`] says what is missing
//! (a dry run); [`Topology::apply`] creates it and leaves existing topics as they are.

use crate::config::{KafkaConfig, TopicProvisioning};
use crate::error::{kafka, kind_of_code};
use crate::naming::{ConsumerTopics, check_topic, topic_of};
use postroom_core::{Error, ErrorKind, Result};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::{KafkaResult, RDKafkaErrorCode};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// One topic as the workload wants it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicSpec {
    /// Name.
    pub name: String,
    /// Partitions.
    pub partitions: i32,
    /// Replication factor.
    pub replication: i32,
    /// Topic configuration (`retention.ms`).
    pub config: Vec<(String, String)>,
}

/// What `apply` would do, or found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// The topic is missing and will be created.
    Create(TopicSpec),
    /// The topic exists with fewer partitions than wanted (partitions are never changed by
    /// postroom: adding some moves keys to other partitions, which breaks per-key order).
    FewerPartitions {
        /// Topic.
        topic: String,
        /// Partitions it has.
        has: i32,
        /// Partitions wanted.
        wanted: i32,
    },
    /// The topic exists with another replication factor than wanted (left as it is: changing
    /// it is a partition reassignment, an operator's decision).
    OtherReplication {
        /// Topic.
        topic: String,
        /// Replication factor it has (the fewest replicas of any of its partitions).
        has: i32,
        /// Replication factor wanted.
        wanted: i32,
    },
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::Create(t) => write!(
                f,
                "create topic {} (partitions {}, replication {}{})",
                t.name,
                t.partitions,
                t.replication,
                t.config
                    .iter()
                    .map(|(k, v)| format!(", {k}={v}"))
                    .collect::<String>()
            ),
            Change::FewerPartitions { topic, has, wanted } => write!(
                f,
                "topic {topic} has {has} partitions, {wanted} wanted (left as it is: adding partitions moves keys)"
            ),
            Change::OtherReplication { topic, has, wanted } => write!(
                f,
                "topic {topic} has replication factor {has}, {wanted} wanted (left as it is: changing it is a partition reassignment)"
            ),
        }
    }
}

impl postroom_core::TopologyChange for Change {
    fn is_made(&self) -> bool {
        matches!(self, Change::Create(_))
    }
}

postroom_core::broker_topology!(Topology, Change);

/// The topics of consumers on routes.
#[derive(Clone, Debug, Default)]
pub struct Consumers(pub BTreeMap<String, Vec<String>>);

impl Consumers {
    /// Add `consumer` on `routes`.
    #[must_use]
    pub fn with(mut self, consumer: &str, routes: &[&str]) -> Self {
        let e = self.0.entry(consumer.to_string()).or_default();
        for r in routes {
            if !e.iter().any(|x| x == r) {
                e.push((*r).to_string());
            }
        }
        self
    }
}

/// The topics of one workload and the admin client that creates them.
#[derive(Clone)]
pub struct Topology {
    config: KafkaConfig,
    consumers: Consumers,
    admin: Arc<AdminClient<DefaultClientContext>>,
}

postroom_core::debug_showing!(Topology {
    prefix: config.prefix,
    consumers
});

impl Topology {
    /// The topology of `consumers` under `config`.
    pub fn new(config: &KafkaConfig, consumers: Consumers) -> Result<Self> {
        config.validate()?;
        if consumers.0.keys().any(|c| c.trim().is_empty()) {
            return Err(Error::new(
                ErrorKind::Config,
                "a consumer name must not be empty: it names the consumer's group and topics",
            ));
        }
        for consumer in consumers.0.keys() {
            let group = ConsumerTopics::new(&config.prefix, consumer).group;
            if let Some(owner) = consumers
                .0
                .keys()
                .find(|other| ConsumerTopics::new(&config.prefix, other).parking_group == group)
            {
                return Err(Error::new(
                    ErrorKind::Config,
                    format!(
                        "consumer {consumer:?} would join the group {group:?}, which moves consumer {owner:?}'s parked copies into the parking store: give it another name"
                    ),
                ));
            }
        }
        Ok(Self {
            config: config.clone(),
            consumers,
            admin: Arc::new(admin(config)?),
        })
    }

    /// Every topic the workload needs: the consumers' routes (patterns excepted: they match
    /// topics made by others), their retry, redrive and parking topics.
    pub fn desired(&self) -> Result<Vec<TopicSpec>> {
        let mut names = Vec::new();
        let mut ledgers = Vec::new();
        for (consumer, routes) in &self.consumers.0 {
            for r in routes {
                crate::naming::check_route(r)?;
            }
            names.extend(consumer_topics(&self.config, consumer, routes));
            ledgers.push(ConsumerTopics::new(&self.config.prefix, consumer).deliveries);
        }
        names.sort();
        names.dedup();
        names
            .iter()
            .map(|n| {
                check_topic(n)?;
                Ok(topic_spec(&self.config, n, ledgers.contains(n)))
            })
            .collect()
    }

    /// What [`apply`](Self::apply) would change (a dry run).
    pub async fn plan(&self) -> Result<Vec<Change>> {
        let existing = self.described().await?;
        let mut out = Vec::new();
        for spec in self.desired()? {
            let Some(has) = existing.get(&spec.name) else {
                out.push(Change::Create(spec));
                continue;
            };
            if has.partitions < spec.partitions {
                out.push(Change::FewerPartitions {
                    topic: spec.name.clone(),
                    has: has.partitions,
                    wanted: spec.partitions,
                });
            }
            if has.replication != spec.replication {
                out.push(Change::OtherReplication {
                    topic: spec.name.clone(),
                    has: has.replication,
                    wanted: spec.replication,
                });
            }
        }
        Ok(out)
    }

    /// Create what is missing; returns what was planned.
    pub async fn apply(&self) -> Result<Vec<Change>> {
        let plan = self.plan().await?;
        let create: Vec<TopicSpec> = plan
            .iter()
            .filter_map(|c| match c {
                Change::Create(t) => Some(t.clone()),
                Change::FewerPartitions { .. } | Change::OtherReplication { .. } => None,
            })
            .collect();
        provide_topics(&self.config, &self.admin, &create).await?;
        Ok(plan)
    }

    /// Topic names and partition counts on the cluster.
    pub async fn existing(&self) -> Result<BTreeMap<String, i32>> {
        Ok(self
            .described()
            .await?
            .into_iter()
            .map(|(name, t)| (name, t.partitions))
            .collect())
    }

    /// The cluster's topics with their partition counts and replication factors.
    async fn described(&self) -> Result<BTreeMap<String, TopicShape>> {
        let admin = self.admin.clone();
        tokio::task::spawn_blocking(move || {
            let md = admin
                .inner()
                .fetch_metadata(None, Duration::from_secs(10))
                .map_err(|e| kafka("reading the cluster's topics", e))?;
            Ok(md
                .topics()
                .iter()
                .map(|t| {
                    let shape = TopicShape {
                        partitions: t.partitions().len() as i32,
                        replication: t
                            .partitions()
                            .iter()
                            .map(|p| p.replicas().len() as i32)
                            .min()
                            .unwrap_or(0),
                    };
                    (t.name().to_string(), shape)
                })
                .collect())
        })
        .await
        .map_err(|e| Error::new(ErrorKind::Io, format!("metadata task failed: {e}")))?
    }
}

/// What the cluster says of one topic.
#[derive(Clone, Copy, Debug)]
struct TopicShape {
    partitions: i32,
    replication: i32,
}

/// How postroom creates topic `name`: the workload's partitions, replication and retention; a
/// delivery ledger has one partition and is compacted (only the latest value of a key counts).
#[must_use]
pub fn topic_spec(config: &KafkaConfig, name: &str, ledger: bool) -> TopicSpec {
    let mut settings = Vec::new();
    if ledger {
        settings.push(("cleanup.policy".to_string(), "compact".to_string()));
    } else if let Some(r) = config.retention {
        settings.push(("retention.ms".to_string(), r.as_millis().to_string()));
    }
    TopicSpec {
        name: name.to_string(),
        partitions: if ledger { 1 } else { config.partitions },
        replication: config.replication,
        config: settings,
    }
}

/// The topics of `consumer` on `routes`: route topics (not patterns), stages, redrive, parking,
/// the delivery ledger.
#[must_use]
pub fn consumer_topics(config: &KafkaConfig, consumer: &str, routes: &[String]) -> Vec<String> {
    let names = ConsumerTopics::new(&config.prefix, consumer);
    let mut out: Vec<String> = routes
        .iter()
        .filter(|r| !is_pattern(r))
        .map(|r| topic_of(&config.prefix, r))
        .collect();
    out.extend(names.retries(&config.ladder));
    out.push(names.redrive.clone());
    out.push(names.parking.clone());
    out.push(names.deliveries.clone());
    out
}

/// Whether a route is a pattern (`*` one word, `#` any number) rather than one topic.
#[must_use]
pub fn is_pattern(route: &str) -> bool {
    route.split('.').any(|w| w == "*" || w == "#")
}

/// An admin client for `config`.
pub fn admin(config: &KafkaConfig) -> Result<AdminClient<DefaultClientContext>> {
    config
        .client()
        .create()
        .map_err(|e| kafka("creating the Kafka admin client", e))
}

/// Make `topics` available as the workload's [`TopicProvisioning`] says: created, or checked.
pub async fn provide_topics(
    config: &KafkaConfig,
    admin: &Arc<AdminClient<DefaultClientContext>>,
    topics: &[TopicSpec],
) -> Result<()> {
    match config.topics {
        TopicProvisioning::Create => create_topics(admin, topics).await,
        TopicProvisioning::Existing => {
            let (admin, topics) = (admin.clone(), topics.to_vec());
            tokio::task::spawn_blocking(move || check_provisioned(&admin, &topics))
                .await
                .map_err(|e| Error::new(ErrorKind::Io, format!("metadata task failed: {e}")))?
        }
    }
}

/// Check that an operator provisioned `topics`: each exists, with at least the partitions
/// wanted; a delivery ledger (compacted) with exactly one.
fn check_provisioned(
    admin: &AdminClient<DefaultClientContext>,
    topics: &[TopicSpec],
) -> Result<()> {
    if topics.is_empty() {
        return Ok(());
    }
    let md = admin
        .inner()
        .fetch_metadata(None, Duration::from_secs(10))
        .map_err(|e| kafka("reading the cluster's topics", e))?;
    for spec in topics {
        let has = md
            .topics()
            .iter()
            .find(|t| t.name() == spec.name && t.error().is_none())
            .map(|t| t.partitions().len());
        let ledger = spec
            .config
            .iter()
            .any(|(k, v)| k == "cleanup.policy" && v == "compact");
        let wanted = usize::try_from(spec.partitions).unwrap_or(usize::MAX);
        match has {
            None => {
                return Err(Error::new(
                    ErrorKind::NotFound,
                    format!(
                        "topic {} does not exist and topics are provisioned by the operator: create it ({})",
                        spec.name,
                        Change::Create(spec.clone())
                    ),
                ));
            }
            Some(n) if ledger && n != 1 => {
                return Err(Error::new(
                    ErrorKind::Config,
                    format!(
                        "the delivery ledger {} has {n} partitions: it needs exactly one (and cleanup.policy=compact)",
                        spec.name
                    ),
                ));
            }
            Some(n) if n < wanted => {
                return Err(Error::new(
                    ErrorKind::Config,
                    format!(
                        "topic {} has {n} partitions, at least {wanted} wanted",
                        spec.name
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// Create `topics`; one that exists already is left as it is.
pub async fn create_topics(
    admin: &AdminClient<DefaultClientContext>,
    topics: &[TopicSpec],
) -> Result<()> {
    if topics.is_empty() {
        return Ok(());
    }
    let new: Vec<NewTopic<'_>> = topics
        .iter()
        .map(|t| {
            let mut n = NewTopic::new(
                &t.name,
                t.partitions,
                TopicReplication::Fixed(t.replication),
            );
            for (k, v) in &t.config {
                n = n.set(k, v);
            }
            n
        })
        .collect();
    settle(
        admin.create_topics(new.iter(), &admin_options()),
        "creating topic",
        &[RDKafkaErrorCode::TopicAlreadyExists],
    )
    .await
}

/// Delete `topics` (test cleanup, operators); a missing one is not an error.
pub async fn delete_topics(
    admin: &AdminClient<DefaultClientContext>,
    topics: &[String],
) -> Result<()> {
    delete_named(
        topics,
        |names| admin.delete_topics(names, &admin_options()),
        "deleting topic",
        &[RDKafkaErrorCode::UnknownTopicOrPartition],
    )
    .await
}

/// Delete consumer groups (their committed offsets); a missing one is not an error.
pub async fn delete_groups(
    admin: &AdminClient<DefaultClientContext>,
    groups: &[String],
) -> Result<()> {
    delete_named(
        groups,
        |names| admin.delete_groups(names, &admin_options()),
        "deleting consumer group",
        &[
            RDKafkaErrorCode::GroupIdNotFound,
            RDKafkaErrorCode::NotCoordinator,
        ],
    )
    .await
}

/// The options of the admin calls: each operation may take up to ten seconds.
fn admin_options() -> AdminOptions {
    AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)))
}

/// What an admin call answers for one item: its name, or its name and why it failed.
type ItemResult = std::result::Result<String, (String, RDKafkaErrorCode)>;

/// Delete the items named `names` through the admin call `delete` (none: no call), settled as
/// [`settle`] does.
async fn delete_named<F>(
    names: &[String],
    delete: impl FnOnce(&[&str]) -> F,
    doing: &str,
    tolerated: &[RDKafkaErrorCode],
) -> Result<()>
where
    F: Future<Output = KafkaResult<Vec<ItemResult>>>,
{
    if names.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    settle(delete(&names), doing, tolerated).await
}

/// The admin call `call` and its per-item results as one: the call failing is the error of
/// `doing` (the act on one item, `deleting topic`) in the plural; an item that failed with a
/// code in `tolerated` counts as done, any other failure is the error, naming the item.
async fn settle(
    call: impl Future<Output = KafkaResult<Vec<ItemResult>>>,
    doing: &str,
    tolerated: &[RDKafkaErrorCode],
) -> Result<()> {
    let results = call.await.map_err(|e| kafka(format!("{doing}s"), e))?;
    for r in results {
        if let Err((name, code)) = r
            && !tolerated.contains(&code)
        {
            return Err(Error::new(
                kind_of_code(code),
                format!("{doing} {name}: {code}"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_with_a_wildcard_word_is_a_pattern() {
        assert!(is_pattern("order.*") && is_pattern("#") && !is_pattern("order.created"));
        assert!(!is_pattern("order.a*") && !is_pattern("order.#x"));
    }

    #[test]
    fn a_consumer_without_a_name_is_refused() {
        let e = Topology::new(
            &KafkaConfig::new("x:1"),
            Consumers::default().with("", &["a.b"]),
        )
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Config);
        assert!(e.message().contains("must not be empty"), "{e}");
    }

    #[test]
    fn a_consumer_whose_group_is_another_consumers_parking_group_is_refused() {
        let e = Topology::new(
            &KafkaConfig::new("x:1").prefix("shop"),
            Consumers::default()
                .with("inv", &["a.b"])
                .with("inv.parking-ingest", &["c.d"]),
        )
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Config);
        assert!(e.message().contains("\"shop.inv.parking-ingest\""), "{e}");
        Topology::new(
            &KafkaConfig::new("x:1").prefix("shop"),
            Consumers::default()
                .with("inv", &["a.b"])
                .with("inv.parking", &["c.d"]),
        )
        .unwrap();
    }

    #[test]
    fn a_consumer_needs_its_routes_stages_redrive_and_parking() {
        let config = KafkaConfig::new("x:1")
            .prefix("shop")
            .ladder("5s,30s".parse().unwrap());
        let topics = consumer_topics(&config, "inv", &["order.created".into(), "order.*".into()]);
        assert_eq!(
            topics,
            vec![
                "shop.order.created",
                "shop.inv.retry.5s",
                "shop.inv.retry.30s",
                "shop.inv.redrive",
                "shop.inv.parking",
                "shop.inv.deliveries"
            ]
        );
    }
}
