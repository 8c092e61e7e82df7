//! The shop's handlers, written once over [`ShopDb`].

use super::{INVENTORY, InventoryResult, ORDERS, ShopDb};
use postroom_core::ordering::VersionDecision;
use postroom_core::{
    BatchHandler, Consumer, ConsumerConfig, EnvelopeDecoder, Handled, Handler, HandlerError,
    Incoming, RetryPolicy, async_trait,
};
use std::io::Write;
use std::sync::Arc;

/// Transient failures injected by hashing message ids (soak): a share of messages fail on
/// their first `times` attempts.
#[derive(Clone, Copy, Debug)]
pub struct HashedFaults {
    /// Share of messages, 0.0..=1.0.
    pub share: f64,
    /// Attempts that fail.
    pub times: u32,
}

/// The inventory service's handler.
pub struct InventoryHandler<D: ?Sized> {
    /// Store.
    pub db: Arc<D>,
    /// Order whose handling stops after COMMIT and before the ack, once (to be killed).
    pub crash_order: Option<String>,
    /// Hashed transient faults, on top of per-order faults.
    pub hashed: Option<HashedFaults>,
}

impl<D: ShopDb + ?Sized> InventoryHandler<D> {
    fn hashed_fault(&self, m: &Incoming) -> bool {
        self.hashed.is_some_and(|h| {
            let bucket = m.envelope.id.as_uuid().as_u128() % 10_000;
            (bucket as f64) < h.share * 10_000.0 && m.attempt < h.times
        })
    }
}

impl<D: ShopDb + ?Sized> InventoryHandler<D> {
    /// What comes before the transaction: the order id, the attempt recorded, injected
    /// failures. `Ok(order_id)` when the message goes on to the transaction.
    async fn before(&self, m: &Incoming) -> Result<String, HandlerError> {
        let env = &m.envelope;
        let order_id = env.data["order_id"]
            .as_str()
            .ok_or_else(|| {
                HandlerError::permanent(
                    "bad_payload",
                    format!("{} without order_id", env.message_type),
                )
            })?
            .to_string();
        self.db.record_attempt(env.id, m.attempt).await?;
        let injected = self
            .db
            .fault_for(&order_id)
            .await?
            .filter(|n| m.attempt < *n);
        if let Some(n) = injected {
            return Err(HandlerError::transient(
                "db_unavailable",
                format!(
                    "injected: inventory database unavailable (attempt {} of {n} failing)",
                    m.attempt
                ),
            ));
        }
        if self.hashed_fault(m) {
            return Err(HandlerError::transient(
                "db_unavailable",
                format!("injected transient failure on attempt {}", m.attempt),
            ));
        }
        Ok(order_id)
    }

    /// What the consumer is told of a committed transaction's result for `m`.
    async fn after(
        &self,
        m: &Incoming,
        order_id: &str,
        result: InventoryResult,
    ) -> Result<Handled, HandlerError> {
        let env = &m.envelope;
        match result {
            InventoryResult::Duplicate => {
                self.db.record_duplicate(INVENTORY, env.id).await?;
                Ok(Handled::Duplicate)
            }
            InventoryResult::Gap { last } => {
                let gap = VersionDecision::Gap {
                    missing_from: last.map_or(1, |v| v + 1),
                    missing_to: env.aggregate.version - 1,
                };
                Err(gap
                    .gap_error(&env.aggregate.key())
                    .expect("a gap has an error"))
            }
            InventoryResult::Rejected => Ok(Handled::BusinessOutcome("out_of_stock".into())),
            InventoryResult::Applied => {
                if self.crash_order.as_deref() == Some(order_id)
                    && env.message_type == "order.created"
                    && self.db.arm_crash(order_id).await?
                {
                    // Committed, not acked: tell the supervisor, which kills this process now.
                    println!("CRASH-POINT {order_id} {}", env.id);
                    let _ = std::io::stdout().flush();
                    std::future::pending::<()>().await;
                }
                Ok(Handled::Applied)
            }
        }
    }
}

#[async_trait]
impl<D: ShopDb + ?Sized> Handler for InventoryHandler<D> {
    async fn handle(&self, m: &Incoming) -> Result<Handled, HandlerError> {
        let order_id = self.before(m).await?;
        let result = self.db.apply_inventory(&m.envelope).await?;
        self.after(m, &order_id, result).await
    }
}

/// The batched inventory service: the messages that pass the checks before the transaction
/// are applied in one transaction; those that fail them are left out and retried or parked on
/// their own. A failed transaction fails the whole batch (the consumer splits it).
#[async_trait]
impl<D: ShopDb + ?Sized> BatchHandler for InventoryHandler<D> {
    async fn handle_batch(
        &self,
        batch: &[Incoming],
    ) -> Result<Vec<Result<Handled, HandlerError>>, HandlerError> {
        let mut before = Vec::with_capacity(batch.len());
        for m in batch {
            before.push(self.before(m).await);
        }
        let taken: Vec<&postroom_core::Envelope> = batch
            .iter()
            .zip(&before)
            .filter(|(_, b)| b.is_ok())
            .map(|(m, _)| &m.envelope)
            .collect();
        let mut results = if taken.is_empty() {
            Vec::new()
        } else {
            self.db.apply_inventory_batch(&taken).await?
        }
        .into_iter();
        let mut out = Vec::with_capacity(batch.len());
        for (m, b) in batch.iter().zip(before) {
            out.push(match b {
                Ok(order_id) => {
                    let result = results
                        .next()
                        .expect("one result per message in the transaction");
                    self.after(m, &order_id, result).await
                }
                Err(e) => Err(e),
            });
        }
        Ok(out)
    }
}

/// The orders service's handler for `inventory.reservation_rejected`.
pub struct RejectionHandler<D: ?Sized> {
    /// Store.
    pub db: Arc<D>,
}

impl RejectionHandler<dyn ShopDb> {
    /// The orders service's consumer of rejections on `db`: `inventory.reservation_rejected`
    /// version 1, `concurrency` at once, retried by `retry`.
    pub fn consumer(db: Arc<dyn ShopDb>, concurrency: usize, retry: RetryPolicy) -> Consumer<Self> {
        let mut cfg = ConsumerConfig::new(
            ORDERS,
            EnvelopeDecoder::new().accept("inventory.reservation_rejected", 1..=1),
        );
        cfg.concurrency = concurrency;
        cfg.retry = retry;
        Consumer::new(cfg, Arc::new(Self { db }))
    }
}

#[async_trait]
impl<D: ShopDb + ?Sized> Handler for RejectionHandler<D> {
    async fn handle(&self, m: &Incoming) -> Result<Handled, HandlerError> {
        match self.db.apply_rejection(&m.envelope).await? {
            InventoryResult::Duplicate => {
                self.db.record_duplicate(ORDERS, m.envelope.id).await?;
                Ok(Handled::Duplicate)
            }
            _ => Ok(Handled::Applied),
        }
    }
}
