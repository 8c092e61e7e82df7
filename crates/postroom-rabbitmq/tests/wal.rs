//! The WAL relay to RabbitMQ (confirms, mandatory): the relay dying between confirm and the
//! slot's advance, the database killed mid-stream, a short soak.

mod common;

use common::TestRabbit;
use std::sync::Arc;

async fn fresh() -> (Arc<dyn postroom_core::Transport>, TestRabbit) {
    let rabbit = TestRabbit::new("1s,2s").await;
    rabbit.topology().apply().await.expect("apply");
    (Arc::new(rabbit.transport()), rabbit)
}

postroom_testkit::wal_relay_suite!(fresh().await);
