//! The shop's one SQL implementation on both stores it runs on, opened the way the demo opens
//! it (the ops registry, then the shop kind of the store's driver): the same calls give the
//! same effects and the same facts on SQLite and on PostgreSQL.

use postroom_demo::shop::{InventoryResult, NewOrder, ShopDb, ShopFacts, kind_for};
use postroom_ops::registry::StoreOptions;
use postroom_ops::{Endpoint, Registry};
use postroom_testkit::servers::TestDb;
use std::sync::Arc;

async fn shop_at(database: &str) -> Arc<dyn ShopDb> {
    let registry = Registry::builtin();
    let endpoint = Endpoint::database(database).unwrap();
    let kind = kind_for(registry.store_driver(&endpoint).unwrap().name()).unwrap();
    let options = StoreOptions {
        table_prefix: kind.table_prefix().map(str::to_string),
        must_exist: false,
        max_connections: None,
    };
    let store = registry.open_store(&endpoint, &options).await.unwrap();
    kind.open(store.as_ref()).unwrap()
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

/// Orders, then inventory transactions in an order that exercises the inbox, the version
/// guard, the out-of-stock outcome and the crash marker.
async fn exercise(shop: &dyn ShopDb) -> ShopFacts {
    shop.reset().await.unwrap();
    let orders = [
        order("o-1", "WIDGET", false),
        order("o-2", "NONE", false),
        order("o-3", "WIDGET", true),
    ];
    shop.create_orders(&orders, "test").await.unwrap();
    let events: Vec<_> = orders.iter().flat_map(|o| o.events("test")).collect();
    // `events` were built again: they have new ids, as redelivered copies of the same orders
    // would not. Apply them as the consumer would.
    let apply = |i: usize| shop.apply_inventory(&events[i]);
    assert_eq!(apply(0).await.unwrap(), InventoryResult::Applied);
    assert_eq!(apply(0).await.unwrap(), InventoryResult::Duplicate, "inbox");
    assert_eq!(
        apply(1).await.unwrap(),
        InventoryResult::Rejected,
        "out of stock"
    );
    assert_eq!(
        apply(3).await.unwrap(),
        InventoryResult::Gap { last: None },
        "the cancellation before its order waits"
    );
    assert_eq!(apply(2).await.unwrap(), InventoryResult::Applied);
    assert_eq!(apply(3).await.unwrap(), InventoryResult::Applied);
    assert!(shop.arm_crash("o-1").await.unwrap());
    assert!(!shop.arm_crash("o-1").await.unwrap(), "armed once");
    assert_eq!(shop.reservations_of("o-1").await.unwrap(), 1);
    assert_eq!(shop.count_orders_with_sku("NONE").await.unwrap(), 1);
    assert_eq!(shop.produced().await.unwrap(), (3, 4));
    assert_eq!(shop.fault_for("o-1").await.unwrap(), None);
    shop.facts(&[]).await.unwrap()
}

fn summary(f: &ShopFacts) -> (u64, u64, u64, u64, u64, u64, u64, bool, usize) {
    (
        f.orders,
        f.messages,
        f.reserved,
        f.rejected,
        f.cancelled,
        f.duplicate_effects,
        f.order_violations,
        f.stock_consistent,
        f.lost_ids.len(),
    )
}

#[tokio::test]
async fn one_shop_the_same_facts_on_sqlite_and_postgres() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("shop.db");
    let sqlite = exercise(shop_at(file.to_str().unwrap()).await.as_ref()).await;
    let db = TestDb::create().await;
    let postgres = exercise(shop_at(&db.url).await.as_ref()).await;
    assert_eq!(summary(&sqlite), summary(&postgres));
    // Three orders, four events; one reserved and kept, one rejected, one reserved and then
    // released by its cancellation; the produced events of this test were never consumed
    // under their own ids, so all four count as lost.
    assert_eq!(summary(&sqlite), (3, 4, 2, 0, 1, 0, 0, true, 4));
}

#[tokio::test]
async fn a_database_with_foreign_shop_tables_is_refused() {
    let db = TestDb::create().await;
    let pool = db.pool(1).await;
    sqlx::query("CREATE TABLE shop_orders (id TEXT PRIMARY KEY)")
        .execute(&pool)
        .await
        .unwrap();
    let err = shop_at(&db.url).await.reset().await.unwrap_err();
    assert!(err.to_string().contains("did not create"), "{err}");
}

/// A batch in one transaction gives each message the result it would have had on its own: a
/// duplicate and a gap take back only their own part, a cancellation after its order in the
/// same batch applies, and the batch's size is a fact.
async fn exercise_batch(shop: &dyn ShopDb) -> (Vec<InventoryResult>, ShopFacts) {
    shop.reset().await.unwrap();
    let orders = [
        order("o-1", "WIDGET", false),
        order("o-2", "NONE", false),
        order("o-3", "WIDGET", true),
        order("o-4", "WIDGET", true),
    ];
    shop.create_orders(&orders, "test").await.unwrap();
    let e: Vec<_> = orders.iter().flat_map(|o| o.events("test")).collect();
    // e: o-1 created, o-2 created, o-3 created, o-3 cancelled, o-4 created, o-4 cancelled.
    assert_eq!(
        shop.apply_inventory(&e[0]).await.unwrap(),
        InventoryResult::Applied
    );
    let batch = [&e[5], &e[0], &e[1], &e[2], &e[3], &e[2], &e[4]];
    let results = shop.apply_inventory_batch(&batch).await.unwrap();
    // The cancellation of o-4 before its order waited; it applies in a later batch.
    let later = shop.apply_inventory_batch(&[&e[5]]).await.unwrap();
    assert_eq!(later, vec![InventoryResult::Applied]);
    assert_eq!(shop.reservations_of("o-3").await.unwrap(), 1);
    (results, shop.facts(&[]).await.unwrap())
}

#[tokio::test]
async fn a_batch_gives_each_message_its_own_result_on_sqlite_and_postgres() {
    use InventoryResult::{Applied, Duplicate, Gap, Rejected};
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("shop.db");
    let db = TestDb::create().await;
    for shop in [
        shop_at(file.to_str().unwrap()).await,
        shop_at(&db.url).await,
    ] {
        let (results, facts) = exercise_batch(shop.as_ref()).await;
        assert_eq!(
            results,
            vec![
                Gap { last: None },
                Duplicate,
                Rejected,
                Applied,
                Applied,
                Duplicate,
                Applied
            ]
        );
        assert_eq!(facts.duplicate_effects, 0);
        assert_eq!(facts.order_violations, 0);
        assert_eq!(facts.cancelled, 2, "both cancellations applied once");
        assert!(facts.stock_consistent);
        assert_eq!(facts.largest_batch, 7);
    }
}
