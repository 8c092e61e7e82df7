//! The parking lot on RabbitMQ: the record carried as headers, and the ingest into a store.

pub mod ingest;
pub mod record;

pub use ingest::{ParkingIngest, ingest_parking};
