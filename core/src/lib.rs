//! monarch-core: the language-neutral heart of libmonarch.
//!
//! Public (used by the C ABI, the `monarch` command, the data plane):
//!
//! - [`Runtime`] ([`runtime`]): this process's proc: connections, routing,
//!   hosted actors, reply ports, child procs; [`Future`] and [`Answer`]
//!   ([`future`]) are what its operations return and what events are
//!   answered with
//! - [`ProcMesh`], [`ActorMesh`], [`HostMesh`], [`PortRef`],
//!   [`PortReceiver`], [`ValueMesh`], [`SupervisionEvent`]: the meshes, ports,
//!   gathered replies and failure events the runtime hands out
//! - [`geometry`]: named, strided views over ranks (meshes and slices)
//! - [`wire`] and [`frame`]: the flatbuffers envelope and multipart frames
//! - [`completion`]: one-shot completions with a spin-then-park wait
//! - [`process`]: starting and reaping local proc processes
//! - [`transport`], [`auth`], [`tls`]: sockets and addresses, the
//!   password-authenticated key exchange on every connection, optional
//!   TLS on TCP links
//! - [`secret`]: job secrets (making strong ones, refusing weak ones)
//! - [`agent_protocol`]: what a controller and a host agent say
//! - [`allocator`]: obtaining host agents (SLURM)
//! - [`logs`]: proc output streamed back to the controller
//! - [`local`]: in-process procs (scale tests, benchmarks)
//! - [`random`]: random values from the kernel
//! - [`error`], [`value`]
//!
//! Private: the connection reader and writer (`conn`), the multicast tree
//! (`multicast`), meshes (`mesh`), ports (`port`), host meshes (`host`),
//! supervision events (`supervision`), raw socket calls (`socket`) and the
//! eventfd wrapper (`eventfd`).

#![deny(missing_docs)]

pub mod agent_protocol;
pub mod allocator;
pub mod auth;
pub mod background;
pub mod completion;
mod conn;
pub mod debug_protocol;
#[cfg(test)]
mod debug_tests;
pub mod error;
mod eventfd;
pub mod frame;
pub mod future;
pub mod geometry;
mod host;
pub mod introspect;
pub mod limits;
pub mod local;
pub mod logfiles;
pub mod logs;
mod mesh;
mod multicast;
#[cfg(feature = "otel")]
pub mod otel;
mod port;
pub mod process;
pub mod progress;
pub mod random;
pub mod runtime;
pub mod secret;
mod socket;
mod supervision;
pub mod tls;
pub mod trace;
pub mod transport;
#[cfg(test)]
mod trust_tests;
pub mod value;
pub mod wire;
pub mod zygote;

pub use error::{Error, ErrorKind, Result};
pub use future::{Answer, Future};
pub use geometry::Shape;
pub use host::HostMesh;
pub use mesh::{ActorMesh, CallMode, MeshView, ProcMesh};
pub use port::PortRef;
pub use runtime::{Event, EventKind, PortReceiver, Runtime};
pub use supervision::{FailureCause, SupervisionEvent};
pub use value::{PointValue, ValueMesh};
