//! The console under attack, as an attacker or a careless operator would try it, against a
//! real console on loopback over its real SQLite store (and in a real headless Chromium where
//! a browser matters): payloads stay with the roles allowed to see them, anonymous visitors
//! cannot push logged-in sessions out, one request cannot grow the audit without limit,
//! guessing passwords and tokens is throttled and timing tells nothing, a host name that
//! rebinds to loopback gets nothing, and every page carries the same protective headers.

#[path = "../common/mod.rs"]
mod common;

mod headers;
mod limits;
mod logins;
mod privacy;
mod rebinding;
mod sessions;

use postroom_core::{ParkingFilter, ParkingStore};

/// The id of the newest parked message in `store`.
pub async fn first_id(store: &postroom_sqlite::SqliteStore) -> String {
    ParkingStore::search(store, &ParkingFilter::default(), 1)
        .await
        .expect("search")[0]
        .message_id
        .to_string()
}

/// The port of a console's base URL (`http://127.0.0.1:PORT`).
pub fn port_of(base: &str) -> &str {
    base.rsplit(':').next().expect("a port")
}
