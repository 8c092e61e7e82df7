//! A loopback TCP path to the shared PostgreSQL server that a test can cut, so that the
//! database "goes down" for the code under test without stopping the shared server.

use super::postgres::server_url;
use sqlx::postgres::PgConnectOptions;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A loopback TCP forwarder to PostgreSQL that can be cut (connections reset, new ones refused).
pub struct CuttablePath {
    /// The loopback port that leads to PostgreSQL while the path is up.
    pub port: u16,
    up: Arc<AtomicBool>,
    cut: watch::Sender<u64>,
}

impl CuttablePath {
    /// A path to the server `POSTROOM_TEST_PG` names, up.
    pub async fn to_postgres() -> Self {
        let server = PgConnectOptions::from_str(&server_url()).expect("POSTROOM_TEST_PG");
        let target = format!("{}:{}", server.get_host(), server.get_port());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let up = Arc::new(AtomicBool::new(true));
        let (cut, _) = watch::channel(0u64);
        let (up2, cut2) = (up.clone(), cut.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    return;
                };
                if !up2.load(Ordering::SeqCst) {
                    drop(inbound); // refused: closed at once
                    continue;
                }
                let mut cut_rx = cut2.subscribe();
                let target = target.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(&target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cut_rx.changed() => {}
                    }
                });
            }
        });
        Self { port, up, cut }
    }

    /// Cut the path: open connections reset, new ones refused.
    pub fn down(&self) {
        self.up.store(false, Ordering::SeqCst);
        self.cut.send_modify(|n| *n += 1);
    }

    /// Let new connections through again.
    pub fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}
