//! One streaming session on the slot: `START_REPLICATION` on a replication connection, then
//! the decoded log read as whole committed transactions of outbox messages (rows inserted into
//! the outbox table, and the table-less producer's logical messages), and status updates sent
//! back with the position the slot may advance to.
//!
//! The server sends a transaction only once it committed, and in commit order: a transaction
//! that rolled back is never sent at all.

use super::lsn::Lsn;
use super::pgoutput::{Decoded, Relation, StreamMessage, Value, bytea, status_update};
use super::wire::{Target, WireConnection, WireError};
use postroom_core::outbox::route_from_parts;
use postroom_core::{Error, ErrorKind, Headers, MessageId, OutgoingMessage, Result};
use std::collections::HashMap;

/// Where the outbox's columns are in its rows, as the server described the table.
#[derive(Clone, Debug)]
struct OutboxColumns {
    seq: usize,
    id: usize,
    aggregate_key: usize,
    route_kind: usize,
    route: usize,
    headers: usize,
    body: usize,
    /// Absent in rows logged before the outbox had scheduled sends.
    not_before: Option<usize>,
}

impl OutboxColumns {
    fn of(r: &Relation) -> Result<Self> {
        let at = |name: &str| {
            r.columns.iter().position(|c| c == name).ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidData,
                    format!(
                        "the outbox table {}.{} has no column {name}",
                        r.namespace, r.name
                    ),
                )
            })
        };
        Ok(Self {
            seq: at("seq")?,
            id: at("id")?,
            aggregate_key: at("aggregate_key")?,
            route_kind: at("route_kind")?,
            route: at("route")?,
            headers: at("headers")?,
            body: at("body")?,
            not_before: r.columns.iter().position(|c| c == "not_before"),
        })
    }

    /// Whether an inserted row is a scheduled one: it is left to the timer that claims
    /// scheduled rows when they fall due (published from the log, it would go out early, and
    /// the timer would send it once more).
    fn is_scheduled(&self, values: &[Value]) -> bool {
        self.not_before
            .is_some_and(|i| values.get(i).is_some_and(Option::is_some))
    }

    /// The message an inserted row holds, and the row's `seq`.
    fn message(&self, values: &[Value]) -> Result<Read> {
        let text = |i: usize, name: &str| -> Result<&[u8]> {
            values.get(i).and_then(Option::as_deref).ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidData,
                    format!("an outbox row without {name}"),
                )
            })
        };
        let utf8 = |i: usize, name: &str| -> Result<String> {
            String::from_utf8(text(i, name)?.to_vec()).map_err(|_| {
                Error::new(
                    ErrorKind::InvalidData,
                    format!("an outbox row's {name} is not UTF-8"),
                )
            })
        };
        let id: uuid::Uuid = utf8(self.id, "id")?
            .parse()
            .map_err(|_| Error::new(ErrorKind::InvalidData, "an outbox row's id is not a UUID"))?;
        let mut headers: Headers =
            serde_json::from_slice(text(self.headers, "headers")?).map_err(|e| {
                Error::new(
                    ErrorKind::InvalidData,
                    format!("outbox row {id}: its headers are not an object of strings ({e})"),
                )
            })?;
        headers
            .entry(postroom_core::message::headers::AGGREGATE_KEY.into())
            .or_insert(utf8(self.aggregate_key, "aggregate_key")?);
        let route = route_from_parts(
            &utf8(self.route_kind, "route_kind")?,
            utf8(self.route, "route")?,
        )?;
        let seq = utf8(self.seq, "seq")?.parse().ok();
        Ok((
            seq,
            OutgoingMessage {
                id: MessageId::from(id),
                route,
                headers,
                body: bytea(text(self.body, "body")?)?,
            },
        ))
    }
}

/// A message read from the log, with its outbox row's `seq` when it came from the table.
pub(crate) type Read = (Option<i64>, OutgoingMessage);

/// What the stream said.
#[derive(Debug)]
pub(crate) enum Event {
    /// A committed transaction's outbox messages, in order (possibly none), and whether it
    /// wrote scheduled rows (not among the messages: the timer publishes them).
    Committed {
        end_lsn: Lsn,
        commit_time: i64,
        messages: Vec<Read>,
        scheduled: bool,
    },
    /// Everything before `wal_end` was sent; `reply_now` asks for a status update at once.
    Keepalive { wal_end: Lsn, reply_now: bool },
    /// A piece of a transaction not yet committed, or of no interest.
    Nothing,
}

