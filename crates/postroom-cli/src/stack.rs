//! The store and transport a command runs on, chosen at run time from URLs:
//! `--database` (a SQLite file path, `sqlite://path`, or `postgres://…`) and `--broker`
//! (`amqp://…` for RabbitMQ). Without a broker the queue lives in the database (embedded queue).

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
    /// RabbitMQ.
    Rabbit(Arc<RabbitTransport>),
}

/// RabbitMQ as the transport of a workload: its topology, a confirming publisher, subscribers.
pub struct RabbitTransport {
    /// The self-healing connection.
    pub broker: Arc<postroom_rabbitmq::Broker>,
    /// The confirming publisher.
    pub publisher: Arc<postroom_rabbitmq::ConfirmingPublisher>,
    /// The topology (config + management API).
    pub topology: postroom_rabbitmq::Topology,
    /// Prefetch of subscribers.
    pub prefetch: u16,
}

/// What a workload on RabbitMQ needs to know to declare its topology.
#[derive(Clone, Debug)]
pub struct Workload {
    /// Queue and exchange name prefix.
    pub prefix: String,
    /// Retry ladder (one stage queue per delay).
    pub ladder: postroom_core::RetryLadder,
    /// Consumers and their topic bindings.
    pub consumers: Vec<(String, Vec<String>)>,
}

