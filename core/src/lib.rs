//! monarch-core: the language-neutral heart of libmonarch.
//!
//! - [`geometry`]: named, strided views over ranks (meshes and slices)
//! - [`wire`] and [`frame`]: the flatbuffers envelope and multipart frames
//! - [`completion`]: one-shot futures and the notification descriptor
//! - [`process`]: starting and reaping local proc processes
//! - [`runtime`]: this process's proc: connections, routing, actors, ports
//!   (its `io` submodule: how threads wait and read the sockets)
//! - [`mesh`]: proc meshes and actor meshes
//! - [`value`]: gathered replies

pub mod completion;
mod conn;
pub mod error;
pub mod frame;
pub mod geometry;
pub mod mesh;
pub mod process;
pub mod runtime;
pub mod value;
pub mod wire;

pub use error::{Error, ErrorKind, Result};
pub use geometry::Shape;
pub use mesh::{ActorMesh, CallMode, MeshView, ProcMesh};
pub use runtime::{Event, EventKind, Future, Runtime};
pub use value::{PointValue, ValueMesh};
