//! The orders → inventory shop of the source article, shared by `demo` and `soak`.
//!
//! The orders service writes an order and its `order.created` event (and sometimes a later
//! `order.cancelled`, aggregate version 2) through the outbox; the inventory service reserves
//! or releases stock through its inbox, in one transaction, guarded by the aggregate version
//! (applied in version order: a duplicate is acked, a gap is deferred); out of stock is a
//! business outcome, `inventory.reservation_rejected`, published through the inventory service's own outbox and
//! applied by the orders service. Every applied effect is recorded, so the checks at the end
//! read facts from the database, never from counters in memory.
//!
//! [`ShopDb`] is written once, in SQL both stores run ([`sql`]); each store adds only what
//! differs (a few statements, how a transaction begins, commits and claims its inbox) and a
//! [`ShopKind`]: the entry that finds the shop for a store the registry opened.

pub mod facts;
pub mod handlers;
pub mod kind;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod sql;
#[cfg(feature = "sqlite")]
pub mod sqlite;

pub use kind::{ShopKind, kind_for};

use postroom_core::{Envelope, MessageId, OutgoingMessage, Result, async_trait};
use postroom_ops::Workload;
use std::collections::BTreeMap;

/// Consumer name of the inventory service.
pub const INVENTORY: &str = "inventory";
/// Consumer name of the orders service (it applies rejections).
pub const ORDERS: &str = "orders";
/// Topics the inventory service subscribes to.
pub const INVENTORY_TOPICS: &[&str] = &["order.created", "order.cancelled"];
/// Topics the orders service subscribes to.
pub const ORDERS_TOPICS: &[&str] = &["inventory.reservation_rejected"];

/// The shop's consumers as a workload under `prefix` (queue and exchange names on a broker).
#[must_use]
pub fn workload(prefix: &str, ladder: postroom_core::RetryLadder) -> Workload {
    Workload::new(prefix, ladder)
        .consumer(INVENTORY, INVENTORY_TOPICS)
        .consumer(ORDERS, ORDERS_TOPICS)
}

/// Stock at the start.
pub const STOCK: &[(&str, i64)] = &[
    ("WIDGET", 1_000_000_000),
    ("GADGET", 3),
    ("RARE", 2),
    ("NONE", 0),
];

/// An order to create.
#[derive(Clone, Debug)]
pub struct NewOrder {
    /// Order id.
    pub id: String,
    /// Item.
    pub sku: String,
    /// Quantity.
    pub qty: i64,
    /// Fail the inventory handler transiently on this many first attempts.
    pub fail_times: Option<u32>,
    /// Also emit `order.cancelled` (aggregate version 2) right after.
    pub cancel: bool,
}

impl NewOrder {
    /// The events of this order: `order.created` v1 and maybe `order.cancelled` v2.
    #[must_use]
    pub fn events(&self, producer: &str) -> Vec<Envelope> {
        let created = Envelope::builder("order.created", producer)
            .aggregate("order", &self.id, 1)
            .correlation_id(format!("checkout-{}", self.id))
            .data(serde_json::json!({"order_id": self.id, "sku": self.sku, "qty": self.qty}))
            .build();
        let mut out = vec![created.clone()];
        if self.cancel {
            out.push(
                created
                    .follow_up("order.cancelled", producer)
                    .aggregate("order", &self.id, 2)
                    .data(serde_json::json!({"order_id": self.id}))
                    .build(),
            );
        }
        out
    }
}

/// What the inventory transaction did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InventoryResult {
    /// Stock reserved or released.
    Applied,
    /// Out of stock: rejection published through the outbox.
    Rejected,
    /// The inbox (or the version guard) says this was applied before.
    Duplicate,
    /// An earlier version of the aggregate is missing: retry later.
    Gap {
        /// The last applied version.
        last: Option<u64>,
    },
}

