//! Ready store halves, so a broker's tests pair its transport with a real store instead of
//! writing one again: [`sqlite::SqliteFixture`] (a temporary file) and
//! [`postgres::PgFixture`] (a fresh database). Each has an `orders` table (the producer's
//! business row) and an `effects` table (the consumer's counted effect).

/// The statement that writes `envelope`'s order at its version (the producer's business row,
/// [`UPSERT_ORDER`]), bound and ready to run in the producer's transaction on either store.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
macro_rules! upsert_order {
    ($envelope:expr) => {
        sqlx::query(super::UPSERT_ORDER)
            .bind(&$envelope.aggregate.id)
            .bind(super::order_version($envelope))
    };
}

#[cfg(feature = "postgres")]
pub mod pg_effects;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "sqlite")]
pub mod sqlite;

#[cfg(any(feature = "postgres", feature = "sqlite"))]
use postroom_core::{Envelope, Handled, MessageId};
#[cfg(any(feature = "postgres", feature = "sqlite"))]
use std::collections::HashSet;

/// The business tables, the same on both stores: `orders` (the producer's row, at the
/// aggregate's version) and `effects` (how often a consumer applied the effect under a key).
#[cfg(any(feature = "postgres", feature = "sqlite"))]
const BUSINESS_TABLES: &str = "CREATE TABLE orders (id TEXT PRIMARY KEY, version BIGINT NOT NULL);
    CREATE TABLE effects (consumer TEXT NOT NULL, key TEXT NOT NULL, n BIGINT NOT NULL, PRIMARY KEY (consumer, key));";

/// Write order `$1` at version `$2` (the producer's business row), on both stores.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
const UPSERT_ORDER: &str = "INSERT INTO orders (id, version) VALUES ($1, $2)
    ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version";

/// Count one more application of effect `$2` for consumer `$1`, on both stores.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
const ADD_EFFECT: &str = "INSERT INTO effects (consumer, key, n) VALUES ($1, $2, 1)
    ON CONFLICT (consumer, key) DO UPDATE SET n = effects.n + 1";

/// The version column of `envelope`'s order (a version beyond `i64` reads as the largest).
#[cfg(any(feature = "postgres", feature = "sqlite"))]
fn order_version(envelope: &Envelope) -> i64 {
    i64::try_from(envelope.aggregate.version).unwrap_or(i64::MAX)
}

/// The message ids of a batch's `items`, in order.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
fn ids(items: &[(MessageId, String)]) -> Vec<MessageId> {
    items.iter().map(|(id, _)| *id).collect()
}

/// The outcome of each item of a batch whose ids the inbox claimed as `new`: applied for the
/// first copy of a newly claimed id, a duplicate otherwise; with the effect keys of the
/// applied items, in order.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
fn batch_outcomes(items: &[(MessageId, String)], new: Vec<MessageId>) -> (Vec<Handled>, Vec<&str>) {
    let new: HashSet<MessageId> = new.into_iter().collect();
    let mut keys = Vec::new();
    let mut out = Vec::with_capacity(items.len());
    let mut applied = HashSet::new();
    for (id, key) in items {
        if new.contains(id) && applied.insert(*id) {
            keys.push(key.as_str());
            out.push(Handled::Applied);
        } else {
            out.push(Handled::Duplicate);
        }
    }
    (out, keys)
}
