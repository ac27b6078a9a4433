//! Allocators: ways to obtain host agents for a host mesh.
//!
//! - [`slurm`]: `srun` starts one agent per node of a SLURM allocation.
//! - [`kubernetes`]: agents run as a StatefulSet behind a headless Service;
//!   the mesh is built from the Service's DNS records.
pub mod kubernetes;
pub mod slurm;
