//! How bulk copies share the CPU with control traffic: a copy is cut into
//! pieces with a yield between them, and the thread moving bulk bytes runs
//! at a lower priority meanwhile.

use std::sync::OnceLock;

/// The copier threads' nice value (`MONARCH_RDMA_NICE`, default 10;
/// 20 means `SCHED_IDLE`; 0 leaves the priority alone).
fn copier_nice() -> i32 {
    static N: OnceLock<i32> = OnceLock::new();
    *N.get_or_init(|| {
        std::env::var("MONARCH_RDMA_NICE")
            .ok()
            .and_then(|v| v.parse::<i32>().ok())
            .unwrap_or(10)
            .clamp(0, 20)
    })
}

/// Run the calling thread (a data-plane copier) at a lower CPU priority,
/// so that on a machine with few cores a bulk transfer yields the CPU to
/// the threads moving control messages. `MONARCH_RDMA_NICE`: 1..19 is the
/// thread's nice value (default 10: about a tenth of a core's share when
/// every core is contended, all of an idle core), 20 is `SCHED_IDLE` (runs
/// only on otherwise idle CPUs; starves on a busy machine), 0 leaves the
/// priority alone.
fn lower_priority() {
    let nice = copier_nice();
    // SAFETY: changing our own thread's policy (pid 0 = this thread) or
    // nice value (Linux: per thread id).
    unsafe {
        if nice == 20 {
            let p = libc::sched_param { sched_priority: 0 };
            libc::sched_setscheduler(0, libc::SCHED_IDLE, &p);
        } else if nice > 0 {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            libc::setpriority(libc::PRIO_PROCESS, tid, nice);
        }
    }
}

/// While alive, the calling thread copies bulk bytes at the copier
/// priority ([`lower_priority`]); dropping it restores the thread's
/// policy and nice value. Transfers of one piece or less keep the normal
/// priority (they are over before it would matter), and so do the
/// requests around a copy (leases, acknowledgements), which are control
/// traffic of the data plane.
pub(crate) struct Copier {
    restore: Option<(libc::c_int, libc::c_int)>,
}

impl Copier {
    /// Lower the calling thread's priority for a copy of `len` bytes (when
    /// it is more than one piece) until the returned value is dropped.
    pub(crate) fn new(len: usize) -> Copier {
        if len <= bulk_chunk() || copier_nice() == 0 {
            return Copier { restore: None };
        }
        // SAFETY: querying our own thread's policy and nice value.
        let (policy, nice) = unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            (
                libc::sched_getscheduler(0),
                libc::getpriority(libc::PRIO_PROCESS, tid),
            )
        };
        lower_priority();
        Copier {
            restore: Some((policy.max(0), nice)),
        }
    }
}

impl Drop for Copier {
    fn drop(&mut self) {
        let Some((policy, nice)) = self.restore else {
            return;
        };
        let p = libc::sched_param { sched_priority: 0 };
        // SAFETY: restoring our own thread's policy and nice value.
        unsafe {
            libc::sched_setscheduler(0, policy, &p);
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            libc::setpriority(libc::PRIO_PROCESS, tid, nice);
        }
    }
}

/// Bulk copies are cut into pieces of this many bytes, with a
/// `sched_yield` between pieces (`MONARCH_RDMA_CHUNK`, default 4 MiB,
/// at least 64 KiB). A kernel without preemption (this VM's) runs a
/// `process_vm_readv` or socket copy to its end before a woken thread can
/// have that CPU; the piece bounds how long a control message's thread
/// waits behind a copier (4 MiB: about 0.5 ms), and the yield hands the
/// CPU to such a thread at once instead of at the copier's next tick.
pub(crate) fn bulk_chunk() -> usize {
    static C: OnceLock<usize> = OnceLock::new();
    *C.get_or_init(|| {
        std::env::var("MONARCH_RDMA_CHUNK")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(4 << 20)
            .max(64 << 10)
    })
}

/// Between two pieces of a bulk copy: let any runnable thread (a control
/// message's) have this CPU first. Cheap when none is waiting.
pub(crate) fn between_chunks() {
    std::thread::yield_now();
}
