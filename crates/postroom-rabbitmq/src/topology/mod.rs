//! The RabbitMQ topology of a workload: exchanges, quorum queues, bindings and the
//! policies that carry TTL, dead-lettering, overflow and delivery limit.
//!
//! [`Topology::plan`] reads the broker through the management API and lists the changes that
//! would bring it to the configuration (empty when it is up to date); [`Topology::apply`]
//! makes them. Queues are declared with `x-queue-type` only: everything else is a policy, so
//! an operator can change a delay or a limit without deleting a queue.

pub mod change;
pub mod desired;

pub use change::Change;
pub use desired::DesiredTopology;

client! {
    pub mod amqp;
    mod plan;
    pub use plan::Topology;
}
