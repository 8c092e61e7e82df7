//! # postroom-kafka
//!
//! postroom on Kafka: the idempotent producer as a confirming publisher, consumer groups whose
//! offsets move only past settled records, retry topics that are never early, a parking topic
//! ingested into any [`ParkingStore`](postroom_core::ParkingStore), and the retry ordering
//! policies a consumer can choose.
//!
//! Where things go, for a consumer `inventory` under prefix `shop` and ladder `5s,30s`:
//!
//! | what | name | how |
//! |---|---|---|
//! | a route's topic | `shop.order.created` | key = aggregate key: one aggregate, one partition, in order |
//! | consumer group | `shop.inventory` | offsets stored only after the record and every earlier one of its partition settled |
//! | stage topics | `shop.inventory.retry.5s`, `shop.inventory.retry.30s` | each copy carries `x-due-at`; its partition is paused until the head is due |
//! | redrive topic | `shop.inventory.redrive` | a redrive (`Route::Consumer`) reaches this consumer only, same id |
//! | parking topic | `shop.inventory.parking` | every diagnostic as headers; group `shop.inventory.parking-ingest` moves copies into the store |
//! | delivery ledger | `shop.inventory.deliveries` | compacted, one partition: delivery counts of uncommitted records (the crash-loop bound) |
//!
//! **Producer.** `enable.idempotence=true`, `acks=all`; a delivery report is the confirm;
//! `publish_batch` keeps the whole batch in flight. The message id travels in the
//! `x-message-id` header, postroom headers as record headers. A fatal producer error replaces
//! the producer and hands every unconfirmed record back as an error.
//!
//! **Consumer.** A poll thread owns the librdkafka consumer (`enable.auto.commit=false`,
//! `enable.auto.offset.store=false`). Records of a partition may finish out of order (keys run
//! in parallel with [`Ordering::PerKey`](postroom_core::Ordering)); a tracker per partition
//! stores the lowest unsettled offset only. On revoke, in-flight records get
//! [`KafkaConfig::revoke_wait`] to settle, what is done is committed, and a record settled
//! after its partition went counts as ownership lost (`postroom_ownership_lost_total`): its new
//! owner gets it again and the inbox absorbs it. A delivery dropped unsettled (a failed act)
//! has its partition read again from there after a growing pause.
//!
//! **Crash loops.** Kafka does not count deliveries of a record, so each consumer group keeps
//! a delivery ledger: a compacted topic `<group>.deliveries` (one partition, key
//! `<topic>/<partition>`) holding, per partition, how many times each uncommitted record was
//! handed to a consumer loop. The poll thread writes it (and waits for the broker's
//! acknowledgement) before the records it covers are handed out, one write per batch; a member
//! that is assigned a partition reads it first. A record's delivery number is what the ledger
//! held plus one, so a record whose handling kills the process before its offset is committed
//! counts up on every restart and is parked with reason `crash_loop` at the consumer's
//! `max_deliveries` (`RedeliveryCounting::counted` is `true`). A record counted before (a
//! suspect) is handed out alone, after what was settled is committed, so a crash counts
//! against the record that caused it and not against records that happened to be in flight
//! with it. Offset commit metadata would be the natural place for these counts, but tansu
//! drops it; a compacted topic works on any Kafka-compatible broker.
//!
//! **Retry ordering** ([`RetryOrdering`]): retry topics with the version guard (default);
//! blocking (the partition waits for the failed record); per-key ordered retry (later records
//! of a key follow it into the retry path, other keys flow).
//!
//! **Security** ([`security`], [`settings`]): `kafka+ssl://` or `security_protocol=` for TLS
//! (brokers' certificates and names verified; `cacertfile=` names the CA, else the system's
//! roots), `certfile=`/`keyfile=` for a client certificate, a user in the URL for SASL
//! (`sasl_mechanism=PLAIN|SCRAM-SHA-256|SCRAM-SHA-512`) with its password from the environment
//! or a file, never printed.
//!
//! **Brokers in tests**: tansu 0.6 (`bash scripts/services.sh kafka`, memory only) and
//! librdkafka's mock cluster run as a process of its own (`postroom-kafka-mock`, several
//! brokers, leaders moved and brokers taken down on command). What was seen of tansu: a group
//! join takes about 5 s; a member that joins while another leaves, or leaves while the group
//! rebalances, can stall the group (no assignment within 30 s), so a closing subscriber waits
//! (bounded) for its consumer to leave before returning; producing to a missing topic creates
//! it with the broker's default partitions, so topics are created (`bind`, `Topology::apply`)
//! first. librdkafka 2.4 and 2.5 crashed on its fetch responses; 2.12 does not.
//!
//! **Building.** librdkafka is built from source by its own configure script and linked
//! statically, with TLS and SASL over an OpenSSL that is built from source too: a C compiler,
//! `make` and `perl` are all it needs (Debian: `apt-get install build-essential perl`); no
//! cmake, no system librdkafka or OpenSSL.
//!
//! ```no_run
//! # async fn demo() -> postroom_core::Result<()> {
//! use postroom_kafka::{KafkaConfig, KafkaTransport, topology::{Consumers, Topology}};
//! use postroom_core::{Subscription, Transport};
//!
//! let config = KafkaConfig::new("127.0.0.1:9092").prefix("shop").ladder("5s,30s".parse().unwrap());
//! let topology = Topology::new(&config, Consumers::default().with("inventory", &["order.created"]))?;
//! for change in topology.plan().await? { println!("{change}"); }   // dry run
//! topology.apply().await?;
//! let transport = KafkaTransport::new(config)?;
//! let subscriber = transport.subscribe(&Subscription::new("inventory", &["order.created"])).await?;
//! // hand `subscriber` to postroom_core::Consumer::run
//! # let _ = subscriber; Ok(()) }
//! ```

pub mod backlog;
pub mod config;
pub mod consumer;
#[cfg(feature = "driver")]
pub mod driver;
pub mod error;
pub mod headers;
pub mod naming;
pub mod producer;
pub mod security;
pub mod settings;
pub mod topology;
pub mod tracker;
pub mod transport;

pub use config::{KafkaConfig, RetryOrdering, TopicProvisioning};
pub use consumer::{KafkaDelivery, KafkaSubscriber, SubscriberSpec};
pub use naming::ConsumerTopics;
pub use producer::{KafkaProducer, Outbound};
pub use security::{KafkaSecurity, SaslMechanism, SaslPassword, SecurityProtocol};
pub use topology::{Change, Topology};
pub use tracker::OffsetTracker;
pub use transport::KafkaTransport;
