//! The WAL relay to SQS (moto): the relay dying between confirm and the slot's advance, the
//! database killed mid-stream, a short soak.

mod common;

use common::TestSqs;
use std::sync::Arc;

async fn fresh() -> (Arc<dyn postroom_core::Transport>, TestSqs) {
    let sqs = TestSqs::new().await;
    let transport = sqs.transport(sqs.config()).await;
    (transport, sqs)
}

postroom_testkit::wal_relay_suite!(fresh().await);
