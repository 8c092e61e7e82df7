//! The slot as an operational risk, visible: while the broker refuses everything, the WAL
//! relay's slot lag (bytes) and the age of the oldest unpublished commit grow; once it
//! confirms again the age falls back to zero. A second relay on the slot shows as standing by.

mod wal_common;

use postroom_core::metrics as m;
use postroom_core::{OutgoingMessage, Publisher, Result, async_trait};
use postroom_postgres::wal::WalRelay;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use wal_common::*;

/// The queue's publisher behind a switch: while it is off, every publish fails.
struct Switched {
    inner: Arc<dyn Publisher>,
    on: AtomicBool,
}

#[async_trait]
impl Publisher for Switched {
    async fn publish(&self, msg: &OutgoingMessage) -> Result<()> {
        if !self.on.load(Ordering::Relaxed) {
            return Err(postroom_core::Error::new(
                postroom_core::ErrorKind::Connection,
                "broker down",
            ));
        }
        self.inner.publish(msg).await
    }
}

/// What the Prometheus page says of gauge `name` with label `label`.
struct Page(metrics_exporter_prometheus::PrometheusHandle);

impl Page {
    fn gauge(&self, name: &str, label: (&str, &str)) -> Option<f64> {
        let want = format!("{}=\"{}\"", label.0, label.1);
        self.0.render().lines().find_map(|l| {
            let (key, value) = l.rsplit_once(' ')?;
            (key.starts_with(&format!("{name}{{")) && key.contains(&want))
                .then(|| value.parse().ok())?
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lag_and_the_oldest_unpublished_commit_are_measured() {
    let seen = Page(
        metrics_exporter_prometheus::PrometheusBuilder::new()
            .install_recorder()
            .expect("the only recorder of this test process"),
    );
    let db = Logical::start().await;
    let queue = db.queue().await;
    let switched = Arc::new(Switched {
        inner: postroom_core::Transport::publisher(&queue),
        on: AtomicBool::new(false),
    });
    let relay = WalRelay::new(&db.store, switched.clone(), config("measured")).unwrap();
    relay.prepare().await.unwrap();
    let slot = relay.slot().to_string();
    let running = Running::start(relay);
    let standby =
        Running::start(WalRelay::new(&db.store, switched.clone(), config("standby")).unwrap());
    let messages: Vec<OutgoingMessage> = (1..=3).map(|v| order("m", v)).collect();
    produce(&db.store, &messages, true).await;
    postroom_testkit::wait::until(
        Duration::from_secs(20),
        "lag and age measured",
        async || {
            let lag = seen
                .gauge(m::WAL_SLOT_LAG_BYTES, ("slot", &slot))
                .unwrap_or(0.0);
            let age = seen
                .gauge(m::WAL_OLDEST_UNPUBLISHED_AGE, ("slot", &slot))
                .unwrap_or(0.0);
            lag > 0.0 && age >= 1.0
        },
    )
    .await;
    // One of the two reads the slot, the other stands by.
    postroom_testkit::wait::until(
        Duration::from_secs(10),
        "one active, one standing by",
        async || {
            let a = seen.gauge(m::WAL_RELAY_ACTIVE, ("relay", "measured"));
            let b = seen.gauge(m::WAL_RELAY_ACTIVE, ("relay", "standby"));
            matches!((a, b), (Some(1.0), Some(0.0)) | (Some(0.0), Some(1.0)))
        },
    )
    .await;
    switched.on.store(true, Ordering::Relaxed);
    postroom_testkit::wait::until(
        Duration::from_secs(20),
        "the age back to zero",
        async || seen.gauge(m::WAL_OLDEST_UNPUBLISHED_AGE, ("slot", &slot)) == Some(0.0),
    )
    .await;
    running.stop().await;
    standby.stop().await;
}
