//! PostgreSQL: the outbox, the parking lot and a queue in tables named with a prefix.

use crate::{InboxQueue, InboxQueueConfig, OrderedMode, PgOptions, PgQueue, PgStore, TablePrefix};
use postroom_core::Result;
use postroom_core::driver::Endpoint;
use postroom_core::driver::{Driver, QueueOptions, Store, StoreDriver, StoreOptions, cannot_reach};
use postroom_core::{InboxLookup, OutboxStore, ParkingStore, Transport, async_trait};
use std::any::Any;
use std::sync::Arc;

/// Opens `postgres://` databases.
#[derive(Clone, Copy, Debug, Default)]
pub struct PostgresDriver;

impl Driver for PostgresDriver {
    fn name(&self) -> &'static str {
        "postgres"
    }

    fn schemes(&self) -> &'static [&'static str] {
        &["postgres", "postgresql"]
    }

    fn url_help(&self) -> &'static str {
        "postgres://user@host:5432/db (PostgreSQL; ?sslmode=verify-full&sslrootcert=ca.pem for TLS)"
    }
}

#[async_trait(?Send)]
impl StoreDriver for PostgresDriver {
    /// Connect and apply pending migrations under the table prefix.
    async fn open(&self, endpoint: &Endpoint, options: &StoreOptions) -> Result<Arc<dyn Store>> {
        let mut pg = PgOptions::default();
        if let Some(p) = &options.table_prefix {
            pg = pg.prefix(TablePrefix::new(p)?);
        }
        if let Some(n) = options.max_connections {
            pg = pg.max_connections(n);
        }
        let store = PgStore::connect_with(endpoint.expose(), pg)
            .await
            .map_err(|e| cannot_reach("PostgreSQL", endpoint, e))?;
        store
            .migrate()
            .await
            .map_err(|e| cannot_reach("PostgreSQL", endpoint, e))?;
        Ok(Arc::new(PgDatabase {
            store,
            location: endpoint.redacted(),
        }))
    }
}

/// An open PostgreSQL database.
#[derive(Clone, Debug)]
pub struct PgDatabase {
    /// The store.
    pub store: PgStore,
    location: String,
}

impl Store for PgDatabase {
    fn driver(&self) -> &'static str {
        "postgres"
    }

    fn location(&self) -> String {
        self.location.clone()
    }

    fn outbox(&self) -> Arc<dyn OutboxStore> {
        Arc::new(self.store.outbox())
    }

    fn deleting_outbox(&self) -> Option<Arc<dyn OutboxStore>> {
        Some(Arc::new(self.store.outbox().delete_on_publish()))
    }

    fn inbox(&self) -> Option<Arc<dyn InboxLookup>> {
        Some(Arc::new(self.store.clone()))
    }

    fn parking(&self) -> Arc<dyn ParkingStore> {
        Arc::new(self.store.parking())
    }

    fn queue(&self, options: &QueueOptions) -> Result<Arc<dyn Transport>> {
        let config = options.apply(PgQueue::defaults());
        Ok(Arc::new(self.store.queue(config)?))
    }

    fn table_prefix(&self) -> Option<String> {
        Some(self.store.prefix().to_string())
    }

    fn inbox_feed(
        &self,
        consumer: &str,
        ordered: bool,
    ) -> Result<Arc<dyn postroom_core::InboxFeed>> {
        let decoder = postroom_core::EnvelopeDecoder::new();
        let mut config =
            InboxQueueConfig::new(postroom_core::ConsumerConfig::new(consumer, decoder));
        if ordered {
            // The feed only stores rows: the workers' own settings decide how long they wait.
            config.ordered = Some(OrderedMode {
                gap_wait: std::time::Duration::from_secs(30),
                recheck: std::time::Duration::from_secs(1),
            });
        }
        let queue = InboxQueue::new(
            self.store.pool().clone(),
            self.store.prefix().clone(),
            config,
        )?;
        Ok(Arc::new(queue))
    }

    fn last_errors(&self) -> Option<Arc<dyn postroom_core::parking::LastErrorLog>> {
        Some(Arc::new(self.store.last_errors()))
    }

    fn as_any(&self) -> &dyn Any {
        &self.store
    }
}
