//! Reading what the `pgoutput` plugin sends (protocol version 1, with `messages 'true'`):
//! transaction boundaries, the outbox table's description and its inserted rows, and logical
//! messages (`pg_logical_emit_message`). Everything else (updates, deletes, truncates, types,
//! origins) is passed over. Values arrive in text form.
//!
//! The replication stream wraps each of these in an `XLogData` message; [`StreamMessage`]
//! reads that layer too (and the server's keepalives).

use super::lsn::Lsn;
use bytes::{Buf, Bytes};
use postroom_core::{Error, ErrorKind, Result};

fn short(what: &str) -> Error {
    Error::new(
        ErrorKind::InvalidData,
        format!("a short {what} in the replication stream"),
    )
}

fn need(b: &Bytes, n: usize, what: &str) -> Result<()> {
    if b.len() < n {
        Err(short(what))
    } else {
        Ok(())
    }
}

fn cstring(b: &mut Bytes, what: &str) -> Result<String> {
    let end = b.iter().position(|c| *c == 0).ok_or_else(|| short(what))?;
    let s = String::from_utf8_lossy(&b[..end]).into_owned();
    b.advance(end + 1);
    Ok(s)
}

/// One CopyData message of the replication stream.
#[derive(Debug)]
pub(crate) enum StreamMessage {
    /// Decoded log (one pgoutput message) starting at `start`.
    XLogData {
        /// Where this piece of the log starts.
        start: Lsn,
        /// The pgoutput message.
        data: Bytes,
    },
    /// The server's heartbeat: everything before `wal_end` has been sent.
    Keepalive {
        /// What the server has sent up to.
        wal_end: Lsn,
        /// Whether it wants a status update now (it is about to time the client out).
        reply_now: bool,
    },
}

impl StreamMessage {
    pub(crate) fn parse(mut b: Bytes) -> Result<Self> {
        need(&b, 1, "stream message")?;
        match b.get_u8() {
            b'w' => {
                need(&b, 24, "XLogData")?;
                let start = Lsn(b.get_u64());
                let _server_end = b.get_u64();
                let _sent_at = b.get_i64();
                Ok(StreamMessage::XLogData { start, data: b })
            }
            b'k' => {
                need(&b, 17, "keepalive")?;
                let wal_end = Lsn(b.get_u64());
                let _sent_at = b.get_i64();
                Ok(StreamMessage::Keepalive {
                    wal_end,
                    reply_now: b.get_u8() == 1,
                })
            }
            other => Err(Error::new(
                ErrorKind::InvalidData,
                format!("an unknown replication message {:?}", other as char),
            )),
        }
    }
}

/// A status update for the server: everything before `flushed` is done with (the slot's
/// confirmed position moves there), `received` is what was read.
pub(crate) fn status_update(received: Lsn, flushed: Lsn, reply_now: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(34);
    out.push(b'r');
    out.extend_from_slice(&received.0.to_be_bytes());
    out.extend_from_slice(&flushed.0.to_be_bytes());
    out.extend_from_slice(&flushed.0.to_be_bytes());
    out.extend_from_slice(&pg_now().to_be_bytes());
    out.push(u8::from(reply_now));
    out
}

/// Microseconds between the Unix epoch and PostgreSQL's (2000-01-01).
const PG_EPOCH_US: i64 = 946_684_800_000_000;

/// Now, in microseconds since 2000-01-01 (PostgreSQL's timestamps).
fn pg_now() -> i64 {
    let since_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
    since_unix.saturating_sub(PG_EPOCH_US)
}

/// How long ago a PostgreSQL timestamp (microseconds since 2000-01-01) was, in seconds (0 for
/// one in the future).
pub(crate) fn seconds_since(pg_time: i64) -> f64 {
    (pg_now().saturating_sub(pg_time)).max(0) as f64 / 1e6
}

/// A column of a relation, as pgoutput describes it.
#[derive(Clone, Debug)]
pub(crate) struct Relation {
    pub id: u32,
    pub namespace: String,
    pub name: String,
    pub columns: Vec<String>,
}

/// One value of an inserted row: NULL, or its text.
pub(crate) type Value = Option<Bytes>;

/// One pgoutput message.
#[derive(Debug)]
pub(crate) enum Decoded {
    /// A transaction starts; it commits at `final_lsn`.
    Begin { commit_time: i64 },
    /// The transaction committed; the log after it starts at `end_lsn`.
    Commit { end_lsn: Lsn, commit_time: i64 },
    /// A relation's description (sent before its first change, and after it changes).
    Relation(Relation),
    /// A row inserted into relation `relation`.
    Insert { relation: u32, values: Vec<Value> },
    /// A logical message (`pg_logical_emit_message`).
    Message {
        transactional: bool,
        prefix: String,
        content: Bytes,
    },
    /// Something the relay has no use for.
    Other,
}

