//! A workload's topology planned and applied through the management API.

use super::desired::{self, policy_name};
use super::{Change, DesiredTopology};
use crate::config::TopologyConfig;
use crate::management::ManagementApi;
use crate::naming::ConsumerNames;
use postroom_core::Result;
use std::collections::BTreeSet;

/// A workload's topology and the management API it is applied through.
#[derive(Clone, Debug)]
pub struct Topology {
    config: TopologyConfig,
    api: ManagementApi,
}

impl Topology {
    /// A topology for `config`, read and written through `api`.
    pub fn new(config: TopologyConfig, api: ManagementApi) -> Result<Self> {
        config.validate()?;
        Ok(Self { config, api })
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &TopologyConfig {
        &self.config
    }

    /// The management API client.
    #[must_use]
    pub fn api(&self) -> &ManagementApi {
        &self.api
    }

    /// The desired state.
    #[must_use]
    pub fn desired(&self) -> DesiredTopology {
        DesiredTopology::of(&self.config)
    }

    /// The names of one consumer's queues and exchanges.
    #[must_use]
    pub fn names(&self, consumer: &str) -> ConsumerNames {
        self.config.names(consumer)
    }

    /// Delete the workload from the broker (decommissioning it, a test's cleanup): every
    /// queue, exchange and policy named with its prefix, and its work exchange too when that
    /// carries no prefix (the default `orders`) and nothing of another workload is bound to
    /// it any more. Returns how many objects were deleted.
    pub async fn delete(&self) -> Result<usize> {
        let prefix = &self.config.prefix;
        let mut n = self
            .api
            .delete_everything_named(&format!("{prefix}."))
            .await?;
        let exchange = &self.config.exchange;
        if exchange.is_empty() || exchange.starts_with(&format!("{prefix}.")) {
            return Ok(n);
        }
        let shared = self
            .api
            .bindings()
            .await?
            .iter()
            .any(|b| &b.source == exchange);
        if shared {
            tracing::info!(exchange = %exchange, "work exchange kept: other workloads are bound to it");
        } else if self
            .api
            .exchanges()
            .await?
            .iter()
            .any(|e| &e.name == exchange)
        {
            self.api.delete_exchange(exchange).await?;
            n += 1;
        }
        Ok(n)
    }

    /// What `apply` would change; empty on an up-to-date broker.
    pub async fn plan(&self) -> Result<Vec<Change>> {
        let (exchanges, queues, bindings, policies) = tokio::try_join!(
            self.api.exchanges(),
            self.api.queues(),
            self.api.bindings(),
            self.api.policies()
        )?;
        let d = self.desired();
        let mut changes = Vec::new();

        for p in &d.policies {
            let same = policies.iter().any(|a| {
                a.name == p.name
                    && a.pattern == p.pattern
                    && a.apply_to == p.apply_to
                    && a.definition == p.definition
                    && a.priority == p.priority
            });
            if !same {
                changes.push(Change::SetPolicy(p.clone()));
            }
        }
        let mut seen = BTreeSet::new();
        for e in d.exchanges.iter().filter(|e| seen.insert(e.name.clone())) {
            match exchanges.iter().find(|a| a.name == e.name) {
                None => changes.push(Change::CreateExchange(e.clone())),
                Some(a) if a.kind != e.kind || !a.durable || a.arguments != e.arguments => changes
                    .push(Change::ExchangeConflict {
                        name: e.name.clone(),
                        want: format!(
                            "durable {} {}",
                            e.kind,
                            serde_json::Value::Object(e.arguments.clone())
                        ),
                        have: format!(
                            "{}{} {}",
                            if a.durable { "durable " } else { "transient " },
                            a.kind,
                            serde_json::Value::Object(a.arguments.clone())
                        ),
                    }),
                Some(_) => {}
            }
        }
        for q in &d.queues {
            match queues.iter().find(|a| a.name == q.name) {
                None => changes.push(Change::CreateQueue(q.clone())),
                Some(a)
                    if a.kind != self.config.queue_type.as_str()
                        || a.arguments != q.arguments
                        || !a.durable =>
                {
                    changes.push(Change::QueueConflict {
                        name: q.name.clone(),
                        want: format!(
                            "durable {} queue with arguments {}",
                            self.config.queue_type.as_str(),
                            serde_json::Value::Object(q.arguments.clone())
                        ),
                        have: format!(
                            "{} queue with arguments {}",
                            a.kind,
                            serde_json::Value::Object(a.arguments.clone())
                        ),
                    });
                }
                Some(_) => {}
            }
        }
        let same = |a: &crate::management::BindingInfo, b: &desired::BindingSpec| {
            a.source == b.source
                && a.destination == b.destination
                && a.destination_type == if b.to_exchange { "exchange" } else { "queue" }
                && a.routing_key == b.key
        };
        for b in &d.bindings {
            if !bindings.iter().any(|a| same(a, b)) {
                changes.push(Change::CreateBinding(b.clone()));
            }
        }
        let managed_queues: BTreeSet<&str> = d.queues.iter().map(|q| q.name.as_str()).collect();
        let managed_exchanges: BTreeSet<&str> =
            d.exchanges.iter().map(|e| e.name.as_str()).collect();
        for a in &bindings {
            let managed_destination = match a.destination_type.as_str() {
                "queue" => managed_queues.contains(a.destination.as_str()),
                _ => managed_exchanges.contains(a.destination.as_str()),
            };
            let ours = managed_destination && managed_exchanges.contains(a.source.as_str());
            if ours && !d.bindings.iter().any(|b| same(a, b)) {
                changes.push(Change::RemoveBinding(a.clone()));
            }
        }
        let wanted_policies: BTreeSet<&str> = d.policies.iter().map(|p| p.name.as_str()).collect();
        for c in &self.config.consumers {
            let n = self.names(&c.name);
            let own = policy_name(&n.work_queue);
            for p in &policies {
                let mine = p.name == own || p.name.starts_with(&format!("{own}."));
                if mine && !wanted_policies.contains(p.name.as_str()) {
                    changes.push(Change::RemovePolicy(p.name.clone()));
                }
            }
            let stage_prefix = format!("{}.retry.", n.work_queue);
            for q in &queues {
                if q.name.starts_with(&stage_prefix) && !managed_queues.contains(q.name.as_str()) {
                    changes.push(Change::StaleQueue(q.name.clone()));
                }
            }
        }
        Ok(changes)
    }

    /// Bring the broker to the configuration. Refuses (changing nothing) when the plan holds a
    /// conflict that cannot be fixed in place. Returns the changes made.
    pub async fn apply(&self) -> Result<Vec<Change>> {
        let plan = self.plan().await?;
        postroom_core::refuse_conflicts("RabbitMQ", &plan)?;
        for change in &plan {
            match change {
                Change::SetPolicy(p) => self.api.put_policy(p).await?,
                Change::CreateExchange(e) => {
                    self.api
                        .declare_exchange(&e.name, &e.kind, e.arguments.clone())
                        .await?
                }
                Change::CreateQueue(q) => {
                    self.api.declare_queue(&q.name, q.arguments.clone()).await?
                }
                Change::CreateBinding(b) => {
                    self.api
                        .bind(&b.source, &b.destination, b.to_exchange, &b.key)
                        .await?
                }
                Change::RemoveBinding(b) => self.api.unbind(b).await?,
                Change::RemovePolicy(name) => self.api.delete_policy(name).await?,
                Change::StaleQueue(_)
                | Change::ExchangeConflict { .. }
                | Change::QueueConflict { .. } => {}
            }
            tracing::info!(%change, "topology change applied");
        }
        Ok(plan)
    }
}

postroom_core::broker_topology!(Topology, Change);
