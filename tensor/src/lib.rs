//! monarch-tensor: the tensor plane of libmonarch. What Rust does with
//! tensor memory for the collectives (reduce, all-reduce, reduce-scatter,
//! all-gather) of every binding, on raw typed buffers: a binding hands over
//! a tensor's data pointer (`torch.Tensor.data_ptr()`,
//! `torch::Tensor::data_ptr()`), so nothing is copied on the way in or out
//! and no tensor library is linked.
//!
//! - [`dtype`]: element types and reduction ops, their C codes
//! - [`kernels`]: `out[i] = op(out[i], src[i])` per element type
//! - [`half`]: f16/bf16 to and from f32, bit by bit
//! - [`peer`]: reading a same-host peer process's memory straight
//!   (`process_vm_readv`), checked with a pidfd
//! - [`reduce`]: one member's chunk of a collective: every member's range
//!   combined in group order, a cache-sized block at a time
//!
//! monarch-core does not depend on this crate; monarch-ffi exports it as
//! `monarch_tensor_*`.

#![deny(missing_docs)]

pub mod dtype;
pub mod half;
pub mod kernels;
pub mod peer;
pub mod reduce;

pub use dtype::{DType, Op};
pub use kernels::{combine, finish};
pub use reduce::{read_member, reduce_chunk, reduce_chunk_push};
