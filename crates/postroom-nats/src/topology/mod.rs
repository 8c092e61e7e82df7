//! The workload's streams and durables from its configuration: [`Topology::plan`] lists what
//! differs from the server (empty when up to date), [`Topology::apply`] creates or updates,
//! and refuses when something cannot be changed in place.

pub mod change;
pub mod desired;
pub mod reset;
pub mod wire;

pub use change::Change;
pub use desired::{ConsumerSpec, DesiredTopology};

use crate::config::NatsConfig;
use crate::connection::NatsConnection;
use crate::error::{api, api_empty, is_not_found};
use postroom_core::Result;
use std::collections::BTreeSet;
use wire::{ConsumerConfig, ConsumerInfo, CreateConsumer, StreamConfig, StreamInfo};

/// A workload's topology against one server.
#[derive(Clone, Debug)]
pub struct Topology {
    conn: NatsConnection,
    config: NatsConfig,
    desired: DesiredTopology,
}

impl Topology {
    /// The topology of `config` (validated) on `conn`.
    pub fn new(conn: NatsConnection, config: NatsConfig) -> Result<Self> {
        config.validate()?;
        let desired = DesiredTopology::of(&config);
        Ok(Self {
            conn,
            config,
            desired,
        })
    }

    /// What the configuration asks for.
    #[must_use]
    pub fn desired(&self) -> &DesiredTopology {
        &self.desired
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &NatsConfig {
        &self.config
    }

    /// The changes `apply` would make; empty when the server is up to date.
    pub async fn plan(&self) -> Result<Vec<Change>> {
        let mut out = Vec::new();
        for want in &self.desired.streams {
            let have: Result<StreamInfo> = api_empty(
                self.conn.client(),
                &format!("reading stream {}", want.name),
                format!("STREAM.INFO.{}", want.name),
            )
            .await;
            match have {
                Err(e) if is_not_found(&e) => out.push(Change::CreateStream(want.clone())),
                Err(e) => return Err(e),
                Ok(info) => out.extend(stream_change(want, &info.config)),
            }
        }
        for want in &self.desired.consumers {
            let have: Result<ConsumerInfo> = api_empty(
                self.conn.client(),
                &format!(
                    "reading durable {}/{}",
                    want.stream, want.config.durable_name
                ),
                format!("CONSUMER.INFO.{}.{}", want.stream, want.config.durable_name),
            )
            .await;
            match have {
                Err(e) if is_not_found(&e) => out.push(Change::CreateConsumer(want.clone())),
                Err(e) => return Err(e),
                Ok(info) => out.extend(consumer_change(want, &info.config)),
            }
        }
        Ok(out)
    }

    /// Create or update what differs; refuses (changing nothing) when the plan has a conflict.
    /// Returns the changes made.
    pub async fn apply(&self) -> Result<Vec<Change>> {
        let plan = self.plan().await?;
        postroom_core::refuse_conflicts("NATS", &plan)?;
        let js = self.conn.jetstream();
        for change in &plan {
            match change {
                Change::CreateStream(s) | Change::UpdateStream { want: s, .. } => {
                    let verb = if matches!(change, Change::CreateStream(_)) {
                        "CREATE"
                    } else {
                        "UPDATE"
                    };
                    let _: StreamInfo = api(
                        js,
                        &format!("{change}"),
                        format!("STREAM.{verb}.{}", s.name),
                        s,
                    )
                    .await?;
                }
                Change::CreateConsumer(c) | Change::UpdateConsumer { want: c, .. } => {
                    create_consumer(&self.conn, &c.stream, &c.config).await?;
                }
                Change::Conflict { .. } => unreachable!("conflicts refused above"),
            }
            tracing::info!(change = %change, "NATS topology changed");
        }
        Ok(plan)
    }
}

/// Create or update one durable (2.9's durable create updates a compatible one in place).
pub async fn create_consumer(
    conn: &NatsConnection,
    stream: &str,
    config: &ConsumerConfig,
) -> Result<ConsumerInfo> {
    api(
        conn.jetstream(),
        &format!("creating durable {stream}/{}", config.durable_name),
        format!("CONSUMER.DURABLE.CREATE.{stream}.{}", config.durable_name),
        &CreateConsumer {
            stream_name: stream,
            config,
        },
    )
    .await
}

fn stream_change(want: &StreamConfig, have: &StreamConfig) -> Option<Change> {
    let mut conflict = Vec::new();
    if want.storage != have.storage {
        conflict.push(format!(
            "storage {} (wanted {})",
            have.storage, want.storage
        ));
    }
    if want.retention != have.retention {
        conflict.push(format!(
            "retention {} (wanted {})",
            have.retention, want.retention
        ));
    }
    if !conflict.is_empty() {
        return Some(Change::Conflict {
            name: want.name.clone(),
            differs: conflict,
        });
    }
    let mut differs = Vec::new();
    let (w, h): (BTreeSet<_>, BTreeSet<_>) = (
        want.subjects.iter().collect(),
        have.subjects.iter().collect(),
    );
    if w != h {
        differs.push(format!(
            "subjects {:?} -> {:?}",
            have.subjects, want.subjects
        ));
    }
    differ(&mut differs, "max_age", &have.max_age, &want.max_age);
    differ(
        &mut differs,
        "duplicate_window",
        &have.duplicate_window,
        &want.duplicate_window,
    );
    differ(
        &mut differs,
        "replicas",
        &have.num_replicas,
        &want.num_replicas,
    );
    (!differs.is_empty()).then(|| Change::UpdateStream {
        want: want.clone(),
        differs,
    })
}

fn consumer_change(want: &ConsumerSpec, have: &ConsumerConfig) -> Option<Change> {
    let w = &want.config;
    let mut conflict = Vec::new();
    if w.filter_subject != have.filter_subject {
        conflict.push(format!(
            "filter {:?} (wanted {:?})",
            have.filter_subject, w.filter_subject
        ));
    }
    for (what, a, b) in [
        ("ack_policy", &w.ack_policy, &have.ack_policy),
        ("deliver_policy", &w.deliver_policy, &have.deliver_policy),
        ("replay_policy", &w.replay_policy, &have.replay_policy),
    ] {
        if a != b {
            conflict.push(format!("{what} {b} (wanted {a})"));
        }
    }
    if !conflict.is_empty() {
        return Some(Change::Conflict {
            name: format!("{}/{}", want.stream, w.durable_name),
            differs: conflict,
        });
    }
    let mut differs = Vec::new();
    differ(&mut differs, "ack_wait", &have.ack_wait, &w.ack_wait);
    differ(
        &mut differs,
        "max_deliver",
        &have.max_deliver,
        &w.max_deliver,
    );
    differ(
        &mut differs,
        "max_ack_pending",
        &have.max_ack_pending,
        &w.max_ack_pending,
    );
    differ(&mut differs, "backoff", &have.backoff, &w.backoff);
    (!differs.is_empty()).then(|| Change::UpdateConsumer {
        want: want.clone(),
        differs,
    })
}

/// Note in `differs` that setting `what` would change from `have` to `want`, when it would.
fn differ<T: PartialEq + std::fmt::Debug>(
    differs: &mut Vec<String>,
    what: &str,
    have: &T,
    want: &T,
) {
    if have != want {
        differs.push(format!("{what} {have:?} -> {want:?}"));
    }
}

postroom_core::broker_topology!(Topology, Change);
