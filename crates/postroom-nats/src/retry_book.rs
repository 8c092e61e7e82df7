//! What a delayed nak cannot carry. JetStream redelivers the stored message as it was
//! published, so the retry bookkeeping postroom keeps in headers elsewhere (first failure time,
//! last error) is kept here, per delivery in this process, and put back on the redelivered
//! copy's headers. The attempt number itself needs no book: it is derived from the server's
//! delivery count (see [`crate::subscriber`]). A consumer restart loses only these
//! diagnostics, never the message or its attempt count.

use postroom_core::RetryPlan;
use postroom_core::message::{Headers, headers as h, truncate};
use postroom_core::retry::headers::MAX_HEADER_ERROR_CHARS;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// Entries kept at most; the oldest are forgotten first.
const CAPACITY: usize = 100_000;

#[derive(Clone, Debug)]
struct Entry {
    first_failure_at: String,
    class: String,
    code: String,
    message: String,
}

type Key = (String, u64);

/// Retry diagnostics of delayed copies, keyed by durable and stream sequence.
#[derive(Debug, Default)]
pub struct RetryBook {
    /// The entries, and their keys in the order they were first recorded.
    inner: Mutex<(HashMap<Key, Entry>, VecDeque<Key>)>,
}

impl RetryBook {
    /// Record a delayed nak of `seq` on `durable` under `plan`.
    pub fn record(&self, durable: &str, seq: u64, plan: &RetryPlan) {
        let mut g = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = (durable.to_string(), seq);
        let first =
            g.0.get(&key)
                .map(|e| e.first_failure_at.clone())
                .unwrap_or_else(|| chrono::Utc::now().to_rfc3339());
        let entry = Entry {
            first_failure_at: first,
            class: plan.error_class.as_str().into(),
            code: plan.error_code.clone(),
            message: truncate(&plan.error_message, MAX_HEADER_ERROR_CHARS),
        };
        if g.0.insert(key.clone(), entry).is_none() {
            g.1.push_back(key);
        }
        while g.1.len() > CAPACITY {
            if let Some(old) = g.1.pop_front() {
                g.0.remove(&old);
            }
        }
    }

    /// Put what is known of `seq` on `headers` (headers the copy already has win).
    pub fn annotate(&self, durable: &str, seq: u64, headers: &mut Headers) {
        let g = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(e) = g.0.get(&(durable.to_string(), seq)) {
            headers
                .entry(h::FIRST_FAILURE_AT.into())
                .or_insert_with(|| e.first_failure_at.clone());
            headers.insert(h::LAST_ERROR_CLASS.into(), e.class.clone());
            headers.insert(h::LAST_ERROR_CODE.into(), e.code.clone());
            headers.insert(h::LAST_ERROR.into(), e.message.clone());
        }
    }

    /// Forget `seq` once it is settled for good.
    pub fn forget(&self, durable: &str, seq: u64) {
        let mut g = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = (durable.to_string(), seq);
        if g.0.remove(&key).is_some() {
            g.1.retain(|k| k != &key);
        }
    }
}