/// Facts read from the database at the end of a run.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ShopFacts {
    /// Orders created.
    pub orders: u64,
    /// Order events and poison messages produced.
    pub messages: u64,
    /// Orders with a reservation (reserved or later cancelled).
    pub reserved: u64,
    /// Orders rejected (applied by the orders service).
    pub rejected: u64,
    /// Orders whose cancellation was applied.
    pub cancelled: u64,
    /// Produced messages with no effect and no parking record.
    pub lost_ids: Vec<String>,
    /// Messages with more than one effect, plus orders reserved more than once.
    pub duplicate_effects: u64,
    /// Effects applied out of aggregate order, and deliveries the version guard decided
    /// against the order it met.
    pub order_violations: u64,
    /// Deliveries the transport made ahead of their turn, held back by the version guard.
    pub reordered_deliveries: u64,
    /// Handler calls per retry attempt (attempt → calls), attempts ≥ 1.
    pub calls_by_attempt: BTreeMap<u32, u64>,
    /// Duplicate deliveries absorbed by an inbox.
    pub duplicates_absorbed: u64,
    /// Stock left equals initial stock minus live reservations.
    pub stock_consistent: bool,
    /// Most messages applied in one inventory transaction (0 when every message had its own).
    pub largest_batch: u64,
}

/// The shop's tables on one store.
#[async_trait]
pub trait ShopDb: Send + Sync + 'static {
    /// Create the business tables if needed and empty them; set the stock.
    async fn reset(&self) -> Result<()>;
    /// Write orders and their outbox rows, one transaction for the batch (the
    /// business rows and their events commit together or not at all).
    async fn create_orders(&self, orders: &[NewOrder], producer: &str) -> Result<Vec<MessageId>>;
    /// Write poison messages into the outbox (recorded as produced).
    async fn enqueue_poison(&self, messages: &[OutgoingMessage]) -> Result<()>;
    /// Injected transient failures for an order.
    async fn fault_for(&self, order_id: &str) -> Result<Option<u32>>;
    /// Record a handler call (for retries-per-stage figures).
    async fn record_attempt(&self, id: MessageId, attempt: u32) -> Result<()>;
    /// Record a duplicate absorbed by `consumer`'s inbox.
    async fn record_duplicate(&self, consumer: &str, id: MessageId) -> Result<()>;
    /// The inventory transaction: inbox claim, version guard, reserve / release / reject.
    async fn apply_inventory(&self, envelope: &Envelope) -> Result<InventoryResult>;
    /// The inventory transaction for many messages at once, in order, one result each (a
    /// duplicate or a gap leaves the others' effects to commit). The batch's size is recorded.
    async fn apply_inventory_batch(&self, envelopes: &[&Envelope]) -> Result<Vec<InventoryResult>>;
    /// The orders service's transaction for a rejection.
    async fn apply_rejection(&self, envelope: &Envelope) -> Result<InventoryResult>;
    /// Set the one-time crash marker for `order_id`; true the first time.
    async fn arm_crash(&self, order_id: &str) -> Result<bool>;
    /// Reservations of an order.
    async fn reservations_of(&self, order_id: &str) -> Result<u64>;
    /// Whether `consumer` absorbed a duplicate of this order's `order.created`.
    async fn duplicate_seen_for(&self, order_id: &str) -> Result<bool>;
    /// Published outbox rows of these orders' `order.created` (for duplicate injection).
    async fn published_events(&self, order_ids: &[String]) -> Result<Vec<OutgoingMessage>>;
    /// Facts, with `parked_ids` counting as an outcome.
    async fn facts(&self, parked_ids: &[MessageId]) -> Result<ShopFacts>;
    /// Orders with this sku.
    async fn count_orders_with_sku(&self, sku: &str) -> Result<u64>;
    /// Ids of the poison messages produced.
    async fn poison_ids(&self) -> Result<Vec<String>>;
    /// Effect rows written so far (a cheap progress figure).
    async fn effects_count(&self) -> Result<u64>;
    /// Orders and messages produced so far.
    async fn produced(&self) -> Result<(u64, u64)>;
}
