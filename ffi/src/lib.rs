//! libmonarch's C ABI. Every `extern "C"` function of the project lives in
//! this crate; `include/monarch.h` is generated from it by cbindgen.
//!
//! One module per C type, holding its opaque struct, its documentation
//! (who creates it, who frees it, which threads may use it) and its
//! functions; a function that creates an object lives with the type it
//! creates. The type modules share four helpers and nothing else: `status`
//! (codes, last error, the panic guard), `args` (reading C arguments),
//! `bytes` (byte ranges in, owned buffers out) and `handles` (the checked
//! handle table and the `Handle` trait tying each C type to its Rust
//! value), plus `view` for the mesh types.
//!
//! Rules every function follows: it returns a `monarch_status` and writes
//! results through out-pointers; it checks every handle and pointer; it
//! runs under `status::guard`, so no panic crosses the boundary; it never
//! calls back into foreign code (completions and incoming messages are
//! pulled); every `*_free` accepts NULL.
#![allow(non_camel_case_types)]
#![allow(clippy::missing_safety_doc)]

mod args;
mod bytes;
mod handles;
mod status;
mod view;

mod introspect;
mod runtime;

mod future;
mod value_mesh;

mod proc_mesh;

mod actor_mesh;
mod event;
mod port;

mod host_mesh;
mod progress;
mod rdma;
mod slurm;
mod tensor;

pub use actor_mesh::*;
pub use bytes::*;
pub use event::*;
pub use future::*;
pub use host_mesh::*;
pub use port::*;
pub use proc_mesh::*;
pub use progress::*;
pub use rdma::*;
pub use runtime::*;
pub use slurm::*;
pub use status::*;
pub use tensor::*;
pub use value_mesh::*;
pub use view::{MONARCH_SLICE_END, MONARCH_SPLIT_INFER};

/// The ABI version this library implements. Bumped on any incompatible
/// change; a binding should refuse a library whose version it doesn't know.
pub const MONARCH_ABI_VERSION: u32 = 1;

/// The library's release version, major part: the SONAME is
/// `libmonarch.so.<major>`. The three parts are the workspace version of
/// Cargo.toml (checked by `ffi/tests/version.rs`).
pub const MONARCH_VERSION_MAJOR: u32 = 0;
/// Minor part: while the major is 0, a minor bump may break the API.
pub const MONARCH_VERSION_MINOR: u32 = 1;
/// Patch part.
pub const MONARCH_VERSION_PATCH: u32 = 0;

/// Returns `MONARCH_ABI_VERSION` of the loaded library.
#[no_mangle]
pub extern "C" fn monarch_abi_version() -> u32 {
    MONARCH_ABI_VERSION
}
