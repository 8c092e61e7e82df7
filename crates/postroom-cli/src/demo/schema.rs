//! The demo's business tables: the orders service and the inventory service share one file
//! here (two services, one embedded database), each with its own tables.

use postroom_sqlite::SqliteStore;

/// Marker table that identifies a demo database (so `demo` only ever deletes its own file).
pub const MARKER: &str = "demo_meta";

/// Create the business tables and the stock.
pub async fn create(store: &SqliteStore) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(
        "CREATE TABLE demo_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
         -- orders service
         CREATE TABLE orders (id TEXT PRIMARY KEY, sku TEXT NOT NULL, qty INTEGER NOT NULL,
                              status TEXT NOT NULL DEFAULT 'created', message_id TEXT NOT NULL);
         -- inventory service (reservations has no unique key on purpose: a double effect would show)
         CREATE TABLE stock (sku TEXT PRIMARY KEY, available INTEGER NOT NULL, initial INTEGER NOT NULL);
         CREATE TABLE reservations (id INTEGER PRIMARY KEY AUTOINCREMENT, order_id TEXT NOT NULL, sku TEXT NOT NULL, qty INTEGER NOT NULL);
         -- fault injection and observation
         CREATE TABLE demo_faults (order_id TEXT PRIMARY KEY, fail_times INTEGER NOT NULL);
         CREATE TABLE demo_attempts (message_id TEXT NOT NULL, attempt INTEGER NOT NULL, at INTEGER NOT NULL);
         CREATE TABLE demo_duplicates (message_id TEXT NOT NULL, consumer TEXT NOT NULL, at INTEGER NOT NULL);
         CREATE TABLE demo_crash (order_id TEXT PRIMARY KEY, at INTEGER NOT NULL);
         INSERT INTO stock (sku, available, initial) VALUES ('WIDGET', 100000, 100000), ('GADGET', 3, 3), ('RARE', 2, 2);
         INSERT INTO demo_meta (key, value) VALUES ('created_by', 'postroom demo');",
    )
    .execute(store.pool())
    .await?;
    Ok(())
}
