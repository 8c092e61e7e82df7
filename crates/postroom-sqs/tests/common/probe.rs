//! The shared probe handler ([`postroom_testkit::probe`]), applying into an SQLite inbox.

// Each test binary uses a part of these.
#![allow(unused_imports)]

pub use postroom_testkit::probe::{
    Call, Mode, Probe, Running, config, first_transient_retry, policy, spawn as run, store_at,
};
