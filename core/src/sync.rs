//! Locking a `std::sync::Mutex` that survives poisoning, for the callers
//! that still lock std mutexes (the data plane and the C ABI layer); the
//! rest of core locks `parking_lot` mutexes, which do not poison.
//!
//! A thread that panics while holding a lock must not take every other
//! thread down with it: the state behind these mutexes stays consistent
//! between statements, so a poisoned lock is simply taken over.

use std::sync::{Mutex, MutexGuard};

/// `mutex.locked()`: lock, taking over a poisoned mutex.
pub trait LockExt<T: ?Sized> {
    /// Lock, taking over a poisoned mutex.
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> LockExt<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(|p| p.into_inner())
    }
}
