//! Reading a same-host peer process's memory straight, for the reduce
//! loop: `process_vm_readv` a cache-sized block at a time, right before
//! the block is combined (the data plane would copy the whole range into
//! scratch memory first, then read it again); and writing a reduced block
//! into a peer's result (`process_vm_writev`) while it is in cache.
//!
//! Same host means the same kernel boot and pid namespace, so the pid in
//! a buffer's descriptor names the owner. The kernel checks ptrace
//! permission; owners grant it when they register a buffer (see
//! monarch-rdma's same-host backend). A refusal (EPERM/EACCES/ENOSYS) or
//! `MONARCH_RDMA_BACKEND=tcp`/`ibverbs` sends the peer to the data plane.
//!
//! A peer that dies while it is read: its pid could be taken by another
//! process, whose memory would then be read. A pidfd opened before the
//! reads tells whether the process read is the peer and still alive
//! afterwards ([`Peer::check`]); it is kept for the peer's life in this
//! process, so later collectives check against the same process.

use std::collections::{HashMap, HashSet};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use monarch_core::process::pidfd_open;
use monarch_core::{Error, ErrorKind, Result};
use monarch_rdma::Descriptor;
use parking_lot::Mutex;

/// A same-host peer process, read with `process_vm_readv`.
pub struct Peer {
    pid: u32,
    /// The peer's control-plane address (for messages).
    owner: String,
    fd: OwnedFd,
}

/// Why a read or write of a peer's memory failed.
#[derive(Debug)]
pub enum ReadError {
    /// The kernel does not let this process read the peer: use the data
    /// plane.
    Refused(io::Error),
    /// The peer process exited (what was read may be another's memory).
    Gone,
    /// Any other failure.
    Failed(io::Error),
}

impl Peer {
    /// Open process `pid` (its pidfd); `owner` names it in errors.
    pub fn open(pid: u32, owner: &str) -> io::Result<Peer> {
        Ok(Peer {
            pid,
            owner: owner.to_string(),
            fd: pidfd_open(pid)?,
        })
    }

    /// The peer's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether the process read (the same one, not a reuse of its pid) is
    /// still running: its pidfd turns readable when it exits.
    pub fn alive(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no wait.
        let r = unsafe { libc::poll(&mut p, 1, 0) };
        !(r > 0 && p.revents != 0)
    }

    /// The error for a peer found gone.
    pub fn gone_error(&self) -> Error {
        Error::new(
            ErrorKind::ProcFailed,
            format!(
                "peer process {} (proc {}) is gone: it exited while it was read",
                self.pid, self.owner
            ),
        )
    }

    /// An error when the peer exited (so what was read of it may be
    /// another process's memory).
    pub fn check(&self) -> Result<()> {
        if self.alive() {
            Ok(())
        } else {
            Err(self.gone_error())
        }
    }

    /// Copy `len` bytes at `addr` in the peer into `into` here.
    ///
    /// # Safety
    /// `into` must be valid for writes of `len` bytes.
    pub unsafe fn read(
        &self,
        addr: u64,
        into: *mut u8,
        len: usize,
    ) -> std::result::Result<(), ReadError> {
        self.outcome(monarch_rdma::read_now(self.pid, addr, into, len))
    }

    /// Copy `len` bytes at `from` here to `addr` in the peer.
    ///
    /// # Safety
    /// `from` must be valid for reads of `len` bytes.
    pub unsafe fn write(
        &self,
        addr: u64,
        from: *const u8,
        len: usize,
    ) -> std::result::Result<(), ReadError> {
        self.outcome(monarch_rdma::write_now(self.pid, addr, from, len))
    }

    /// What a copy to or from the peer came to.
    fn outcome(&self, r: io::Result<()>) -> std::result::Result<(), ReadError> {
        match r {
            Ok(()) => Ok(()),
            // Checked first: an exited peer's pid may be refused or reused.
            Err(_) if !self.alive() => Err(ReadError::Gone),
            Err(e) if monarch_rdma::is_unsupported(&e) => Err(ReadError::Refused(e)),
            Err(e) => Err(ReadError::Failed(e)),
        }
    }

