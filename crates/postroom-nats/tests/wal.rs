//! The WAL relay to NATS JetStream (PubAck, `Nats-Msg-Id`): the relay dying between confirm
//! and the slot's advance, the database killed mid-stream, a short soak.

mod common;

use common::TestNats;
use std::sync::Arc;

async fn fresh() -> (Arc<dyn postroom_core::Transport>, TestNats) {
    let nats = TestNats::new().await;
    // JetStream's own deduplication would drop the republished copies before the consumer;
    // off, they reach the inbox, which is what the cases check.
    let mut config = nats.config();
    config.deduplicate = false;
    let transport = nats.transport(config);
    (transport, nats)
}

postroom_testkit::wal_relay_suite!(fresh().await);
