//! Checked handles. What C holds is an index plus a generation into one
//! table, never a pointer to Rust memory, so a stale, freed or wrong-kind
//! handle is detected and reported instead of being dereferenced.
//!
//! Each opaque C type names the Rust value it stands for by implementing
//! [`Handle`]; lookups are typed by the C pointer they are given, so asking
//! for the wrong kind is a compile error, and a handle of the wrong kind
//! passed from C is `MONARCH_ERR_INVALID_HANDLE`.

use std::any::{Any, TypeId};
use std::sync::Arc;

use parking_lot::{const_mutex, Mutex, MutexGuard};

use crate::status::{Fail, MONARCH_ERR_INVALID_HANDLE};

/// An opaque `monarch_*` C type: C only holds pointers to it, which are
/// handles of a registered `Rust` value. `Rust` must be `Send + Sync`,
/// since any thread may use a handle.
pub(crate) trait Handle: 'static {
    /// The value the handle stands for.
    type Rust: Send + Sync + 'static;
    /// Its name in error messages ("proc mesh").
    const KIND: &'static str;
}

/// A registered value and the C type of its handle.
struct Live {
    handle_type: TypeId,
    kind: &'static str,
    value: Arc<dyn Any + Send + Sync>,
}

impl Live {
    /// The value as the `Rust` of handle type `H`, if the handle is one.
    fn value<H: Handle>(&self) -> Option<Arc<H::Rust>> {
        if self.handle_type != TypeId::of::<H>() {
            return None;
        }
        self.value.clone().downcast::<H::Rust>().ok()
    }
}

struct Slot {
    generation: u32,
    live: Option<Live>,
}

struct Registry {
    slots: Vec<Slot>,
    free: Vec<u32>,
}

static REGISTRY: Mutex<Registry> = const_mutex(Registry {
    slots: Vec::new(),
    free: Vec::new(),
});

fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.lock()
}

/// Register `value`; the returned pointer is what C sees as the handle.
pub(crate) fn insert<H: Handle>(value: H::Rust) -> *mut H {
    insert_arc::<H>(Arc::new(value))
}

/// Register a value that is already shared.
pub(crate) fn insert_arc<H: Handle>(value: Arc<H::Rust>) -> *mut H {
    let mut r = registry();
    let index = match r.free.pop() {
        Some(i) => i,
        None => {
            r.slots.push(Slot {
                generation: 0,
                live: None,
            });
            (r.slots.len() - 1) as u32
        }
    };
    let slot = &mut r.slots[index as usize];
    slot.generation = slot.generation.wrapping_add(1).max(1);
    slot.live = Some(Live {
        handle_type: TypeId::of::<H>(),
        kind: H::KIND,
        value,
    });
    encode(index, slot.generation) as *mut H
}

fn encode(index: u32, generation: u32) -> usize {
    // Index + 1 keeps the value non-null; the generation rides in the high bits.
    (((generation as u64) << 32) | (index as u64 + 1)) as usize
}

fn decode(h: usize) -> Option<(u32, u32)> {
    let v = h as u64;
    let low = (v & 0xffff_ffff) as u32;
    if low == 0 {
        return None;
    }
    Some((low - 1, (v >> 32) as u32))
}

fn stale(h: usize, want: &str) -> Fail {
    if h == 0 {
        Fail::new(MONARCH_ERR_INVALID_HANDLE, format!("{want} handle is NULL"))
    } else {
        Fail::new(
            MONARCH_ERR_INVALID_HANDLE,
            format!("{want} handle {h:#x} is stale, freed or was never valid"),
        )
    }
}

fn wrong_kind(h: usize, want: &str, got: &str) -> Fail {
    Fail::new(
        MONARCH_ERR_INVALID_HANDLE,
        format!("handle {h:#x} is a {got}, not a {want}"),
    )
}