/// The management API URL for `amqp_url`: `POSTROOM_BROKER_API`, or the same user, password
/// and host on port 15672.
#[must_use]
pub fn management_url(amqp_url: &str) -> String {
    if let Ok(v) = std::env::var("POSTROOM_BROKER_API") {
        return v;
    }
    let rest = amqp_url.split_once("://").map_or(amqp_url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or(rest);
    let (cred, host) = authority
        .rsplit_once('@')
        .map_or(("guest:guest", authority), |(c, h)| (c, h));
    let host = host.rsplit_once(':').map_or(host, |(h, _)| h);
    format!("http://{cred}@{host}:15672")
}

impl RabbitTransport {
    /// Connect, and when `declare` is set, delete whatever the workload's prefix names on the
    /// broker and declare its topology afresh.
    pub async fn open(
        url: &str,
        workload: &Workload,
        prefetch: u16,
        declare: bool,
    ) -> CliResult<Self> {
        let mut config = postroom_rabbitmq::TopologyConfig {
            prefix: workload.prefix.clone(),
            exchange: format!("{}.orders", workload.prefix),
            ladder: workload.ladder.clone(),
            ..postroom_rabbitmq::TopologyConfig::default()
        };
        for (name, bindings) in &workload.consumers {
            let b: Vec<&str> = bindings.iter().map(String::as_str).collect();
            config = config.with_consumer(name, &b);
        }
        let api = postroom_rabbitmq::ManagementApi::new(&management_url(url), &config.vhost)?;
        let topology = postroom_rabbitmq::Topology::new(config, api)?;
        let broker = postroom_rabbitmq::Broker::connect(url).await.map_err(|e| {
            let mut err = CliError::from(e);
            err.message = format!(
                "cannot reach RabbitMQ at {}: {}",
                postroom_rabbitmq::connection::redact(url),
                err.message
            );
            err
        })?;
        if declare {
            // The workload's queues belong to this run: start from an empty broker state, so
            // that no message of an earlier, interrupted run is delivered into this one.
            topology
                .api()
                .delete_everything_named(&format!("{}.", workload.prefix))
                .await?;
            topology.apply().await?;
        }
        let publisher = Arc::new(postroom_rabbitmq::ConfirmingPublisher::new(
            broker.clone(),
            topology.config(),
        ));
        Ok(Self {
            broker,
            publisher,
            topology,
            prefetch,
        })
    }

    /// Messages in the workload's queues (work, retry stages, parking), from the management
    /// API (its figures lag a few seconds).
    pub async fn in_flight(&self) -> CliResult<u64> {
        let prefix = format!("{}.", self.topology.config().prefix);
        let queues = self.topology.api().queues().await?;
        Ok(queues
            .iter()
            .filter(|q| q.name.starts_with(&prefix))
            .map(|q| q.messages.unwrap_or(0))
            .sum())
    }

    /// Move parked messages of every consumer from their parking queues into `store`, until
    /// `stop` turns true.
    pub fn spawn_parking_ingest(
        &self,
        store: Arc<dyn ParkingStore>,
        stop: &tokio::sync::watch::Receiver<bool>,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        self.topology
            .config()
            .consumers
            .iter()
            .map(|c| {
                let ingest = postroom_rabbitmq::ParkingIngest::new(
                    self.broker.clone(),
                    self.topology.names(&c.name),
                    store.clone(),
                );
                let rx = stop.clone();
                tokio::spawn(async move { ingest.run(rx).await })
            })
            .collect()
    }
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
    /// Open the demo/soak stack on `database` and `broker` (`None`: the embedded queue).
    /// `declare` applies the RabbitMQ topology (the parent process does it once).
    pub async fn open(
        database: &DatabaseUrl,
        broker: Option<(&str, &Workload, bool)>,
        lease: Duration,
        prefetch: usize,
    ) -> CliResult<Self> {
        let mut stack = Self::open_embedded(database, lease, prefetch).await?;
        if let Some((url, workload, declare)) = broker {
            if !(url.starts_with("amqp://") || url.starts_with("amqps://")) {
                return Err(CliError::usage(format!(
                    "unsupported broker URL {url:?}: use amqp://user:pass@host:5672/%2f"
                )));
            }
            let prefetch = u16::try_from(prefetch)
                .map_err(|_| CliError::usage("prefetch must be at most 65535"))?;
            stack.transport = Transport::Rabbit(Arc::new(
                RabbitTransport::open(url, workload, prefetch, declare).await?,
            ));
        }
        Ok(stack)
    }

    async fn open_embedded(
        database: &DatabaseUrl,
        lease: Duration,
        prefetch: usize,
    ) -> CliResult<Self> {
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
            Transport::Rabbit(r) => r.publisher.clone(),
        }
    }

    /// Bind `consumer` to `topics` so that nothing published for it is unroutable.
    pub async fn bind(&self, consumer: &str, topics: &[&str]) -> CliResult {
        match &self.transport {
            Transport::Sqlite(q) => q.bind(consumer, topics).await?,
            Transport::Postgres(q) => q.bind(consumer, topics).await?,
            // The topology declared the bindings.
            Transport::Rabbit(_) => {}
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
            Transport::Rabbit(r) => BoxSubscriber::new(postroom_rabbitmq::RabbitSubscriber::new(
                r.broker.clone(),
                r.publisher.clone(),
                r.topology.config(),
                consumer,
                postroom_rabbitmq::SubscriberOptions::new(r.prefetch),
            )?),
        })
    }

    /// Messages not yet settled on the transport.
    pub async fn in_flight(&self) -> CliResult<u64> {
        match &self.transport {
            Transport::Rabbit(r) => r.in_flight().await,
            Transport::Sqlite(_) | Transport::Postgres(_) => Ok(self.shop.in_flight().await?),
        }
    }

    /// Whether the transport reports figures with a lag (then quiescence must hold a while).
    #[must_use]
    pub fn lagging_figures(&self) -> bool {
        matches!(self.transport, Transport::Rabbit(_))
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
    create: bool,
) -> CliResult<(Arc<dyn ParkingStore>, Arc<dyn Publisher>)> {
    match database {
        DatabaseUrl::Sqlite(path) => {
            if !create && !path.exists() {
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
    fn management_url_from_amqp() {
        assert_eq!(
            super::management_url("amqp://u:p@example:5672/%2f"),
            "http://u:p@example:15672"
        );
        assert_eq!(
            super::management_url("amqp://127.0.0.1"),
            "http://guest:guest@127.0.0.1:15672"
        );
    }

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
