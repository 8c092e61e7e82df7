//! Which shop runs on which store: one entry per store driver of the registry, each behind
//! the same cargo feature as the driver.

use super::ShopDb;
use postroom_core::async_trait;
use postroom_ops::registry::Store;
use postroom_ops::{Endpoint, OpsError, OpsResult};
use std::sync::Arc;

/// The shop on one kind of store.
#[async_trait(?Send)]
pub trait ShopKind: Send + Sync {
    /// The registry's store driver it works on (`sqlite`, `postgres`).
    fn store(&self) -> &'static str;

    /// Table prefix of the postroom tables the demo uses on this store, when it has prefixes
    /// (the demo then never touches an application's own postroom tables).
    fn table_prefix(&self) -> Option<&'static str> {
        None
    }

    /// Make `database` ready for a new run before it is opened (the parent process, once).
    async fn prepare(&self, _database: &Endpoint) -> OpsResult {
        Ok(())
    }

    /// The shop on `store`, which the registry opened with this kind's table prefix.
    fn open(&self, store: &dyn Store) -> OpsResult<Arc<dyn ShopDb>>;
}

/// Every shop kind of this build: one push per kind, each behind its feature (a `vec![]`
/// cannot hold `#[cfg]`).
#[must_use]
#[allow(clippy::vec_init_then_push)]
pub fn kinds() -> Vec<&'static dyn ShopKind> {
    #[allow(unused_mut)]
    let mut all: Vec<&'static dyn ShopKind> = Vec::new();
    #[cfg(feature = "sqlite")]
    all.push(&super::sqlite::SqliteShopKind);
    #[cfg(feature = "postgres")]
    all.push(&super::postgres::PgShopKind);
    all
}

/// The shop kind for the registry's store driver `store`.
pub fn kind_for(store: &str) -> OpsResult<&'static dyn ShopKind> {
    kinds()
        .into_iter()
        .find(|k| k.store() == store)
        .ok_or_else(|| OpsError::usage(format!("the demo's shop does not run on {store}")))
}

/// The concrete store `T` behind `store`, or an error naming what was found instead.
pub(crate) fn concrete<T: 'static>(store: &dyn Store) -> OpsResult<&T> {
    store.as_any().downcast_ref::<T>().ok_or_else(|| {
        OpsError::failed(format!(
            "the {} store is not the one this shop expects",
            store.driver()
        ))
    })
}
