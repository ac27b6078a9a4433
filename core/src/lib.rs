//! monarch-core: the language-neutral heart of libmonarch.
//!
//! - [`geometry`]: named, strided views over ranks (meshes and slices)
//! - [`wire`] and [`frame`]: the flatbuffers envelope and multipart frames
//! - [`completion`]: one-shot futures and the notification descriptor
//! - [`process`]: starting and reaping local proc processes
//! - [`runtime`]: this process's proc: connections, routing, actors, ports
//!   (its `io` submodule: how threads wait and read the sockets)
//! - [`mesh`]: proc meshes and actor meshes
//! - [`local`]: in-process procs (scale tests, benchmarks)
//! - [`multicast`]: the tree a cast travels down
//! - [`port`]: port references, stream ports and their receivers
//! - [`value`]: gathered replies
//! - [`transport`]: Unix and TCP sockets, addresses
//! - [`auth`]: HMAC-SHA256 challenge-response on every connection
//! - [`tls`]: optional TLS 1.3 (rustls) on TCP links
//! - [`host`]: host meshes (procs started by host agents on other hosts)
//! - [`logs`]: proc output streamed back to the controller
//! - [`rdma`]: the data plane: registered buffers, one-sided read/write
//! - [`allocator`]: obtaining host agents (SLURM)
//! - [`supervision`]: failure events sent up the ownership tree

pub mod agent_protocol;
pub mod allocator;
pub mod auth;
pub mod completion;
mod conn;
pub mod error;
mod eventfd;
pub mod frame;
pub mod future;
pub mod geometry;
pub mod host;
pub mod local;
pub mod logs;
pub mod mesh;
pub mod multicast;
pub mod port;
pub mod process;
pub mod random;
pub mod rdma;
pub mod runtime;
mod socket;
pub mod supervision;
pub mod sync;
pub mod tls;
pub mod transport;
pub mod value;
pub mod wire;

pub use error::{Error, ErrorKind, Result};
pub use geometry::Shape;
pub use host::HostMesh;
pub use mesh::{ActorMesh, CallMode, MeshView, ProcMesh};
pub use port::PortRef;
pub use runtime::{Event, EventKind, Future, PortReceiver, Runtime};
pub use supervision::{FailureCause, SupervisionEvent};
pub use value::{PointValue, ValueMesh};
