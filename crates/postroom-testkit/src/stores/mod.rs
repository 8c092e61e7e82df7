//! Ready store halves, so a broker's tests pair its transport with a real store instead of
//! writing one again: [`sqlite::SqliteFixture`] (a temporary file) and
//! [`postgres::PgFixture`] (a fresh database). Each has an `orders` table (the producer's
//! business row) and an `effects` table (the consumer's counted effect).

#[cfg(feature = "postgres")]
pub mod pg_effects;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "sqlite")]
pub mod sqlite;

#[cfg(any(feature = "postgres", feature = "sqlite"))]
use postroom_core::{Handled, MessageId};
#[cfg(any(feature = "postgres", feature = "sqlite"))]
use std::collections::HashSet;

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