impl Decoded {
    pub(crate) fn parse(mut b: Bytes) -> Result<Self> {
        need(&b, 1, "pgoutput message")?;
        match b.get_u8() {
            b'B' => {
                need(&b, 20, "begin")?;
                let _final_lsn = b.get_u64();
                Ok(Decoded::Begin {
                    commit_time: b.get_i64(),
                })
            }
            b'C' => {
                need(&b, 25, "commit")?;
                let _flags = b.get_u8();
                let _commit_lsn = b.get_u64();
                let end_lsn = Lsn(b.get_u64());
                Ok(Decoded::Commit {
                    end_lsn,
                    commit_time: b.get_i64(),
                })
            }
            b'R' => {
                need(&b, 4, "relation")?;
                let id = b.get_u32();
                let namespace = cstring(&mut b, "relation")?;
                let name = cstring(&mut b, "relation")?;
                need(&b, 3, "relation")?;
                let _identity = b.get_u8();
                let n = b.get_i16();
                let mut columns = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
                for _ in 0..n {
                    need(&b, 1, "column")?;
                    let _flags = b.get_u8();
                    columns.push(cstring(&mut b, "column")?);
                    need(&b, 8, "column")?;
                    b.advance(8);
                }
                Ok(Decoded::Relation(Relation {
                    id,
                    namespace,
                    name,
                    columns,
                }))
            }
            b'I' => {
                need(&b, 5, "insert")?;
                let relation = b.get_u32();
                if b.get_u8() != b'N' {
                    return Err(short("insert"));
                }
                Ok(Decoded::Insert {
                    relation,
                    values: tuple(&mut b)?,
                })
            }
            b'M' => {
                need(&b, 9, "message")?;
                let transactional = b.get_u8() & 1 == 1;
                let _lsn = b.get_u64();
                let prefix = cstring(&mut b, "message")?;
                need(&b, 4, "message")?;
                let len = usize::try_from(b.get_u32()).map_err(|_| short("message"))?;
                need(&b, len, "message")?;
                Ok(Decoded::Message {
                    transactional,
                    prefix,
                    content: b.split_to(len),
                })
            }
            _ => Ok(Decoded::Other),
        }
    }
}

/// TupleData: the values of a row.
fn tuple(b: &mut Bytes) -> Result<Vec<Value>> {
    need(b, 2, "tuple")?;
    let n = b.get_i16();
    let mut values = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
    for _ in 0..n {
        need(b, 1, "tuple")?;
        match b.get_u8() {
            b'n' | b'u' => values.push(None),
            b't' | b'b' => {
                need(b, 4, "tuple")?;
                let len = usize::try_from(b.get_i32()).map_err(|_| short("tuple"))?;
                need(b, len, "tuple")?;
                values.push(Some(b.split_to(len)));
            }
            other => {
                return Err(Error::new(
                    ErrorKind::InvalidData,
                    format!("an unknown tuple value kind {:?}", other as char),
                ));
            }
        }
    }
    Ok(values)
}

/// A `bytea` in text form (`\x` and hexadecimal digits) as bytes.
pub(crate) fn bytea(text: &[u8]) -> Result<Vec<u8>> {
    let bad = || Error::new(ErrorKind::InvalidData, "a bytea value not in hex form");
    let hex = text.strip_prefix(b"\\x").ok_or_else(bad)?;
    if hex.len() % 2 != 0 {
        return Err(bad());
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        b'A'..=b'F' => Ok(c - b'A' + 10),
        _ => Err(bad()),
    };
    hex.chunks_exact(2)
        .map(|p| Ok((digit(p[0])? << 4) | digit(p[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytea_text_is_read_and_garbage_refused() {
        assert_eq!(bytea(b"\\x00ff7A").unwrap(), vec![0, 255, 0x7a]);
        assert_eq!(bytea(b"\\x").unwrap(), Vec::<u8>::new());
        assert!(bytea(b"00ff").is_err());
        assert!(bytea(b"\\x0").is_err());
        assert!(bytea(b"\\xzz").is_err());
    }

    #[test]
    fn truncated_messages_are_errors_not_panics() {
        for tag in [b'B', b'C', b'R', b'I', b'M', b'w', b'k'] {
            for len in 0..40 {
                let mut raw = vec![tag];
                raw.extend(std::iter::repeat_n(0xffu8, len));
                let _ = Decoded::parse(Bytes::from(raw.clone()));
                let _ = StreamMessage::parse(Bytes::from(raw));
            }
        }
        assert!(
            Decoded::parse(Bytes::from_static(b"I\0\0\0\x01N\0\x01t\x7f\xff\xff\xff")).is_err()
        );
    }
}
