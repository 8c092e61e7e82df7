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
