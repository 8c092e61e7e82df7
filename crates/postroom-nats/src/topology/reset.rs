//! Remove a workload from a server: its work stream and every parking stream of its
//! consumers (their durables go with them). For runs that own their prefix and start from an
//! empty state (the demo, the soak), so that no copy of an earlier, interrupted run is
//! delivered into the next one.

use crate::connection::NatsConnection;
use crate::error::{api, is_not_found};
use crate::naming::{parking_stream, work_stream};
use postroom_core::Result;
use serde::{Deserialize, Serialize};

#[derive(Serialize)]
struct NamesRequest {
    offset: usize,
}

#[derive(Deserialize)]
struct Names {
    #[serde(default)]
    total: usize,
    #[serde(default)]
    streams: Option<Vec<String>>,
}

/// Whether `stream` belongs to the workload `prefix`: its work stream or a parking stream.
#[must_use]
pub fn owned_by(prefix: &str, stream: &str) -> bool {
    stream == work_stream(prefix) || stream.starts_with(&parking_stream(prefix, ""))
}

/// Names of every stream on the server (the API pages them).
pub async fn stream_names(conn: &NatsConnection) -> Result<Vec<String>> {
    let mut out = Vec::new();
    loop {
        let page: Names = api(
            conn.jetstream(),
            "listing streams",
            "STREAM.NAMES".into(),
            &NamesRequest { offset: out.len() },
        )
        .await?;
        let got = page.streams.unwrap_or_default();
        if got.is_empty() {
            return Ok(out);
        }
        out.extend(got);
        if out.len() >= page.total {
            return Ok(out);
        }
    }
}

/// Delete the streams of the workload `prefix`; returns their names.
pub async fn delete_workload(conn: &NatsConnection, prefix: &str) -> Result<Vec<String>> {
    let mut deleted = Vec::new();
    for name in stream_names(conn).await? {
        if !owned_by(prefix, &name) {
            continue;
        }
        let r: Result<serde_json::Value> = api(
            conn.jetstream(),
            &format!("deleting stream {name}"),
            format!("STREAM.DELETE.{name}"),
            &serde_json::json!({}),
        )
        .await;
        match r {
            Ok(_) => deleted.push(name),
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::owned_by;

    #[test]
    fn a_workload_owns_its_work_and_parking_streams_only() {
        assert!(owned_by("shop", "shop"));
        assert!(owned_by("shop", "shop_parking_inventory"));
        assert!(!owned_by("shop", "shop2"));
        assert!(!owned_by("shop", "shopping"));
        assert!(!owned_by("shop", "other_parking_inventory"));
    }
}
