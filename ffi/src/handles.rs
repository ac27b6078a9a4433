//! Checked handles: what C holds is an index plus a generation, never a
//! pointer to Rust memory, so a stale, freed or wrong-kind handle is
//! detected and reported instead of being dereferenced.

use monarch_core::sync::LockExt;
use std::ffi::CString;
use std::sync::{Arc, Mutex};

use monarch_core::{
    ActorMesh, Event, Future, HostMesh, PortReceiver, ProcMesh, Runtime, ValueMesh,
};
use monarch_rdma::Buffer;

use monarch_core::allocator::slurm::SlurmJob;

use crate::status::{Fail, MONARCH_ERR_INVALID_HANDLE};

/// A ValueMesh plus the NUL-terminated copies of its error messages that
/// C borrows.
pub struct HeldValueMesh {
    pub mesh: ValueMesh,
    pub errors: Vec<Option<CString>>,
}

/// An event plus NUL-terminated copies of its names that C borrows
/// (None for an empty name).
pub struct HeldEvent {
    pub event: Mutex<Event>,
    pub actor: Option<CString>,
    pub method: Option<CString>,
    pub type_name: Option<CString>,
}

#[derive(Clone)]
pub enum Object {
    Runtime(Runtime),
    ProcMesh(ProcMesh),
    HostMesh(HostMesh),
    ActorMesh(ActorMesh),
    Future(Future),
    ValueMesh(Arc<HeldValueMesh>),
    Event(Arc<HeldEvent>),
    PortReceiver(Arc<PortReceiver>),
    RdmaBuffer(Arc<Buffer>),
    SlurmJob(Arc<SlurmJob>),
}

impl Object {
    pub fn kind(&self) -> &'static str {
        match self {
            Object::Runtime(_) => "runtime",
            Object::ProcMesh(_) => "proc mesh",
            Object::HostMesh(_) => "host mesh",
            Object::ActorMesh(_) => "actor mesh",
            Object::Future(_) => "future",
            Object::ValueMesh(_) => "value mesh",
            Object::Event(_) => "event",
            Object::PortReceiver(_) => "port receiver",
            Object::RdmaBuffer(_) => "rdma buffer",
            Object::SlurmJob(_) => "slurm job",
        }
    }
}

struct Slot {
    generation: u32,
    object: Option<Object>,
}

struct Registry {
    slots: Vec<Slot>,
    free: Vec<u32>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    slots: Vec::new(),
    free: Vec::new(),
});

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    REGISTRY.locked()
}

/// Store `object`; the returned value is what C sees as the handle.
pub fn insert(object: Object) -> usize {
    let mut r = registry();
    let index = match r.free.pop() {
        Some(i) => i,
        None => {
            r.slots.push(Slot {
                generation: 0,
                object: None,
            });
            (r.slots.len() - 1) as u32
        }
    };
    let slot = &mut r.slots[index as usize];
    slot.generation = slot.generation.wrapping_add(1).max(1);
    slot.object = Some(object);
    encode(index, slot.generation)
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

/// Look a handle up, checking it is live; returns a clone of the object.
pub fn get(h: usize, want: &'static str) -> Result<Object, Fail> {
    let (index, generation) = decode(h).ok_or_else(|| stale(h, want))?;
    let r = registry();
    let slot = r.slots.get(index as usize).ok_or_else(|| stale(h, want))?;
    if slot.generation != generation {
        return Err(stale(h, want));
    }
    slot.object.clone().ok_or_else(|| stale(h, want))
}

/// Remove a handle, returning its object.
pub fn remove(h: usize, want: &'static str) -> Result<Object, Fail> {
    let (index, generation) = decode(h).ok_or_else(|| stale(h, want))?;
    let mut r = registry();
    let slot = r
        .slots
        .get_mut(index as usize)
        .ok_or_else(|| stale(h, want))?;
    if slot.generation != generation || slot.object.is_none() {
        return Err(stale(h, want));
    }
    let kind = slot.object.as_ref().map(|o| o.kind()).unwrap_or("");
    if kind != want {
        return Err(wrong_kind(h, want, kind));
    }
    let obj = slot.object.take();
    r.free.push(index);
    obj.ok_or_else(|| stale(h, want))
}

pub fn wrong_kind(h: usize, want: &str, got: &str) -> Fail {
    Fail::new(
        MONARCH_ERR_INVALID_HANDLE,
        format!("handle {h:#x} is a {got}, not a {want}"),
    )
}

/// Typed lookups: `typed!(h, Runtime)` yields the Runtime or a Fail.
#[macro_export]
macro_rules! typed {
    ($h:expr, $variant:ident, $want:literal) => {{
        let h = $h as usize;
        match $crate::handles::get(h, $want)? {
            $crate::handles::Object::$variant(x) => x,
            other => return Err($crate::handles::wrong_kind(h, $want, other.kind())),
        }
    }};
}