/// See the module documentation.
pub(crate) struct Session {
    conn: WireConnection,
    outbox_table: String,
    outbox_schema: String,
    message_prefix: String,
    relations: HashMap<u32, Option<OutboxColumns>>,
    open: Option<(i64, Vec<Read>)>,
    /// The open transaction wrote scheduled rows.
    open_scheduled: bool,
    received: Lsn,
}

impl Session {
    /// Connect to `target` and start streaming slot `slot` through `publication`, from where
    /// the slot stands. A slot that another relay reads is refused with SQLSTATE 55006.
    pub(crate) async fn start(
        target: &Target,
        slot: &str,
        publication: &str,
        schema: &str,
        prefix: &crate::TablePrefix,
    ) -> std::result::Result<Self, WireError> {
        let mut conn = WireConnection::connect(target, "postroom wal relay").await?;
        let sql = format!(
            "START_REPLICATION SLOT \"{slot}\" LOGICAL 0/0 (proto_version '1', publication_names '\"{publication}\"', messages 'true')"
        );
        conn.start_copy_both(&sql).await?;
        Ok(Self {
            conn,
            outbox_table: format!("{prefix}outbox"),
            outbox_schema: schema.to_string(),
            message_prefix: super::table_less::message_prefix(schema, prefix),
            relations: HashMap::new(),
            open: None,
            open_scheduled: false,
            received: Lsn::ZERO,
        })
    }

    /// The next event. Cancel-safe: a message partly read stays buffered.
    pub(crate) async fn next(&mut self) -> Result<Event> {
        let data = self
            .conn
            .read_copy_data()
            .await
            .map_err(|e| e.into_error("reading the replication stream"))?
            .ok_or_else(|| {
                Error::new(ErrorKind::Closed, "the server ended the replication stream")
            })?;
        match StreamMessage::parse(data)? {
            StreamMessage::Keepalive { wal_end, reply_now } => {
                self.received = self.received.max(wal_end);
                Ok(Event::Keepalive {
                    wal_end: if self.open.is_some() {
                        Lsn::ZERO
                    } else {
                        wal_end
                    },
                    reply_now,
                })
            }
            StreamMessage::XLogData { start, data } => {
                self.received = self.received.max(start);
                self.take(Decoded::parse(data)?)
            }
        }
    }

    fn take(&mut self, decoded: Decoded) -> Result<Event> {
        match decoded {
            Decoded::Begin { commit_time } => {
                self.open = Some((commit_time, Vec::new()));
                self.open_scheduled = false;
            }
            Decoded::Commit {
                end_lsn,
                commit_time,
            } => {
                let (_, messages) = self.open.take().unwrap_or_default();
                return Ok(Event::Committed {
                    end_lsn,
                    commit_time,
                    messages,
                    scheduled: std::mem::take(&mut self.open_scheduled),
                });
            }
            Decoded::Relation(r) => {
                let outbox = r.name == self.outbox_table && r.namespace == self.outbox_schema;
                let columns = if outbox {
                    Some(OutboxColumns::of(&r)?)
                } else {
                    None
                };
                self.relations.insert(r.id, columns);
            }
            Decoded::Insert { relation, values } => {
                if let Some(Some(columns)) = self.relations.get(&relation) {
                    if columns.is_scheduled(&values) {
                        self.in_open("an outbox insert")?;
                        self.open_scheduled = true;
                    } else {
                        let message = columns.message(&values)?;
                        self.in_open("an outbox insert")?.push(message);
                    }
                }
            }
            Decoded::Message {
                transactional,
                prefix,
                content,
            } => {
                if prefix == self.message_prefix {
                    if !transactional {
                        tracing::error!(
                            prefix,
                            "a non-transactional logical message with the outbox's prefix was written outside a transaction: not published (write them with TableLessProducer::emit)"
                        );
                        return Ok(Event::Nothing);
                    }
                    let message = super::table_less::decode(&content)?;
                    self.in_open("an outbox message")?.push((None, message));
                }
            }
            Decoded::Other => {}
        }
        Ok(Event::Nothing)
    }

    fn in_open(&mut self, what: &str) -> Result<&mut Vec<Read>> {
        self.open.as_mut().map(|(_, m)| m).ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidData,
                format!("{what} outside a transaction in the replication stream"),
            )
        })
    }

    /// Tell the server that everything before `flushed` is done with.
    pub(crate) async fn send_status(&mut self, flushed: Lsn, reply_now: bool) -> Result<()> {
        let received = self.received.max(flushed);
        self.conn
            .send_copy_data(&status_update(received, flushed, reply_now))
            .await
            .map_err(|e| e.into_error("sending the slot's position"))
    }
}
