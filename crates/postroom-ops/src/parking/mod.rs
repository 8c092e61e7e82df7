//! The parking lot as operators see it: filters typed as text, parked messages and redrive
//! runs as JSON with payloads hidden or capped, redrive and ingest runs.

pub mod filter;
pub mod ingest;
pub mod output;
pub mod redrive;

pub use filter::FilterSpec;
pub use output::{PayloadView, escape_controls, parked_json, payload_text, run_json};
pub use redrive::{Redrive, RedriveGuard};
