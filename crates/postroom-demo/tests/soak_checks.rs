//! The soak's checks, each fed a run with one broken property: a message lost, an effect
//! applied twice, a pair of one order's events delivered out of order and applied in that
//! order. Each check must fail on its run and every check must pass on the clean one.
//!
//! A run is made the way the soak makes it: orders written through the shop's outbox, their
//! events (read back from the outbox, with their own ids) applied by the inventory
//! transaction in the order a transport delivered them, and the facts read from the database.

use postroom_core::Envelope;
use postroom_demo::shop::{InventoryResult, NewOrder, ShopDb, ShopFacts, kind_for};
use postroom_demo::soak::fact_failures;
use postroom_ops::registry::StoreOptions;
use postroom_ops::{Endpoint, Registry};
use sqlx::SqlitePool;
use std::sync::Arc;

struct Run {
    shop: Arc<dyn ShopDb>,
    pool: SqlitePool,
    _dir: tempfile::TempDir,
}

impl Run {
    async fn facts(&self) -> ShopFacts {
        self.shop.facts(&[]).await.unwrap()
    }

    async fn failures(&self) -> Vec<String> {
        fact_failures(&self.facts().await)
    }

    async fn exec(&self, sql: &str) {
        let done = sqlx::query(sql).execute(&self.pool).await.unwrap();
        assert!(done.rows_affected() > 0, "the change touched no row: {sql}");
    }
}

fn order(id: &str, sku: &str, cancel: bool) -> NewOrder {
    NewOrder {
        id: id.into(),
        sku: sku.into(),
        qty: 1,
        fail_times: None,
        cancel,
    }
}

/// A run of three orders (o-1 with its cancellation, o-2, and o-3 out of stock). The
/// transport delivers o-1's cancellation before its creation (the version guard defers it
/// until the creation is applied); `skip` names an order whose creation is never delivered.
async fn run(skip: Option<&str>) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("shop.db").display().to_string();
    let registry = Registry::builtin();
    let endpoint = Endpoint::database(&file).unwrap();
    let kind = kind_for(registry.store_driver(&endpoint).unwrap().name()).unwrap();
    let options = StoreOptions {
        table_prefix: kind.table_prefix().map(str::to_string),
        must_exist: false,
        max_connections: None,
    };
    let store = registry.open_store(&endpoint, &options).await.unwrap();
    let shop = kind.open(store.as_ref()).unwrap();
    shop.reset().await.unwrap();
    let orders = [
        order("o-1", "WIDGET", true),
        order("o-2", "WIDGET", false),
        order("o-3", "NONE", false),
    ];
    shop.create_orders(&orders, "test").await.unwrap();
    let pool = SqlitePool::connect(&format!("sqlite://{file}"))
        .await
        .unwrap();
    let bodies: Vec<Vec<u8>> = sqlx::query_scalar("SELECT body FROM postroom_outbox")
        .fetch_all(&pool)
        .await
        .unwrap();
    let events: Vec<Envelope> = bodies
        .iter()
        .map(|b| serde_json::from_slice(b).unwrap())
        .collect();
    let event = |order: &str, version: u64| {
        events
            .iter()
            .find(|e| e.data["order_id"] == order && e.aggregate.version == version)
            .unwrap_or_else(|| panic!("{order} v{version} in the outbox"))
    };
    let delivered = [
        (event("o-1", 2), InventoryResult::Gap { last: None }),
        (event("o-1", 1), InventoryResult::Applied),
        (event("o-1", 2), InventoryResult::Applied),
        (event("o-2", 1), InventoryResult::Applied),
        (event("o-3", 1), InventoryResult::Rejected),
    ];
    for (e, expected) in delivered {
        if skip == e.data["order_id"].as_str() && e.aggregate.version == 1 {
            continue;
        }
        assert_eq!(shop.apply_inventory(e).await.unwrap(), expected);
    }
    Run {
        shop,
        pool,
        _dir: dir,
    }
}

fn failed(failures: &[String], what: &str) -> bool {
    failures.iter().any(|f| f.contains(what))
}

#[tokio::test]
async fn a_clean_run_passes_every_check_and_counts_the_delivery_the_guard_held_back() {
    let run = run(None).await;
    assert_eq!(run.failures().await, Vec::<String>::new());
    let facts = run.facts().await;
    assert_eq!(facts.messages, 4);
    assert_eq!(facts.cancelled, 1);
    assert_eq!(
        facts.reordered_deliveries, 1,
        "o-1's cancellation came before its creation"
    );
}

#[tokio::test]
async fn one_lost_message_fails_the_loss_check() {
    let run = run(Some("o-2")).await;
    let failures = run.failures().await;
    assert!(failed(&failures, "1 message(s) lost"), "{failures:?}");
    assert_eq!(run.facts().await.lost_ids.len(), 1);
}

#[tokio::test]
async fn one_effect_applied_twice_fails_the_duplicate_check() {
    let run = run(None).await;
    assert!(run.failures().await.is_empty());
    // A copy of o-2's creation applied a second time past the inbox: its reservation and its
    // effect row written again.
    run.exec(
        "INSERT INTO shop_reservations SELECT * FROM shop_reservations WHERE order_id = 'o-2'",
    )
    .await;
    run.exec(
        "INSERT INTO shop_effects SELECT * FROM shop_effects WHERE order_id = 'o-2' AND consumer = 'inventory'",
    )
    .await;
    let failures = run.failures().await;
    assert!(failed(&failures, "applied twice"), "{failures:?}");
}

#[tokio::test]
async fn a_reordered_pair_applied_in_delivery_order_fails_the_order_check_from_the_effects() {
    let run = run(None).await;
    assert!(run.failures().await.is_empty());
    // o-1's cancellation applied before its creation: the effects in that order.
    run.exec(
        "UPDATE shop_effects SET ord_seq = 3 - ord_seq WHERE order_id = 'o-1' AND consumer = 'inventory'",
    )
    .await;
    let failures = run.failures().await;
    assert!(failed(&failures, "out of aggregate order"), "{failures:?}");
}

#[tokio::test]
async fn a_reordered_delivery_the_guard_let_through_fails_the_order_check_from_the_deliveries() {
    let run = run(None).await;
    assert!(run.failures().await.is_empty());
    // The delivery of o-1's cancellation that came before its creation, applied at once:
    // what a version guard that let it through would have recorded.
    run.exec(
        "UPDATE shop_deliveries SET outcome = 'applied' WHERE order_id = 'o-1' AND version = 2 AND seen = 0",
    )
    .await;
    let failures = run.failures().await;
    assert!(failed(&failures, "out of aggregate order"), "{failures:?}");
}
