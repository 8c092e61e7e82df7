//! A consumer as a service declares it: a name, the routes it takes, a handler, and the few
//! settings that are its own. The retry policy is the service's (declared once, see
//! [`ServiceBuilder::retry`](crate::ServiceBuilder::retry)) unless a consumer says otherwise.

use postroom_core::typed::{Contract, TypedHandler, typed};
use postroom_core::{ConsumerConfig, EnvelopeDecoder, Handler, Ordering, RetryPolicy};
use std::sync::Arc;
use std::time::Duration;

/// One consumer of a service.
#[must_use]
pub struct ConsumerSpec {
    pub(crate) config: ConsumerConfig,
    pub(crate) routes: Vec<String>,
    pub(crate) prefetch: Option<usize>,
    pub(crate) handler: Arc<dyn Handler>,
    pub(crate) own_retry: bool,
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
        handler: Arc::new(typed(handler)),
        own_retry: false,
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
            handler: Arc::new(handler),
            own_retry: false,
        }
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
