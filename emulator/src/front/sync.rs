//! Locking the front's in-memory state.

use std::sync::Mutex;

/// Locks a mutex, recovering from poisoning (the protected data stays consistent: every
/// critical section here is short and does not panic midway on purpose).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
