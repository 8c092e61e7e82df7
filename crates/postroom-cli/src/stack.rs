//! The store and transport a command runs on, chosen at run time from URLs:
//! `--database` (a SQLite file path, `sqlite://path`, or `postgres://…`) and, later,
//! `--broker`. Without a broker the queue lives in the database (embedded queue).

use crate::error::{CliError, CliResult};
use crate::shop::ShopDb;
use crate::shop::postgres::PgShop;
use crate::shop::sqlite::SqliteShop;
use postroom_core::boxed::BoxSubscriber;
use postroom_core::{ParkingStore, Publisher};
use postroom_postgres::{PgQueue, QueueConfig};
use postroom_sqlite::{SqliteQueue, SqliteStore, SubscribeOptions};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Which database a URL names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DatabaseUrl {
    /// A SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL URL.
    Postgres(String),
}

impl DatabaseUrl {
    /// Parse `raw`.
    pub fn parse(raw: &str) -> CliResult<Self> {
        if raw.starts_with("postgres://") || raw.starts_with("postgresql://") {
            return Ok(Self::Postgres(raw.to_string()));
        }
        let path = raw.strip_prefix("sqlite://").unwrap_or(raw);
        if path.is_empty() {
            return Err(CliError::usage("database path is empty"));
        }
        if raw.contains("://") && !raw.starts_with("sqlite://") {
            return Err(CliError::usage(format!(
                "unsupported database URL {raw:?}: use a file path, sqlite://path or postgres://…"
            )));
        }
        Ok(Self::Sqlite(PathBuf::from(path)))
    }

    /// The form to pass to a child process.
    #[must_use]
    pub fn to_arg(&self) -> String {
        match self {
            Self::Sqlite(p) => p.display().to_string(),
            Self::Postgres(u) => u.clone(),
        }
    }
}

/// The transport.
#[derive(Clone)]
pub enum Transport {
    /// The embedded queue in the SQLite file.
    Sqlite(SqliteQueue),
    /// The queue in PostgreSQL tables.
    Postgres(PgQueue),
}

/// A shop database plus a transport.
#[derive(Clone)]
pub struct Stack {
    /// The business tables and the postroom stores.
    pub shop: Arc<dyn ShopDb>,
    /// The transport.
    pub transport: Transport,
    /// The database URL.
    pub database: DatabaseUrl,
}

impl Stack {
    /// Open the demo/soak stack on `database` (and `broker`, when given).
    pub async fn open(
        database: &DatabaseUrl,
        broker: Option<&str>,
        lease: Duration,
        prefetch: usize,
    ) -> CliResult<Self> {
        if let Some(b) = broker {
            return Err(CliError::usage(format!(
                "broker {b:?}: this build supports the embedded queue only (omit --broker)"
            )));
        }
        let (shop, transport): (Arc<dyn ShopDb>, Transport) = match database {
            DatabaseUrl::Sqlite(path) => {
                let store = SqliteStore::open(path).await?;
                (
                    Arc::new(SqliteShop {
                        store: store.clone(),
                    }),
                    Transport::Sqlite(store.queue().with_options(SubscribeOptions {
                        prefetch,
                        lease,
                        ..SubscribeOptions::default()
                    })),
                )
            }
            DatabaseUrl::Postgres(url) => {
                let shop = PgShop::connect(url)
                    .await
                    .map_err(|e| unreachable_db(url, e))?;
                let queue = shop
                    .store
                    .queue(QueueConfig::default().lease(lease).prefetch(prefetch))?;
                (Arc::new(shop), Transport::Postgres(queue))
            }
        };
        Ok(Self {
            shop,
            transport,
            database: database.clone(),
        })
    }

    /// The confirming publisher.
    #[must_use]
    pub fn publisher(&self) -> Arc<dyn Publisher> {
        match &self.transport {
            Transport::Sqlite(q) => Arc::new(q.clone()),
            Transport::Postgres(q) => Arc::new(q.clone()),
        }
    }

    /// Bind `consumer` to `topics` so that nothing published for it is unroutable.
    pub async fn bind(&self, consumer: &str, topics: &[&str]) -> CliResult {
        match &self.transport {
            Transport::Sqlite(q) => q.bind(consumer, topics).await?,
            Transport::Postgres(q) => q.bind(consumer, topics).await?,
        }
        Ok(())
    }

    /// Subscribe `consumer` to `topics`.
    pub async fn subscribe(&self, consumer: &str, topics: &[&str]) -> CliResult<BoxSubscriber> {
        Ok(match &self.transport {
            Transport::Sqlite(q) => {
                BoxSubscriber::new(q.subscribe_default(consumer, topics).await?)
            }
            Transport::Postgres(q) => BoxSubscriber::new(q.subscribe(consumer, topics).await?),
        })
    }

    /// Messages not yet settled on the transport.
    pub async fn in_flight(&self) -> CliResult<u64> {
        Ok(self.shop.in_flight().await?)
    }
}

fn unreachable_db(url: &str, e: postroom_core::Error) -> CliError {
    let shown = url.split('@').next_back().unwrap_or(url);
    let mut err = CliError::from(e);
    err.message = format!("cannot use PostgreSQL at {shown}: {}", err.message);
    err
}

/// Open just the parking store (and a publisher for redrive) for `parking` commands.
pub async fn open_parking(
    database: &DatabaseUrl,
    table_prefix: &str,
) -> CliResult<(Arc<dyn ParkingStore>, Arc<dyn Publisher>)> {
    match database {
        DatabaseUrl::Sqlite(path) => {
            if !path.exists() {
                return Err(CliError::usage(format!(
                    "database {} does not exist (pass --database or set POSTROOM_DATABASE)",
                    path.display()
                )));
            }
            let store = SqliteStore::open(path).await?;
            Ok((Arc::new(store.clone()), Arc::new(store.queue())))
        }
        DatabaseUrl::Postgres(url) => {
            let base = postroom_postgres::PgStore::connect(url)
                .await
                .map_err(|e| unreachable_db(url, e))?;
            let prefix = postroom_postgres::TablePrefix::new(table_prefix)?;
            let store = postroom_postgres::PgStore::from_pool(base.pool().clone(), prefix);
            store.migrate().await?;
            Ok((
                Arc::new(store.parking()),
                Arc::new(store.queue(QueueConfig::default())?),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::DatabaseUrl;
    use std::path::PathBuf;

    #[test]
    fn database_urls() {
        assert_eq!(
            DatabaseUrl::parse("sqlite://a.db").unwrap(),
            DatabaseUrl::Sqlite(PathBuf::from("a.db"))
        );
        assert_eq!(
            DatabaseUrl::parse("a.db").unwrap(),
            DatabaseUrl::Sqlite(PathBuf::from("a.db"))
        );
        assert!(matches!(
            DatabaseUrl::parse("postgres://u@h/db").unwrap(),
            DatabaseUrl::Postgres(_)
        ));
        assert!(DatabaseUrl::parse("mysql://x").is_err());
        assert!(DatabaseUrl::parse("").is_err());
    }
}
