//! The shared conformance suite on NATS JetStream (delayed naks for retries, parking stream
//! ingested into the store), with SQLite as the store half. Runs unchanged.
//!
//! Two cases publish a copy with an id the stream has already seen and check that the inbox
//! absorbs its delivery. Within the work stream's duplicate window that copy never reaches
//! a consumer (`Nats-Msg-Id` absorbs it first: `tests/relay.rs` shows that), and the server's
//! smallest window (100 ms) is longer than the cases wait. So the fixture publishes without
//! `Nats-Msg-Id` (`deduplicate = false`): the copy is a second delivery, as it is after the
//! window has passed, and the suite checks what it is meant to check, the inbox.

mod common;

use common::TestNats;
use postroom_testkit::Backend;

async fn fresh() -> Backend {
    let nats = TestNats::new().await;
    let mut config = nats.config();
    config.deduplicate = false;
    let transport = nats.transport(config.clone());
    Backend::on_sqlite(transport, "1s,2s", config.ack_wait)
        .await
        .keeping(nats)
}

postroom_testkit::conformance_suite!(fresh().await);
