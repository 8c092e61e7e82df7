//! # postroom-postgres
//!
//! postroom on PostgreSQL, for when one machine is not enough: the transactional outbox
//! written in your own transaction with relays claiming rows under leases and woken by
//! LISTEN/NOTIFY, the inbox, inbox-queue workers, the parking lot with resumable
//! redrive, and `PgQueue`, a queue transport in tables. Every table is named with a
//! configurable prefix (default `postroom_`) and created by versioned migrations.
//!
//! Connections use TLS (rustls) as the URL's `sslmode` says, and verify the server's
//! certificate whenever TLS is required: `?sslmode=verify-full&sslrootcert=/path/ca.pem`
//! (`require` is verified too; a URL without `sslmode` to a host off this machine means
//! `verify-full`). The whole policy is in [`tls`].
//!
//! Complete services on this store (producer, relay, consumer with the inbox, wired by the
//! `postroom` crate's `Service`) are `examples/src/bin/postgres_rabbitmq.rs` and
//! `examples/src/bin/postgres_nats.rs` in the repository: copy one and change the handler.
//! The pieces, by hand:
//!
//! ```no_run
//! # async fn demo() -> postroom_core::Result<()> {
//! use postroom_core::{Envelope, OutgoingMessage};
//! use postroom_postgres::{PgStore, inbox, outbox};
//!
//! let store = PgStore::connect("postgres://postgres@127.0.0.1:5432/app").await?;
//! store.migrate().await?;
//!
//! // Producer: the business row and the outbox row in one transaction.
//! let env = Envelope::builder("order.created", "orders").aggregate("order", "o-1", 1).build();
//! let mut tx = store.begin().await?;
//! sqlx::query("INSERT INTO orders (id) VALUES ('o-1')").execute(&mut *tx).await.map_err(postroom_postgres::map_error)?;
//! let msg = OutgoingMessage::from_envelope(&env, "order.created");
//! outbox::enqueue(&mut tx, store.prefix(), &msg).await?;
//! postroom_postgres::commit(tx).await?;
//!
//! // Consumer: claim the inbox row in the business transaction.
//! let mut tx = store.begin().await?;
//! if inbox::claim(&mut tx, store.prefix(), "inventory", env.id).await? {
//!     // apply the effect here, in `tx`
//! }
//! postroom_postgres::commit(tx).await?;
//! # Ok(()) }
//! ```

#[cfg(feature = "driver")]
pub mod driver;
pub mod error;
pub mod inbox;
pub mod inbox_queue;
pub mod last_error;
mod lease;
pub mod migrate;
pub mod options;
pub mod outbox;
pub mod parking;
mod pipeline;
pub mod queue;
pub mod schema;
pub mod tls;
pub mod wal;

pub use error::{commit, kind_of, map as map_error};
pub use inbox_queue::{InboxQueue, InboxQueueConfig, OrderedMode};
pub use last_error::PgLastErrors;
pub use migrate::migrate;
pub use options::PgOptions;
pub use outbox::PgOutbox;
pub use parking::PgParking;
pub use postroom_core::QueueConfig;
pub use queue::{PgDelivery, PgQueue, PgSubscriber};
pub use schema::TablePrefix;
pub use wal::{WalRelay, WalRelayConfig};

use error::SqlxResultExt;
use postroom_core::{Error, ErrorKind, Result};
use sqlx::postgres::PgPoolOptions;
use sqlx::{PgPool, Postgres, Row, Transaction};
use std::time::Duration;

/// A connection refused at start-up for a database or a role that does not exist (SQLSTATE
/// 3D000, class 28) is the URL's mistake: a configuration error, so that a service fails with
/// a message to fix its settings rather than as an outage to wait out. Only here: the same
/// codes met later (a database dropped, a password rotated under a running consumer) keep their
/// usual kind, so that messages are retried rather than parked.
fn start_up_error(e: sqlx::Error, connect: &sqlx::postgres::PgConnectOptions) -> Error {
    if !names_a_stranger(&e) {
        return tls::connect_error(e, connect);
    }
    Error::new(
        ErrorKind::Config,
        format!(
            "PostgreSQL at {}:{} refused the connection (check the URL's database and user)",
            connect.get_host(),
            connect.get_port()
        ),
    )
    .with_source(e)
}

