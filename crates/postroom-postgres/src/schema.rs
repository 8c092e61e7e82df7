//! The table prefix: every table, index, function and NOTIFY channel postroom creates is named
//! `{prefix}<name>`, so several postroom installations can share one database.

use postroom_core::{Error, ErrorKind, Result};
use std::fmt;
use std::sync::Arc;

/// The prefix used by default.
pub const DEFAULT_PREFIX: &str = "postroom_";

/// Longest prefix accepted: PostgreSQL identifiers stop at 63 bytes and the longest name
/// postroom appends is 26 bytes (`inbox_queue_pending` plus room to spare).
pub const MAX_PREFIX_LEN: usize = 32;

/// A validated table prefix: `[a-z_][a-z0-9_]*`, at most [`MAX_PREFIX_LEN`] bytes. Since it is
/// spliced into SQL text, nothing else is accepted.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TablePrefix(Arc<str>);

impl TablePrefix {
    /// Validate `prefix`.
    pub fn new(prefix: &str) -> Result<Self> {
        let mut chars = prefix.chars();
        let first_ok = chars
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
        let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !first_ok || !rest_ok || prefix.len() > MAX_PREFIX_LEN {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "table prefix {prefix:?} must match [a-z_][a-z0-9_]* and be at most {MAX_PREFIX_LEN} bytes"
                ),
            ));
        }
        Ok(Self(prefix.into()))
    }

    /// The prefix itself.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The full name of table (or function, or channel) `name`.
    #[must_use]
    pub fn table(&self, name: &str) -> String {
        format!("{}{name}", self.0)
    }

    /// `sql` with every `{prefix}` replaced by the prefix.
    #[must_use]
    pub fn apply(&self, sql: &str) -> String {
        sql.replace("{prefix}", &self.0)
    }

    /// The name part of the NOTIFY channel that wakes relays when outbox rows are inserted;
    /// the channel is `<schema>.<prefix>outbox` (the schema the tables live in).
    #[must_use]
    pub fn outbox_channel(&self) -> String {
        self.table("outbox")
    }
}

impl Default for TablePrefix {
    fn default() -> Self {
        Self(DEFAULT_PREFIX.into())
    }
}

impl fmt::Debug for TablePrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TablePrefix({:?})", &*self.0)
    }
}

impl fmt::Display for TablePrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_identifiers_only() {
        assert!(TablePrefix::new("postroom_").is_ok());
        assert!(TablePrefix::new("_x1").is_ok());
        assert!(TablePrefix::new("").is_err());
        assert!(TablePrefix::new("1x").is_err());
        assert!(TablePrefix::new("Upper").is_err());
        assert!(TablePrefix::new("a;drop table x;--").is_err());
        assert!(TablePrefix::new(&"a".repeat(MAX_PREFIX_LEN + 1)).is_err());
    }

    #[test]
    fn applies_placeholders() {
        let p = TablePrefix::new("app_").unwrap();
        assert_eq!(
            p.apply("SELECT * FROM {prefix}outbox"),
            "SELECT * FROM app_outbox"
        );
        assert_eq!(p.table("inbox"), "app_inbox");
    }
}
