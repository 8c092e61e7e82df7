//! The WAL relay: the outbox published from PostgreSQL's write-ahead log by logical
//! decoding, so that the relay writes nothing per message.
//!
//! Producers insert outbox rows in their transactions, as for the claiming relay
//! ([`crate::outbox::enqueue`]), or write table-less messages into the log alone
//! ([`TableLessProducer`]). The relay reads a logical replication slot of its own (plugin
//! `pgoutput`, over a publication of the outbox's inserts) through the streaming
//! replication protocol, publishes with the transport's confirms, and advances the slot's
//! confirmed position only past messages whose confirms, and those of every earlier message,
//! arrived. Nothing is updated or deleted per message: the rows are removed in bulk by the
//! retention once the slot passed them.
//!
//! What holds:
//! - Only committed transactions are published: the server decodes a transaction only once
//!   it committed, and a rolled-back one never.
//! - A crash between publish and advance republishes from the slot's position, with the same
//!   ids; the consumers' inbox absorbs the copies.
//! - Per-aggregate order: only the head of an aggregate is in flight, so a message whose
//!   publish failed is tried again before the later messages of its aggregate are sent;
//!   different aggregates are published concurrently (`batch_size × batches_in_flight`).
//! - One active relay per slot (the server lets one reader have a slot); relays started on
//!   the same slot stand by and take over within [`TAKEOVER_AFTER_CRASH`] of its death.
//! - The slot's lag is measured ([`lag`]); a slot that was invalidated or dropped is an error
//!   with the way back ([`WalRelay::recreate_slot`]).
//! - Scheduled rows ([`crate::outbox::schedule`]) are not published from the log, which hands
//!   them over at their commit: a timer beside the stream claims each once it falls due and
//!   marks it published, as the claiming relay would.
//!
//! Do not run the claiming relay and the WAL relay on one outbox: each would publish every
//! row. `docs/wal-relay.md` in the repository has the setup, the trade-offs of the table-less
//! mode, the bounds (`max_slot_wal_keep_size`) and the measurements.

pub mod lag;
pub mod lsn;
mod pgoutput;
mod pump;
mod relay;
mod retention;
mod scheduled;
mod slot;
mod stream;
mod table_less;
mod window;
mod wire;
mod wire_tls;

pub use lsn::Lsn;
pub use relay::{TAKEOVER_AFTER_CRASH, WalRelay, WalRelayConfig};
pub use table_less::TableLessProducer;
