//! The shop and the pipeline its messages travel on, opened through `postroom::Service` (the
//! one composition root) from the database and broker URLs: the shop for the store's kind,
//! and a broker when one is given, else the queue in the store's own tables.

use crate::shop::{INVENTORY, INVENTORY_TOPICS, ORDERS, ORDERS_TOPICS, ShopDb, kind_for};
use postroom::{Running, Service};
use postroom_core::RetryPolicy;
use postroom_core::{
    BoxSubscriber, OutboxStore, ParkedMessage, ParkingFilter, ParkingStore, Publisher,
};
use postroom_ops::args::PasswordArgs;
use postroom_ops::{Endpoint, OpsResult, Registry, UrlText, Workload};
use std::sync::Arc;
use std::time::Duration;

/// How long quiescence must hold where the transport's figures lag (a broker's management
/// figures rather than a count in the store's tables).
const LAGGING_FIGURES_HOLD: Duration = Duration::from_secs(7);

/// The database and broker of a run, with passwords from their sources applied.
pub fn endpoints(
    database: &UrlText,
    broker: Option<&UrlText>,
    passwords: &PasswordArgs,
) -> OpsResult<(Endpoint, Option<Endpoint>)> {
    let database = passwords
        .database()
        .apply(Endpoint::database(&database.0)?)?;
    let broker = broker
        .map(|b| passwords.broker().apply(Endpoint::broker(&b.0)?))
        .transpose()?;
    Ok((database, broker))
}

/// Open the stack of a child process from what its parent gave it; with the ladder.
pub async fn open_child(
    args: &crate::args::ChildArgs,
    lease: Duration,
    prefetch: usize,
) -> OpsResult<(Stack, postroom_core::RetryLadder)> {
    let ladder = postroom_ops::time::parse_ladder(&args.ladder)?;
    let (database, broker) = endpoints(
        &args.database,
        args.broker.as_ref(),
        &PasswordArgs::default(),
    )?;
    let stack = Stack::open(StackSpec {
        database,
        broker,
        workload: crate::shop::workload(&args.workload, ladder.clone()),
        lease,
        prefetch,
    })
    .await?;
    Ok((stack, ladder))
}

/// What to open.
#[derive(Clone, Debug)]
pub struct StackSpec {
    /// The database.
    pub database: Endpoint,
    /// The broker, or `None` for the queue in the database.
    pub broker: Option<Endpoint>,
    /// The shop's consumers under a name prefix.
    pub workload: Workload,
    /// How long a delivery stays leased before it is delivered again: the table queue's
    /// lease, a broker's ack wait (NATS) or visibility timeout (SQS) where it has one.
    pub lease: Duration,
    /// Deliveries a subscription may hold.
    pub prefetch: usize,
}

/// The shop and its pipeline.
pub struct Stack {
    /// The business tables.
    pub shop: Arc<dyn ShopDb>,
    /// Store and transport.
    pub pipeline: postroom::Stack,
    running: tokio::sync::Mutex<Option<Running>>,
    /// The outbox (relays' side).
    pub outbox: Arc<dyn OutboxStore>,
    /// The parking lot.
    pub parking: Arc<dyn ParkingStore>,
    /// The database.
    pub database: Endpoint,
    prefetch: usize,
}

impl Stack {
    /// Stop what the service runs (the parent's parking ingest) and close the transport's
    /// connections (a process of the run is done with it): a broker link left open when the
    /// process ends is torn down under it and says so in errors. Again is a no-op.
    pub async fn close(&self) {
        if let Some(running) = self.running.lock().await.take() {
            running.shutdown().await;
        }
    }

    /// Open for a process of a run that its parent already started.
    pub async fn open(spec: StackSpec) -> OpsResult<Self> {
        Self::open_with(spec, false).await
    }

    /// Start a new run: make the database ready (a previous demo file is recreated), start
    /// the broker's workload from an empty state, reset the shop's tables, and bind both
    /// consumers before anything is published, so nothing is unroutable.
    pub async fn start(spec: StackSpec) -> OpsResult<Self> {
        let stack = Self::open_with(spec, true).await?;
        stack.shop.reset().await?;
        stack.bind(INVENTORY, INVENTORY_TOPICS).await?;
        stack.bind(ORDERS, ORDERS_TOPICS).await?;
        Ok(stack)
    }

