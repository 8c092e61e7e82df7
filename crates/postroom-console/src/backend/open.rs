//! The backend for a store opened through `postroom_ops`' registry (what `postroom serve`
//! opens from a URL): the console over that store, redriving through a broker when one is
//! given, else through the queue in the store's own tables.

use super::{ParkingConsole, PgBackend, PipelineProbe, SqliteBackend};
use postroom_core::{Error, ErrorKind, Result, Transport};
use postroom_ops::registry::Store;
use postroom_postgres::{PgQueue, PgStore};
use postroom_sqlite::SqliteStore;
use std::sync::Arc;

/// The two halves a [`Console`](crate::Console) is made of, over one backend.
#[derive(Clone)]
pub struct Backends {
    /// The parking lot, its archive, runs and audit.
    pub parking: Arc<dyn ParkingConsole>,
    /// The pipeline's figures and readiness.
    pub probe: Arc<dyn PipelineProbe>,
}

impl Backends {
    /// Both halves from one backend.
    pub fn of<B: ParkingConsole + PipelineProbe>(backend: B) -> Self {
        let backend = Arc::new(backend);
        Self {
            parking: backend.clone(),
            probe: backend,
        }
    }

    /// The console over `store` (a SQLite file or a PostgreSQL database opened by the
    /// registry), with `transport` as the place redrives go (`None`: the store's own queue).
    pub fn for_store(store: &dyn Store, transport: Option<Arc<dyn Transport>>) -> Result<Self> {
        let any = store.as_any();
        if let Some(sqlite) = any.downcast_ref::<SqliteStore>() {
            return Ok(Self::of(match transport {
                Some(t) => SqliteBackend::with_transport(sqlite.clone(), t),
                None => SqliteBackend::new(sqlite.clone()),
            }));
        }
        if let Some(pg) = any.downcast_ref::<PgStore>() {
            let transport = match transport {
                Some(t) => t,
                None => Arc::new(pg.queue(PgQueue::defaults())?),
            };
            return Ok(Self::of(PgBackend::new(pg.clone(), transport)));
        }
        Err(Error::new(
            ErrorKind::Config,
            format!(
                "the console has no backend for {} stores (it serves SQLite and PostgreSQL)",
                store.driver()
            ),
        ))
    }
}