/// Look handle `h` up, checking it is live and of kind `H`; returns its
/// value, shared.
pub(crate) fn get<H: Handle>(h: *const H) -> Result<Arc<H::Rust>, Fail> {
    let h = h as usize;
    let (index, generation) = decode(h).ok_or_else(|| stale(h, H::KIND))?;
    let r = registry();
    let live = r
        .slots
        .get(index as usize)
        .filter(|s| s.generation == generation)
        .and_then(|s| s.live.as_ref())
        .ok_or_else(|| stale(h, H::KIND))?;
    live.value::<H>()
        .ok_or_else(|| wrong_kind(h, H::KIND, live.kind))
}

/// Unregister handle `h` and return its value; `Ok(None)` for NULL (so
/// every `*_free(NULL)` is a no-op). A stale handle, or one of another
/// kind, is an error and is left as it was.
pub(crate) fn remove<H: Handle>(h: *mut H) -> Result<Option<Arc<H::Rust>>, Fail> {
    let h = h as usize;
    if h == 0 {
        return Ok(None);
    }
    let (index, generation) = decode(h).ok_or_else(|| stale(h, H::KIND))?;
    let mut r = registry();
    let slot = r
        .slots
        .get_mut(index as usize)
        .filter(|s| s.generation == generation)
        .ok_or_else(|| stale(h, H::KIND))?;
    let live = slot.live.as_ref().ok_or_else(|| stale(h, H::KIND))?;
    let value = live
        .value::<H>()
        .ok_or_else(|| wrong_kind(h, H::KIND, live.kind))?;
    slot.live = None;
    r.free.push(index);
    Ok(Some(value))
}

/// Unregister handle `h` and drop its value (the body of most `*_free`).
pub(crate) fn free<H: Handle>(h: *mut H) -> Result<(), Fail> {
    remove(h).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::MONARCH_ERR_INVALID_HANDLE;

    struct Apple;
    impl Handle for Apple {
        type Rust = String;
        const KIND: &'static str = "apple";
    }
    struct Pear;
    impl Handle for Pear {
        type Rust = String;
        const KIND: &'static str = "pear";
    }

    fn message<T>(r: Result<T, Fail>) -> String {
        match r {
            Ok(_) => panic!("expected an error"),
            Err(f) => {
                assert_eq!(f.status, MONARCH_ERR_INVALID_HANDLE);
                f.message
            }
        }
    }

    #[test]
    fn a_live_handle_gives_its_value_until_freed() {
        let h = insert::<Apple>("red".to_string());
        assert_eq!(*get(h).unwrap(), "red");
        assert_eq!(*remove(h).unwrap().unwrap(), "red");
        assert!(message(get(h)).contains("stale"));
        assert!(message(remove(h)).contains("stale"));
    }

    #[test]
    fn a_reused_slot_does_not_revive_a_stale_handle() {
        let old = insert::<Apple>("old".to_string());
        free(old).unwrap();
        let new = insert::<Apple>("new".to_string());
        assert!(message(get(old)).contains("apple handle"));
        assert_eq!(*get(new).unwrap(), "new");
        free(new).unwrap();
    }

    #[test]
    fn the_wrong_kind_is_refused_and_not_freed() {
        // Same Rust type, different C type: the kind decides.
        let h = insert::<Apple>("green".to_string());
        let as_pear = h as *mut Pear;
        assert_eq!(
            message(get(as_pear)),
            format!("handle {:#x} is a apple, not a pear", h as usize)
        );
        assert!(message(remove(as_pear)).contains("not a pear"));
        assert_eq!(*get(h).unwrap(), "green");
        free(h).unwrap();
    }

    #[test]
    fn null_is_an_error_to_use_and_a_no_op_to_free() {
        assert_eq!(
            message(get::<Apple>(std::ptr::null())),
            "apple handle is NULL"
        );
        assert!(remove::<Apple>(std::ptr::null_mut()).unwrap().is_none());
        assert!(free::<Apple>(std::ptr::null_mut()).is_ok());
    }
}
