//! How [`PgStore::connect_with`](crate::PgStore::connect_with) connects: the table prefix, the
//! schema the tables live in, and the pool's size and timeouts.

use crate::schema::TablePrefix;
use postroom_core::{Error, ErrorKind, Result};
use std::time::Duration;

/// Connection settings of a [`PgStore`](crate::PgStore).
#[derive(Clone, Debug)]
#[must_use]
pub struct PgOptions {
    /// Prefix of every table, index, function and channel name.
    pub prefix: TablePrefix,
    /// Schema the tables live in (created when missing), set as the connections'
    /// `search_path`; `None` keeps the server's default (normally `public`). The business
    /// transaction that enqueues outbox rows must run on this store's pool
    /// ([`PgStore::begin`](crate::PgStore::begin)), so its names resolve to the same schema.
    pub schema: Option<String>,
    /// Most connections in the pool.
    pub max_connections: u32,
    /// Connections kept open when idle.
    pub min_connections: u32,
    /// Longest wait for a free connection.
    pub acquire_timeout: Duration,
}

impl Default for PgOptions {
    fn default() -> Self {
        Self {
            prefix: TablePrefix::default(),
            schema: None,
            max_connections: 10,
            min_connections: 0,
            acquire_timeout: Duration::from_secs(10),
        }
    }
}

postroom_core::setters!(PgOptions {
    /// Set the table prefix.
    prefix: TablePrefix,
    /// Set the pool's size.
    max_connections: u32,
    /// Set the idle connections kept.
    min_connections: u32,
    /// Set the wait for a free connection.
    acquire_timeout: Duration,
});

impl PgOptions {
    /// Put the tables in `schema` (`[a-z_][a-z0-9_]*`, at most 63 bytes).
    pub fn schema(mut self, schema: &str) -> Result<Self> {
        let mut chars = schema.chars();
        let ok = chars
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
            && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            && schema.len() <= 63;
        if !ok {
            return Err(Error::new(
                ErrorKind::Config,
                format!("schema {schema:?} must match [a-z_][a-z0-9_]* and be at most 63 bytes"),
            ));
        }
        self.schema = Some(schema.to_string());
        Ok(self)
    }

    /// Refuse a pool of zero connections or more idle connections than the maximum.
    pub fn validate(&self) -> Result<()> {
        if self.max_connections == 0 || self.min_connections > self.max_connections {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "the pool needs max_connections ≥ 1 and min_connections ({}) ≤ max_connections ({})",
                    self.min_connections, self.max_connections
                ),
            ));
        }
        Ok(())
    }
}
