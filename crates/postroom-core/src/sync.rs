//! Locks over plain values that stay usable after a panic elsewhere.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Lock `mutex`, taking the value even if a thread panicked while holding it (for state that
/// a panic cannot leave half-written).
pub fn lock_unpoisoned<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
