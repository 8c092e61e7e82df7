//! A consumer as a service declares it: a name, the routes it takes, a handler, and the few
//! settings that are its own. The retry policy is the service's (declared once, see
//! [`ServiceBuilder::retry`](crate::ServiceBuilder::retry)) unless a consumer says otherwise.

use postroom_core::consumer::BatchConfig;
use postroom_core::typed::{Contract, TypedHandler, typed};
use postroom_core::{
    BatchHandler, ConsumerConfig, EnvelopeDecoder, Error, Handler, Ordering, Result, RetryPolicy,
};
use std::sync::Arc;
use std::time::Duration;

/// One consumer of a service.
#[must_use]
pub struct ConsumerSpec {
    pub(crate) config: ConsumerConfig,
    pub(crate) routes: Vec<String>,
    pub(crate) prefetch: Option<usize>,
    pub(crate) handler: Kind,
    pub(crate) own_retry: bool,
    /// Batch settings given to this spec (a per-message consumer given them is refused).
    pub(crate) batch: Option<BatchConfig>,
    /// Persist-then-ack into the store's inbox queue, handled by workers.
    #[cfg(feature = "postgres")]
    pub(crate) inbox_queue: Option<InboxQueueMode>,
}

/// The inbox-queue mode of a consumer (PostgreSQL): each delivery is stored in the
/// consumer's inbox queue in the database (deduplicated by message id) and acknowledged at
/// once, so the broker's partitions and prefetch no longer bound the work in flight;
/// `workers` claim the stored rows with leases and run the handler, retrying on the
/// service's ladder and parking into the store's parking lot. With `ordered`, a worker takes
/// only the earliest pending message of an aggregate and waits for a missing version.
#[cfg(feature = "postgres")]
#[derive(Clone, Debug)]
pub struct InboxQueueMode {
    /// Workers handling at once (≥ 1; default 8).
    pub workers: usize,
    /// Rows a worker claims at once (≥ 1; default 1).
    pub batch: usize,
    /// Lease on a claimed row; must exceed the handler timeout (default 60 s).
    pub lease: Duration,
    /// Pause of an idle worker (default 100 ms).
    pub poll_interval: Duration,
    /// Ordered per aggregate, or `None` (default) for any order.
    pub ordered: Option<postroom_postgres::OrderedMode>,
}

#[cfg(feature = "postgres")]
impl Default for InboxQueueMode {
    fn default() -> Self {
        let d = postroom_postgres::InboxQueueConfig::new(ConsumerConfig::new(
            "",
            EnvelopeDecoder::new(),
        ));
        Self {
            workers: d.workers,
            batch: d.batch,
            lease: d.lease,
            poll_interval: d.poll_interval,
            ordered: d.ordered,
        }
    }
}

/// How a consumer applies its messages.
pub(crate) enum Kind {
    /// One handler call, one transaction, per message.
    Each(Arc<dyn Handler>),
    /// Many messages per handler call (one transaction, one inbox statement).
    Batch(Arc<dyn BatchHandler>),
}

postroom_core::debug_showing!(ConsumerSpec {
    name: config.name,
    routes
});

/// A consumer `name` of the contract `T`: it takes the route `T::TYPE`, accepts exactly
/// `T::TYPE` at `T::VERSIONS`, and hands `handler` a typed [`Message<T>`](crate::Message).
/// A payload that does not fit `T` is parked (code `malformed_data`).
pub fn consumer<T: Contract>(name: &str, handler: impl TypedHandler<T>) -> ConsumerSpec {
    ConsumerSpec {
        config: ConsumerConfig::for_contract::<T>(name),
        routes: vec![T::TYPE.to_string()],
        prefetch: None,
        handler: Kind::Each(Arc::new(typed(handler))),
        own_retry: false,
        batch: None,
        #[cfg(feature = "postgres")]
        inbox_queue: None,
    }
}

/// A batched consumer `name` of the contract `T`: it takes the route `T::TYPE`, accepts
/// exactly `T::TYPE` at `T::VERSIONS`, and hands `handler` up to
/// [`batch_size`](ConsumerSpec::batch_size) decoded messages at once, to apply in one
/// transaction (claim their inbox rows with one statement, e.g. `inbox::claim_many`). A batch
/// whose transaction fails is split and its halves tried again, down to single messages, so
/// one poison message does not retry or park its neighbours.
///
/// The subscription's prefetch is derived from the batch settings (a full batch for each of
/// the `concurrency` lanes) unless [`prefetch`](ConsumerSpec::prefetch) says otherwise: with
/// a small prefetch, batches hold only a few messages.
pub fn batch_consumer<T: Contract>(name: &str, handler: impl BatchHandler) -> ConsumerSpec {
    ConsumerSpec {
        config: ConsumerConfig::for_contract::<T>(name),
        routes: vec![T::TYPE.to_string()],
        prefetch: None,
        handler: Kind::Batch(Arc::new(handler)),
        own_retry: false,
        batch: Some(BatchConfig::default()),
        #[cfg(feature = "postgres")]
        inbox_queue: None,
    }
}