/// The server's answer to a login for a database (3D000) or a role or password (class 28)
/// that it does not know.
fn names_a_stranger(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|c| c == "3D000" || c.starts_with("28")),
        _ => false,
    }
}

/// The pool keeps retrying a connection the server refuses (or a host that does not answer)
/// until its acquire timeout, and then says only that it timed out. One attempt of our own
/// names the cause: refused, unreachable, a TLS or login failure.
async fn why_no_connection(connect: &sqlx::postgres::PgConnectOptions, waited: Duration) -> Error {
    use sqlx::ConnectOptions as _;
    let what = format!(
        "no connection to PostgreSQL at {}:{} within {waited:?}",
        connect.get_host(),
        connect.get_port()
    );
    match tokio::time::timeout(Duration::from_secs(5), connect.connect()).await {
        Ok(Err(e)) if tls::tls_failure(&e).is_some() || names_a_stranger(&e) => {
            start_up_error(e, connect)
        }
        Ok(Err(e)) => Error::new(ErrorKind::Connection, what).with_source(e),
        Ok(Ok(conn)) => {
            let _ = sqlx::Connection::close(conn).await;
            Error::new(
                ErrorKind::Connection,
                format!(
                    "{what}; the server accepted one only after the pool had given up: try again"
                ),
            )
        }
        Err(_) => Error::new(
            ErrorKind::Connection,
            format!("{what}: a connection attempt got no answer within 5 s"),
        ),
    }
}

/// A pool and a table prefix: the handle every part of this crate is built from.
#[derive(Clone, Debug)]
pub struct PgStore {
    pool: PgPool,
    prefix: TablePrefix,
}

/// How often the server checks, while it runs a statement, that the client is still there:
/// a process killed in the middle of a statement (a relay claiming rows, a handler's
/// transaction) otherwise leaves the statement running, and holding its row locks, until it
/// ends by itself: another relay then skips those rows (`SKIP LOCKED`) for as long.
pub const CLIENT_CHECK_INTERVAL: &str = "1s";

/// A pooled connection idle for at least this long is pinged before it is handed out; one
/// used more recently is handed out as it is. sqlx pings every connection it hands out by
/// default: a round trip more for every transaction, which cost the per-message consumer
/// about a tenth of its throughput (`postroom bench --scenario e2e`). A connection that died
/// while hot (the server restarted under load) fails its next statement instead, which every
/// loop here counts as a transient failure and retries; the pool then drops it (sqlx pings
/// each connection it takes back).
pub const PING_WHEN_IDLE_FOR: Duration = Duration::from_secs(1);

/// The pool's check before it hands out `conn` (see [`PING_WHEN_IDLE_FOR`]): `false`, and the
/// pool closes it and takes another, when a ping after a long idle gets no answer.
fn fresh_enough(
    conn: &mut sqlx::PgConnection,
    meta: sqlx::pool::PoolConnectionMetadata,
) -> futures::future::BoxFuture<'_, std::result::Result<bool, sqlx::Error>> {
    Box::pin(async move {
        if meta.idle_for < PING_WHEN_IDLE_FOR {
            return Ok(true);
        }
        Ok(sqlx::Connection::ping(conn).await.is_ok())
    })
}

/// Set [`CLIENT_CHECK_INTERVAL`] on a new connection. A server older than PostgreSQL 14 does
/// not have the setting: the connection is used without it.
async fn watch_the_client(conn: &mut sqlx::PgConnection) -> std::result::Result<(), sqlx::Error> {
    let set = format!("SET client_connection_check_interval = '{CLIENT_CHECK_INTERVAL}'");
    if let Err(e) = sqlx::query(&set).execute(conn).await {
        tracing::debug!(error = %e, "client_connection_check_interval not set");
    }
    Ok(())
}

