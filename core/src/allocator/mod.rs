//! Allocators: ways to obtain host agents for a host mesh.
//!
//! - [`slurm`]: `srun` starts one agent per node of a SLURM allocation.
pub mod slurm;