    async fn open_with(spec: StackSpec, fresh: bool) -> OpsResult<Self> {
        let registry = Registry::builtin();
        let kind = kind_for(registry.store_driver(&spec.database)?.name())?;
        if fresh {
            kind.prepare(&spec.database).await?;
        }
        let w = &spec.workload;
        let mut b = Service::builder()
            .database_at(spec.database.clone())
            .prefix(&w.prefix)
            .redelivery_after(spec.lease)
            .queue_lease(spec.lease)
            .queue_prefetch(spec.prefetch)
            // The run binds what it publishes to itself, before it publishes.
            .declare_topology(false);
        if let Some(ladder) = &w.ladder {
            b = b.retry(RetryPolicy::default().ladder(ladder.clone()));
        }
        if let Some(prefix) = kind.table_prefix() {
            b = b.table_prefix(prefix);
        }
        if let Some(broker) = spec.broker {
            b = b.broker_at(broker);
        }
        if fresh {
            b = b.fresh();
        }
        let mut service = b.open().await?;
        for c in &w.consumers {
            let routes: Vec<&str> = c.routes.iter().map(String::as_str).collect();
            service = service.bind_for(&c.name, &routes);
        }
        if fresh {
            // The run's parent moves the dead-lettered copies into the parking lot.
            service = service.ingest_parked();
        }
        let running = service.start().await?;
        let pipeline = running.stack().clone();
        let store = postroom_ops::store_of(&pipeline)?.clone();
        Ok(Self {
            shop: kind.open(store.as_ref())?,
            outbox: store.outbox(),
            parking: store.parking(),
            pipeline,
            running: tokio::sync::Mutex::new(Some(running)),
            database: spec.database,
            prefetch: spec.prefetch,
        })
    }

    /// The confirming publisher.
    #[must_use]
    pub fn publisher(&self) -> Arc<dyn Publisher> {
        self.pipeline.transport().publisher()
    }

    /// Bind `consumer` to `topics`.
    pub async fn bind(&self, consumer: &str, topics: &[&str]) -> OpsResult {
        Ok(self.pipeline.bind(consumer, topics, self.prefetch).await?)
    }

    /// Subscribe `consumer` to `topics`.
    pub async fn subscribe(&self, consumer: &str, topics: &[&str]) -> OpsResult<BoxSubscriber> {
        Ok(self
            .pipeline
            .subscribe(consumer, topics, self.prefetch)
            .await?)
    }

    /// Messages not yet settled on the transport (`u64::MAX` when the figure cannot be read
    /// now: that counts as "not quiet yet").
    pub async fn in_flight(&self) -> u64 {
        self.pipeline.in_flight().await.unwrap_or(u64::MAX)
    }

    /// How long quiescence must hold before it counts.
    #[must_use]
    pub fn settle_hold(&self) -> Duration {
        if self.pipeline.exact_figures() {
            Duration::ZERO
        } else {
            LAGGING_FIGURES_HOLD
        }
    }

    /// Everything `consumer` parked, redriven or not.
    pub async fn parked_by(&self, consumer: &str) -> OpsResult<Vec<ParkedMessage>> {
        let filter = ParkingFilter {
            consumer: Some(consumer.into()),
            include_redriven: true,
            ..ParkingFilter::default()
        };
        Ok(self.parking.search(&filter, 1_000_000).await?)
    }

    /// The command that lists what the run parked.
    #[must_use]
    pub fn parking_hint(&self) -> String {
        let prefix = self
            .pipeline
            .store()
            .and_then(|s| s.table_prefix())
            .map(|p| format!(" --table-prefix {p}"))
            .unwrap_or_default();
        format!(
            "postroom parking list --database {}{prefix}",
            self.database.redacted()
        )
    }
}

/// `in_flight` as printed: `?` when it could not be read.
#[must_use]
pub fn shown(in_flight: u64) -> String {
    if in_flight == u64::MAX {
        "?".into()
    } else {
        in_flight.to_string()
    }
}