impl PgStore {
    /// Connect to `url` with the default settings ([`PgOptions::default`]: prefix
    /// `postroom_`, the server's default schema, a pool of 10 connections).
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, PgOptions::default()).await
    }

    /// Connect to `url` with `options`: the tables' schema (created when missing, and set as
    /// the connections' `search_path`), the prefix, the pool's size and timeouts. TLS follows
    /// the URL's `sslmode` with certificates verified whenever TLS is required (see [`tls`]:
    /// `sslmode=require` is verified, `sslrootcert=` names the CA file).
    pub async fn connect_with(url: &str, options: PgOptions) -> Result<Self> {
        use sqlx::ConnectOptions as _;
        options.validate()?;
        let mut connect = tls::connect_options(url)?;
        if let Some(schema) = &options.schema {
            let mut conn = connect
                .connect()
                .await
                .map_err(|e| start_up_error(e, &connect))?;
            sqlx::query(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
                .execute(&mut conn)
                .await
                .pg()?;
            let _ = sqlx::Connection::close(conn).await;
            connect = connect.options([("search_path", schema.as_str())]);
        }
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections)
            .min_connections(options.min_connections)
            .acquire_timeout(options.acquire_timeout)
            .test_before_acquire(false)
            .before_acquire(fresh_enough)
            .after_connect(|conn, _| Box::pin(watch_the_client(conn)))
            .connect_with(connect.clone())
            .await;
        match pool {
            Ok(pool) => Ok(Self::from_pool(pool, options.prefix)),
            Err(sqlx::Error::PoolTimedOut) => {
                Err(why_no_connection(&connect, options.acquire_timeout).await)
            }
            Err(e) => Err(start_up_error(e, &connect)),
        }
    }

    /// Use an existing pool and prefix: any pool built with `sqlx::postgres::PgPoolOptions`
    /// (set `search_path` in its connect options to keep the tables in a schema; set
    /// `client_connection_check_interval` as [`connect_with`](Self::connect_with) does, and
    /// skip sqlx's ping for connections used within [`PING_WHEN_IDLE_FOR`]).
    #[must_use]
    pub fn from_pool(pool: PgPool, prefix: TablePrefix) -> Self {
        Self { pool, prefix }
    }

    /// Apply pending migrations; returns the versions applied now.
    pub async fn migrate(&self) -> Result<Vec<i32>> {
        migrate::migrate(&self.pool, &self.prefix).await
    }

    /// The pool.
    #[must_use]
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The table prefix.
    #[must_use]
    pub fn prefix(&self) -> &TablePrefix {
        &self.prefix
    }

    /// Begin a transaction (for [`outbox::enqueue`] and [`inbox::claim`]).
    pub async fn begin(&self) -> Result<Transaction<'static, Postgres>> {
        self.pool.begin().await.pg()
    }

    /// The relays' side of the outbox.
    #[must_use]
    pub fn outbox(&self) -> PgOutbox {
        PgOutbox::new(self.pool.clone(), self.prefix.clone())
    }

    /// The parking lot.
    #[must_use]
    pub fn parking(&self) -> PgParking {
        PgParking::new(self.pool.clone(), self.prefix.clone())
    }

    /// The consumers' last errors.
    #[must_use]
    pub fn last_errors(&self) -> PgLastErrors {
        PgLastErrors::new(self.pool.clone(), self.prefix.clone())
    }

    /// The queue transport.
    pub fn queue(&self, config: QueueConfig) -> Result<PgQueue> {
        PgQueue::new(self.pool.clone(), self.prefix.clone(), config)
    }
}

/// A number of seconds PostgreSQL computed (an age, a wait) as a `Duration`: negative or NaN
/// is zero, beyond what a `Duration` holds is its maximum. Rows written by other programs may
/// hold any timestamp, and a conversion must not panic on them.
pub(crate) fn seconds(s: f64) -> Duration {
    Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(Duration::MAX)
}

/// What `q` (a statement selecting one `count(*)`) counts in `pool`.
pub(crate) async fn fetch_count(
    pool: &PgPool,
    q: sqlx::query::Query<'_, Postgres, sqlx::postgres::PgArguments>,
) -> Result<u64> {
    let n: i64 = q.fetch_one(pool).await.pg()?.try_get(0).pg()?;
    Ok(u64::try_from(n).unwrap_or(0))
}

#[cfg(test)]
mod seconds_tests {
    use super::*;

    #[test]
    fn any_number_of_seconds_converts_without_a_panic() {
        assert_eq!(seconds(1.5), Duration::from_millis(1500));
        assert_eq!(seconds(-3.0), Duration::ZERO);
        assert_eq!(seconds(f64::NAN), Duration::ZERO);
        assert_eq!(seconds(f64::INFINITY), Duration::MAX);
        assert_eq!(seconds(1e300), Duration::MAX);
    }
}
