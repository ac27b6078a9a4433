//! Locking that survives a poisoned mutex.
//!
//! A runtime thread that panics while holding a lock must not take every
//! other thread down with it: the state behind our mutexes stays consistent
//! between statements (a panic is reported where it happens), so a poisoned
//! lock is simply taken over.

use std::sync::{Mutex, MutexGuard};

/// `mutex.locked()`: lock, taking over a poisoned mutex.
pub trait LockExt<T: ?Sized> {
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> LockExt<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(|p| p.into_inner())
    }
}
