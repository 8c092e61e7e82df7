//! The table-less producer: the message goes into the write-ahead log alone, as a
//! transactional logical message (`pg_logical_emit_message(true, …)`) in the business
//! transaction, with no outbox row: nothing is written to a table, and nothing is left to
//! clean up. The WAL relay reads it from its slot as it reads the outbox's inserts.
//!
//! The price: the slot is then the only copy of the message. A message committed while no
//! slot exists, or whose log the server removed before the relay read it (a slot
//! invalidated past `max_slot_wal_keep_size`, or dropped), is gone, with no table to
//! republish it from. So [`TableLessProducer::new`] refuses to write unless the slot exists,
//! is not invalidated, and the server may never remove log a slot still needs
//! (`max_slot_wal_keep_size = -1`, the default). With the outbox table instead, the slot can be
//! bounded, and an invalidated slot is recovered from the table.

use super::slot;
use crate::error::SqlxResultExt;
use crate::schema::TablePrefix;
use postroom_core::outbox::{route_from_parts, route_parts};
use postroom_core::{Error, ErrorKind, Headers, MessageId, OutgoingMessage, Result};
use sqlx::{PgConnection, PgPool};

/// The first bytes of every message this producer writes (and the version of its layout).
const MAGIC: &[u8; 4] = b"PRW1";

/// The logical messages' prefix for the outbox `{prefix}outbox` in the connection's schema.
pub(crate) fn message_prefix(schema: &str, prefix: &TablePrefix) -> String {
    format!("{schema}.{prefix}outbox")
}

/// `msg` as the content of a logical message: magic, the id's 16 bytes, then
/// length-prefixed aggregate key, route kind, route and headers (JSON), and the body.
pub(crate) fn encode(msg: &OutgoingMessage) -> Result<Vec<u8>> {
    let (kind, route) = route_parts(&msg.route);
    let headers = serde_json::to_vec(&msg.headers)
        .map_err(|e| Error::new(ErrorKind::InvalidData, format!("headers: {e}")))?;
    let key = msg.aggregate_key();
    let mut out = Vec::with_capacity(64 + key.len() + route.len() + headers.len() + msg.body.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(msg.id.as_uuid().as_bytes());
    for part in [key.as_bytes(), kind.as_bytes(), route.as_bytes(), &headers] {
        let len = u32::try_from(part.len())
            .map_err(|_| Error::new(ErrorKind::InvalidData, "a message part over 4 GiB"))?;
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(part);
    }
    out.extend_from_slice(&msg.body);
    Ok(out)
}

/// Read back what [`encode`] wrote; anything else is invalid data.
pub(crate) fn decode(content: &[u8]) -> Result<OutgoingMessage> {
    let bad = |what: &str| {
        Error::new(
            ErrorKind::InvalidData,
            format!("a table-less outbox message with {what}"),
        )
    };
    let rest = content
        .strip_prefix(MAGIC.as_slice())
        .ok_or_else(|| bad("an unknown layout"))?;
    if rest.len() < 16 {
        return Err(bad("no id"));
    }
    let (id, mut rest) = rest.split_at(16);
    let id = uuid::Uuid::from_slice(id).map_err(|_| bad("a bad id"))?;
    let mut parts: [&[u8]; 4] = [&[]; 4];
    for part in &mut parts {
        if rest.len() < 4 {
            return Err(bad("a part cut short"));
        }
        let (len, tail) = rest.split_at(4);
        let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
        if tail.len() < len {
            return Err(bad("a part cut short"));
        }
        let (value, tail) = tail.split_at(len);
        *part = value;
        rest = tail;
    }
    let text = |b: &[u8]| {
        std::str::from_utf8(b)
            .map(str::to_string)
            .map_err(|_| bad("text that is not UTF-8"))
    };
    let kind = text(parts[1])?;
    let route = route_from_parts(&kind, text(parts[2])?)?;
    let mut headers: Headers =
        serde_json::from_slice(parts[3]).map_err(|_| bad("headers that are not JSON"))?;
    headers
        .entry(postroom_core::message::headers::AGGREGATE_KEY.into())
        .or_insert_with(|| String::from_utf8_lossy(parts[0]).into_owned());
    Ok(OutgoingMessage {
        id: MessageId::from(id),
        route,
        headers,
        body: rest.to_vec(),
    })
}

/// Writes outbox messages into the write-ahead log only (see the module documentation).
#[derive(Clone, Debug)]
pub struct TableLessProducer {
    prefix: TablePrefix,
}

impl TableLessProducer {
    /// A producer for the WAL relay reading slot `slot_name` of `pool`'s database. Refused
    /// (a configuration error saying why) unless the slot exists and is not invalidated, and
    /// the server keeps all the log a slot needs (`max_slot_wal_keep_size = -1`).
    pub async fn new(pool: &PgPool, prefix: TablePrefix, slot_name: &str) -> Result<Self> {
        check_safe(pool, slot_name).await?;
        Ok(Self { prefix })
    }

    /// Write `msg` in the caller's transaction (pass `&mut *tx`): it is published once the
    /// transaction commits, and never if it rolls back.
    pub async fn emit(&self, conn: &mut PgConnection, msg: &OutgoingMessage) -> Result<()> {
        let content = encode(msg)?;
        let sql = format!(
            "SELECT pg_logical_emit_message(true, current_schema() || '.{p}outbox', $1::bytea)",
            p = self.prefix
        );
        sqlx::query(&sql).bind(content).execute(conn).await.pg()?;
        Ok(())
    }
}

/// Whether table-less messages are safe on `pool`'s server for `slot_name` (see
/// [`TableLessProducer::new`]).
pub(crate) async fn check_safe(pool: &PgPool, slot_name: &str) -> Result<()> {
    let keep: String = sqlx::query_scalar("SELECT current_setting('max_slot_wal_keep_size')")
        .fetch_one(pool)
        .await
        .pg()?;
    if keep.trim() != "-1" {
        return Err(Error::new(
            ErrorKind::Config,
            format!(
                "table-less outbox messages refused: max_slot_wal_keep_size is {keep}, so the server may remove log the slot still needs, and with it the only copy of a message; set it to -1 (and watch the slot's lag), or write outbox rows instead"
            ),
        ));
    }
    match slot::find(pool, slot_name).await? {
        None => Err(Error::new(
            ErrorKind::Config,
            format!(
                "table-less outbox messages refused: the replication slot {slot_name:?} does not exist, and a message written before it is created is never read; start the WAL relay once (it creates the slot), then write"
            ),
        )),
        Some(s) if s.lost() => Err(Error::new(
            ErrorKind::Config,
            format!(
                "table-less outbox messages refused: the replication slot {slot_name:?} is invalidated; recreate it first (see the WAL relay's documentation)"
            ),
        )),
        Some(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_survives_the_round_trip_and_garbage_is_refused() {
        let env = postroom_core::Envelope::builder("order.created", "t")
            .aggregate("order", "o-1", 3)
            .build();
        let msg = OutgoingMessage::from_envelope(&env, "orders");
        let back = decode(&encode(&msg).unwrap()).unwrap();
        assert_eq!(back.id, msg.id);
        assert_eq!(back.route, msg.route);
        assert_eq!(back.headers, msg.headers);
        assert_eq!(back.body, msg.body);
        let raw = encode(&msg).unwrap();
        for cut in 0..60 {
            assert!(decode(&raw[..cut]).is_err(), "cut at {cut}");
        }
        assert!(decode(b"something else entirely").is_err());
    }
}
