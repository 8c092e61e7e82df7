//! Backlog figures of a consumer from its durables' info: copies not yet delivered (ready),
//! delivered and unsettled (unacked: delayed naks included, JetStream does not tell them
//! apart), and the age of the oldest copy not yet delivered.

use crate::config::NatsConfig;
use crate::connection::NatsConnection;
use crate::error::{api, api_empty};
use crate::naming::{self, lanes};
use crate::topology::wire::ConsumerInfo;
use postroom_core::{Backlog, Error, ErrorKind, Result};
use std::time::Duration;

/// The backlog of `consumer`.
pub async fn backlog(
    conn: &NatsConnection,
    config: &NatsConfig,
    consumer: &str,
) -> Result<Backlog> {
    let c = config.consumer(consumer).ok_or_else(|| {
        Error::new(
            ErrorKind::NotFound,
            format!("consumer {consumer:?} is not in the NATS topology"),
        )
    })?;
    let stream = naming::work_stream(&config.prefix);
    let mut out = Backlog::default();
    for lane in lanes(config, c) {
        let info: ConsumerInfo = api_empty(
            conn.client(),
            &format!("reading durable {stream}/{}", lane.durable),
            format!("CONSUMER.INFO.{stream}.{}", lane.durable),
        )
        .await?;
        out.ready += info.num_pending;
        out.unacked += info.num_ack_pending;
        if info.num_pending > 0 {
            let age = oldest_age(conn, &stream, &lane.filter, info.delivered.stream_seq + 1).await;
            out.oldest_ready_age = match (out.oldest_ready_age, age) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
        }
    }
    Ok(out)
}

/// Age of the first message on `filter` from sequence `from`.
async fn oldest_age(
    conn: &NatsConnection,
    stream: &str,
    filter: &str,
    from: u64,
) -> Option<Duration> {
    #[derive(serde::Deserialize)]
    struct Got {
        message: Stored,
    }
    #[derive(serde::Deserialize)]
    struct Stored {
        time: String,
    }
    let got: Got = api(
        conn.jetstream(),
        "reading the oldest ready message",
        format!("STREAM.MSG.GET.{stream}"),
        &serde_json::json!({ "seq": from, "next_by_subj": filter }),
    )
    .await
    .ok()?;
    let t = chrono::DateTime::parse_from_rfc3339(&got.message.time).ok()?;
    (chrono::Utc::now() - t.with_timezone(&chrono::Utc))
        .to_std()
        .ok()
}
