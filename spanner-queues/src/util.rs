//! Small helpers shared by every layer; no dependency on the rest of the crate.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// The boxed error type carried as a source by this crate's errors (a handler's failure, a
/// codec's error).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Locks `mutex`, tolerating poison: the data behind this crate's mutexes stays consistent
/// across a panic (each critical section is a single insert, remove or read), so a panic
/// elsewhere must not turn into a panic here.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