    /// A copy's failure as an error (`doing`: "reading" or "writing").
    fn as_error(&self, r: std::result::Result<(), ReadError>, doing: &str) -> Result<()> {
        match r {
            Ok(()) => Ok(()),
            Err(ReadError::Gone) => Err(self.gone_error()),
            Err(ReadError::Refused(e)) | Err(ReadError::Failed(e)) => Err(Error::new(
                ErrorKind::Io,
                format!(
                    "{doing} peer process {} (proc {}): {e}",
                    self.pid, self.owner
                ),
            )),
        }
    }

    /// [`Peer::write`] with its failures as errors.
    ///
    /// # Safety
    /// As for [`Peer::write`].
    pub unsafe fn write_or_fail(&self, addr: u64, from: *const u8, len: usize) -> Result<()> {
        self.as_error(self.write(addr, from, len), "writing")
    }

    /// [`Peer::read`] with its failures as errors.
    ///
    /// # Safety
    /// As for [`Peer::read`].
    pub unsafe fn read_or_fail(&self, addr: u64, into: *mut u8, len: usize) -> Result<()> {
        self.as_error(self.read(addr, into, len), "reading")
    }
}

/// This host and pid namespace, as buffer descriptors name them.
fn host_identity() -> String {
    monarch_rdma::host_identity()
}

/// Whether this process reads same-host peers straight: not when
/// `MONARCH_RDMA_BACKEND` forces TCP or ibverbs (read per call).
pub fn enabled() -> bool {
    matches!(
        monarch_rdma::forced_backend(),
        Ok(None) | Ok(Some(monarch_rdma::Backend::SameHost))
    )
}

struct Peers {
    /// Open peers by (pid, owner address): a pid reused by another proc
    /// of the job is another entry.
    open: HashMap<(u32, String), Arc<Peer>>,
    /// Pids the kernel refused to let us read.
    refused: HashSet<u32>,
}

static PEERS: Mutex<Option<Peers>> = Mutex::new(None);

/// The peer owning the buffer `desc` describes, when it runs on this host
/// in another process and the kernel lets us read it (one byte at
/// `probe_addr` is tried the first time); else None (read it on the data
/// plane). A peer found gone is an error.
pub fn for_buffer(desc: &Descriptor, probe_addr: u64) -> Result<Option<Arc<Peer>>> {
    if !enabled() || desc.host != host_identity() || desc.pid == std::process::id() {
        return Ok(None);
    }
    let key = (desc.pid, desc.owner.clone());
    {
        let mut g = PEERS.lock();
        let peers = g.get_or_insert_with(|| Peers {
            open: HashMap::new(),
            refused: HashSet::new(),
        });
        if peers.refused.contains(&desc.pid) {
            return Ok(None);
        }
        if let Some(p) = peers.open.get(&key) {
            if p.alive() {
                return Ok(Some(p.clone()));
            }
            let p = peers.open.remove(&key).expect("just found");
            return Err(p.gone_error());
        }
    }
    let p = match Peer::open(desc.pid, &desc.owner) {
        Ok(p) => p,
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {
            return Err(Error::new(
                ErrorKind::ProcFailed,
                format!("peer process {} (proc {}) is gone", desc.pid, desc.owner),
            ))
        }
        // No pidfds (an old kernel): the data plane checks liveness itself.
        Err(_) => return Ok(None),
    };
    let mut one = 0u8;
    // SAFETY: one byte into a local.
    match unsafe { p.read(probe_addr, &mut one, 1) } {
        Ok(()) => {}
        Err(ReadError::Gone) => return Err(p.gone_error()),
        Err(ReadError::Refused(_)) => {
            let mut g = PEERS.lock();
            if let Some(peers) = g.as_mut() {
                peers.refused.insert(desc.pid);
            }
            return Ok(None);
        }
        Err(ReadError::Failed(_)) => return Ok(None),
    }
    let p = Arc::new(p);
    let mut g = PEERS.lock();
    if let Some(peers) = g.as_mut() {
        // Peers of earlier meshes that exited: their pidfds are closed.
        peers.open.retain(|_, q| q.alive());
        peers.open.insert(key, p.clone());
    }
    Ok(Some(p))
}
