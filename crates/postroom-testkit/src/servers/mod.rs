//! Real servers for tests, isolated per test and cleaned up on drop. Endpoints come from
//! environment variables with loopback defaults; a missing server fails the test, it is
//! never skipped.

#[cfg(feature = "postgres")]
pub mod cuttable_path;
#[cfg(feature = "postgres")]
pub mod postgres;

#[cfg(feature = "postgres")]
pub use cuttable_path::CuttablePath;
#[cfg(feature = "postgres")]
pub use postgres::TestDb;

pub mod kafka_mock;
pub mod moto;
pub use kafka_mock::KafkaMockCluster;
pub use moto::MotoServer;

#[cfg(feature = "own-servers")]
pub mod nats_cluster;
#[cfg(feature = "own-servers")]
pub mod nats_secure;
#[cfg(feature = "own-servers")]
pub mod os_user;
#[cfg(feature = "own-servers")]
pub mod pg_cluster;
#[cfg(feature = "own-servers")]
pub mod rabbit_node;
#[cfg(feature = "own-servers")]
pub mod test_ca;

#[cfg(feature = "own-servers")]
pub use nats_cluster::NatsCluster;
#[cfg(feature = "own-servers")]
pub use nats_secure::{NatsOperator, NatsSecureConfig, NatsSecureServer};
#[cfg(feature = "own-servers")]
pub use pg_cluster::PgCluster;
#[cfg(feature = "own-servers")]
pub use rabbit_node::RabbitNode;
#[cfg(feature = "own-servers")]
pub use test_ca::{ServerCert, TestCa};

/// A loopback port nobody listens on now.
#[must_use]
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a free port")
        .port()
}

/// A short random suffix for names of queues, streams, topics and databases.
#[must_use]
pub fn suffix() -> String {
    uuid::Uuid::now_v7().simple().to_string()[18..].to_string()
}

/// How many times a hard-crash test kills its server and starts it again:
/// `POSTROOM_HARD_CRASH_CYCLES`, 1 when unset (a longer run is reported in docs/testing.md).
#[must_use]
pub fn hard_crash_cycles() -> u32 {
    std::env::var("POSTROOM_HARD_CRASH_CYCLES")
        .ok()
        .map(|v| {
            v.parse()
                .expect("POSTROOM_HARD_CRASH_CYCLES is a whole number")
        })
        .unwrap_or(1)
}

/// Run `cleanup` to its end from a `Drop`, which may run inside the test's runtime (where
/// blocking on a future is refused) or after it ended: on a thread and a runtime of its own,
/// waited for, so the next test finds the server clean.
pub fn clean_up(cleanup: impl std::future::Future<Output = ()> + Send + 'static) {
    let done = std::thread::spawn(move || {
        match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt.block_on(cleanup),
            Err(e) => eprintln!("no runtime for a test's cleanup: {e}"),
        }
    });
    let _ = done.join();
}
