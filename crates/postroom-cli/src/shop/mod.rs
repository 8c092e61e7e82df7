//! The orders → inventory shop of the source article, shared by `demo` and `soak`.
//!
//! The orders service writes an order and its `order.created` event (and sometimes a later
//! `order.cancelled`, aggregate version 2) through the outbox; the inventory service reserves
//! or releases stock through its inbox, in one transaction, guarded by the aggregate version
//! (R13: apply in order, ack duplicates, defer gaps); out of stock is a business outcome,
//! `inventory.reservation_rejected`, published through the inventory service's own outbox and
//! applied by the orders service. Every applied effect is recorded, so the checks at the end
//! read facts from the database, never from counters in memory.
//!
//! [`ShopDb`] is implemented once per store (SQLite, PostgreSQL).

pub mod facts;
pub mod handlers;
pub mod postgres;
pub mod sqlite;

use postroom_core::{
    Envelope, MessageId, OutboxStore, OutgoingMessage, ParkingStore, Result, async_trait,
};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Consumer name of the inventory service.
pub const INVENTORY: &str = "inventory";
/// Consumer name of the orders service (it applies rejections).
pub const ORDERS: &str = "orders";
/// Topics the inventory service subscribes to.
pub const INVENTORY_TOPICS: &[&str] = &["order.created", "order.cancelled"];
/// Topics the orders service subscribes to.
pub const ORDERS_TOPICS: &[&str] = &["inventory.reservation_rejected"];

/// The shop's consumers as a RabbitMQ workload under `prefix`.
#[must_use]
pub fn workload(prefix: &str, ladder: postroom_core::RetryLadder) -> crate::stack::Workload {
    let owned = |t: &[&str]| t.iter().map(|s| (*s).to_string()).collect::<Vec<_>>();
    crate::stack::Workload {
        prefix: prefix.into(),
        ladder,
        consumers: vec![
            (INVENTORY.into(), owned(INVENTORY_TOPICS)),
            (ORDERS.into(), owned(ORDERS_TOPICS)),
        ],
    }
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
    /// Effects applied out of aggregate order.
    pub order_violations: u64,
    /// Handler calls per retry attempt (attempt → calls), attempts ≥ 1.
    pub calls_by_attempt: BTreeMap<u32, u64>,
    /// Duplicate deliveries absorbed by an inbox.
    pub duplicates_absorbed: u64,
    /// Stock left equals initial stock minus live reservations.
    pub stock_consistent: bool,
}

/// The shop's tables on one store.
#[async_trait]
pub trait ShopDb: Send + Sync + 'static {
    /// Create the business tables if needed and empty them; set the stock.
    async fn reset(&self) -> Result<()>;
    /// Write orders and their outbox rows, one transaction for the batch (R2).
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
    /// Messages not yet settled in the embedded queue (0 when the broker is external).
    async fn in_flight(&self) -> Result<u64>;
    /// The outbox store.
    fn outbox(&self) -> Arc<dyn OutboxStore>;
    /// The parking store.
    fn parking(&self) -> Arc<dyn ParkingStore>;
}