postroom_core::setters!(ConsumerSpec {
    /// Deliveries handled at once (default 4).
    concurrency => config.concurrency: usize,
    /// Longest handler call before it counts as a transient failure (default 30 s).
    handler_timeout => config.handler_timeout: Duration,
    /// Order of handling (default: any order, kept by the version guard).
    ordering => config.ordering: Ordering,
});

impl ConsumerSpec {
    /// A consumer `name` on `routes` (topic patterns: `*` one word, `#` any number) running
    /// `handler` on what `decoder` accepts (untyped: the handler reads
    /// [`Incoming`](crate::Incoming)).
    pub fn new(
        name: &str,
        routes: &[&str],
        decoder: EnvelopeDecoder,
        handler: impl Handler,
    ) -> Self {
        Self {
            config: ConsumerConfig::new(name, decoder),
            routes: routes.iter().map(|r| (*r).to_string()).collect(),
            prefetch: None,
            handler: Kind::Each(Arc::new(handler)),
            own_retry: false,
            batch: None,
            #[cfg(feature = "postgres")]
            inbox_queue: None,
        }
    }

    /// A batched consumer `name` on `routes` running `handler` on what `decoder` accepts
    /// (see [`batch_consumer`]).
    pub fn new_batch(
        name: &str,
        routes: &[&str],
        decoder: EnvelopeDecoder,
        handler: impl BatchHandler,
    ) -> Self {
        Self {
            config: ConsumerConfig::new(name, decoder),
            routes: routes.iter().map(|r| (*r).to_string()).collect(),
            prefetch: None,
            handler: Kind::Batch(Arc::new(handler)),
            own_retry: false,
            batch: Some(BatchConfig::default()),
            #[cfg(feature = "postgres")]
            inbox_queue: None,
        }
    }

    /// Most messages per batch of a batched consumer (default 64).
    pub fn batch_size(mut self, n: usize) -> Self {
        self.batch.get_or_insert_with(BatchConfig::default).max_size = n;
        self
    }

    /// Longest wait of a batched consumer for more messages after the first of a batch
    /// arrived (default 20 ms).
    pub fn linger(mut self, d: Duration) -> Self {
        self.batch.get_or_insert_with(BatchConfig::default).linger = d;
        self
    }

    /// Run this consumer in inbox-queue mode (see [`InboxQueueMode`]): the service's
    /// database must be PostgreSQL. Not for a batched consumer.
    #[cfg(feature = "postgres")]
    pub fn inbox_queue(mut self, mode: InboxQueueMode) -> Self {
        self.inbox_queue = Some(mode);
        self
    }

    /// Whether this consumer applies messages in batches.
    #[must_use]
    pub fn is_batched(&self) -> bool {
        matches!(self.handler, Kind::Batch(_))
    }

    /// The batch settings of a batched consumer, checked; `None` for a per-message one.
    pub(crate) fn batch_config(&self) -> Result<Option<BatchConfig>> {
        match (&self.handler, self.batch) {
            (Kind::Each(_), None) => Ok(None),
            (Kind::Each(_), Some(_)) => Err(Error::config(format!(
                "consumer {:?}: batch_size and linger apply to a batched consumer \
                 (postroom::batch_consumer), not to a per-message one",
                self.config.name
            ))),
            (Kind::Batch(_), b) => {
                let b = b.unwrap_or_default();
                if b.max_size == 0 || self.config.concurrency == 0 {
                    return Err(Error::config(format!(
                        "consumer {:?}: the batch size and the concurrency must be at least 1",
                        self.config.name
                    )));
                }
                Ok(Some(b))
            }
        }
    }

    /// The prefetch this consumer subscribes with: the one it was given, else twice the
    /// concurrency for a per-message consumer and a full batch per lane for a batched one.
    pub(crate) fn effective_prefetch(&self) -> usize {
        let lanes = self.config.concurrency.max(1);
        self.prefetch.unwrap_or_else(|| match self.batch_config() {
            Ok(Some(b)) => b.max_size.saturating_mul(lanes).max(2 * lanes),
            _ => lanes.saturating_mul(2),
        })
    }

    /// Take these routes instead.
    pub fn routes(mut self, routes: &[&str]) -> Self {
        self.routes = routes.iter().map(|r| (*r).to_string()).collect();
        self
    }

    /// Unsettled deliveries the transport may hand out ahead (default: twice the
    /// concurrency).
    pub fn prefetch(mut self, n: usize) -> Self {
        self.prefetch = Some(n);
        self
    }

    /// A retry policy of this consumer's own instead of the service's. Its ladder must be one
    /// the transport keeps: [`start`](crate::Service::start) refuses it otherwise, naming both.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.config.retry = policy;
        self.own_retry = true;
        self
    }

    /// Change any other setting of the consumer loop.
    pub fn configure(mut self, f: impl FnOnce(&mut ConsumerConfig)) -> Self {
        f(&mut self.config);
        self
    }

    /// The consumer's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.config.name
    }
}
