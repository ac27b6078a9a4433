//! Queue pairs, memory regions, and the verbs transfer protocol on top of
//! the owner's data-plane connection (see the parent module).
//!
//! Requests (the data plane's 40-byte `Request`, see `conn.rs`):
//! - `OP_IB_CONNECT`, followed by the reader's [`QpInfo`]: the owner
//!   creates an RC QP for this connection, brings it to RTS against the
//!   reader's, and answers ok + its own [`QpInfo`]. The QP lives as long
//!   as the connection.
//! - `OP_IB_LEASE_READ` / `OP_IB_LEASE_WRITE` (id, key, offset, len): the
//!   owner validates and leases the range like `OP_LEASE_*`, registers the
//!   region with the device if it was not yet, and answers ok +
//!   [`RemoteRegion`] (address of the range's start and rkey). The reader
//!   then posts RDMA READ/WRITE and ends with `OP_RELEASE`, whose answer
//!   tells it the owner lived through the transfer.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::io::{Read, Write};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use monarch_core::{Error, ErrorKind, Result};
use parking_lot::Mutex;

use super::sys;
use super::{device, Device};
use crate::conn::{self, Request, Stream};
use crate::descriptor::Descriptor;
use crate::random;

/// One work request moves at most this many bytes.
const CHUNK: usize = 8 << 20;
/// Work requests in flight per transfer (the send queue's depth).
const WINDOW: usize = 16;
/// Completion queue depth (>= WINDOW).
const CQ_DEPTH: c_int = 64;

/// What one side of a connection tells the other about its queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInfo {
    pub qpn: u32,
    /// First packet sequence number (24 bits).
    pub psn: u32,
    pub lid: u16,
    /// `enum ibv_mtu` of the port (1 = 256 B ... 5 = 4096 B).
    pub mtu: u8,
    pub gid: [u8; 16],
}

const QPINFO_MAGIC: &[u8; 4] = b"MQP1";
/// Encoded size of a [`QpInfo`].
pub const QPINFO_LEN: usize = 4 + 4 + 4 + 2 + 1 + 16;

impl QpInfo {
    pub fn encode(&self) -> [u8; QPINFO_LEN] {
        let mut b = [0u8; QPINFO_LEN];
        b[0..4].copy_from_slice(QPINFO_MAGIC);
        b[4..8].copy_from_slice(&self.qpn.to_le_bytes());
        b[8..12].copy_from_slice(&self.psn.to_le_bytes());
        b[12..14].copy_from_slice(&self.lid.to_le_bytes());
        b[14] = self.mtu;
        b[15..31].copy_from_slice(&self.gid);
        b
    }

    pub fn decode(b: &[u8]) -> Result<QpInfo> {
        if b.len() != QPINFO_LEN || &b[0..4] != QPINFO_MAGIC {
            return Err(Error::invalid("malformed ibverbs queue-pair information"));
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[15..31]);
        let info = QpInfo {
            qpn: u32_at(4),
            psn: u32_at(8),
            lid: u16::from_le_bytes([b[12], b[13]]),
            mtu: b[14],
            gid,
        };
        if info.psn > 0xff_ffff || !(1..=5).contains(&info.mtu) {
            return Err(Error::invalid(
                "malformed ibverbs queue-pair information (psn or mtu out of range)",
            ));
        }
        Ok(info)
    }
}

/// Where a leased range lives in the owner: its address and the rkey of
/// the owner's registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteRegion {
    pub addr: u64,
    pub rkey: u32,
}

/// Encoded size of a [`RemoteRegion`].
pub const REGION_LEN: usize = 12;

impl RemoteRegion {
    pub fn encode(&self) -> [u8; REGION_LEN] {
        let mut b = [0u8; REGION_LEN];
        b[0..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_le_bytes());
        b
    }
    pub fn decode(b: &[u8; REGION_LEN]) -> RemoteRegion {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[0..8]);
        RemoteRegion {
            addr: u64::from_le_bytes(a),
            rkey: u32::from_le_bytes([b[8], b[9], b[10], b[11]]),
        }
    }
}

fn verbs_err(what: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Io, format!("ibverbs: {what}"))
}

/// A registered memory region; deregistered when dropped.
pub struct Mr {
    dev: &'static Device,
    mr: *mut sys::ibv_mr,
}

// SAFETY: an ibv_mr may be used and deregistered from any thread.
unsafe impl Send for Mr {}
// SAFETY: as above; only its keys are read through `&Mr`.
unsafe impl Sync for Mr {}

impl Mr {
    /// Register `len` bytes at `ptr` with `access` (IBV_ACCESS_* bits).
    pub fn register(ptr: usize, len: usize, access: c_int) -> Result<Mr> {
        let dev = device().ok_or_else(|| verbs_err("no usable RDMA device"))?;
        let lib = &dev.lib;
        // SAFETY: the caller keeps [ptr, ptr+len) mapped while the Mr
        // lives; the library pins it.
        let mr = unsafe {
            match (lib.reg_mr, lib.reg_mr_iova2) {
                (Some(f), _) => f(dev.pd, ptr as *mut c_void, len, access),
                (None, Some(f)) => f(dev.pd, ptr as *mut c_void, len, ptr as u64, access as u32),
                (None, None) => std::ptr::null_mut(),
            }
        };
        if mr.is_null() {
            return Err(verbs_err(format!(
                "ibv_reg_mr of {len} bytes failed: {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(Mr { dev, mr })
    }
    pub fn lkey(&self) -> u32 {
        // SAFETY: a live registration.
        unsafe { (*self.mr).lkey }
    }
    pub fn rkey(&self) -> u32 {
        // SAFETY: a live registration.
        unsafe { (*self.mr).rkey }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: registered by this library, deregistered once.
        unsafe { (self.dev.lib.dereg_mr)(self.mr) };
    }
}

/// An RC queue pair with its own completion queue.
pub struct Qp {
    dev: &'static Device,
    qp: *mut sys::ibv_qp,
    cq: *mut sys::ibv_cq,
    psn: u32,
}

// SAFETY: a QP is used by one thread at a time (it moves between the
// connection pool and the transfer using it); verbs allow any thread.
unsafe impl Send for Qp {}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: created by this library, destroyed once, QP before CQ.
        unsafe {
            (self.dev.lib.destroy_qp)(self.qp);
            (self.dev.lib.destroy_cq)(self.cq);
        }
    }
}

/// A random first packet sequence number (24 bits) from `source`.
fn random_psn(source: random::Source) -> Result<u32> {
    let b = random::bytes(source, "an ibverbs packet sequence number")?;
    Ok(u32::from_ne_bytes(b) & 0xff_ffff)
}

impl Qp {
    /// A new QP in the INIT state.
    pub fn new() -> Result<Qp> {
        let dev = device().ok_or_else(|| verbs_err("no usable RDMA device"))?;
        let psn = random_psn(random::OS)?;
        let lib = &dev.lib;
        // SAFETY: the context is open; no channel, vector 0.
        let cq = unsafe {
            (lib.create_cq)(
                dev.ctx,
                CQ_DEPTH,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        if cq.is_null() {
            return Err(verbs_err(format!(
                "ibv_create_cq failed: {}",
                std::io::Error::last_os_error()
            )));
        }
        let mut init = sys::ibv_qp_init_attr {
            qp_context: std::ptr::null_mut(),
            send_cq: cq,
            recv_cq: cq,
            srq: std::ptr::null_mut(),
            cap: sys::ibv_qp_cap {
                max_send_wr: WINDOW as u32,
                max_recv_wr: 1,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: sys::IBV_QPT_RC,
            sq_sig_all: 0,
        };
        // SAFETY: pd is live; `init` is a valid attribute struct.
        let qp = unsafe { (lib.create_qp)(dev.pd, &mut init) };
        if qp.is_null() {
            let e = std::io::Error::last_os_error();
            // SAFETY: the CQ made above.
            unsafe { (lib.destroy_cq)(cq) };
            return Err(verbs_err(format!("ibv_create_qp failed: {e}")));
        }
        let q = Qp { dev, qp, cq, psn };
        let mut a = sys::ibv_qp_attr {
            qp_state: sys::IBV_QPS_INIT,
            pkey_index: 0,
            port_num: dev.port,
            qp_access_flags: (sys::IBV_ACCESS_LOCAL_WRITE
                | sys::IBV_ACCESS_REMOTE_READ
                | sys::IBV_ACCESS_REMOTE_WRITE) as u32,
            ..Default::default()
        };
        q.modify(
            &mut a,
            sys::IBV_QP_STATE
                | sys::IBV_QP_PKEY_INDEX
                | sys::IBV_QP_PORT
                | sys::IBV_QP_ACCESS_FLAGS,
            "INIT",
        )?;
        Ok(q)
    }

    fn modify(&self, a: &mut sys::ibv_qp_attr, mask: c_int, state: &str) -> Result<()> {
        // SAFETY: a live QP and a valid attribute struct.
        let rc = unsafe { (self.dev.lib.modify_qp)(self.qp, a, mask) };
        if rc != 0 {
            return Err(verbs_err(format!(
                "moving the queue pair to {state} failed: {}",
                std::io::Error::from_raw_os_error(rc)
            )));
        }
        Ok(())
    }

    /// What the peer needs to connect to this QP.
    pub fn info(&self) -> QpInfo {
        QpInfo {
            // SAFETY: a live QP.
            qpn: unsafe { (*self.qp).qp_num },
            psn: self.psn,
            lid: self.dev.lid,
            mtu: self.dev.mtu.clamp(1, 5) as u8,
            gid: self.dev.gid.raw,
        }
    }

    /// INIT → RTR → RTS against the peer's QP.
    pub fn connect(&self, peer: &QpInfo) -> Result<()> {
        let dev = self.dev;
        let global = dev.link_layer == sys::IBV_LINK_LAYER_ETHERNET || peer.gid != [0u8; 16];
        let mut ah = sys::ibv_ah_attr {
            dlid: peer.lid,
            sl: 0,
            src_path_bits: 0,
            port_num: dev.port,
            is_global: global as u8,
            ..Default::default()
        };
        if global {
            ah.grh = sys::ibv_global_route {
                dgid: sys::ibv_gid { raw: peer.gid },
                flow_label: 0,
                sgid_index: dev.gid_index,
                hop_limit: 64,
                traffic_class: 0,
            };
        }
        let mut rtr = sys::ibv_qp_attr {
            qp_state: sys::IBV_QPS_RTR,
            path_mtu: dev.mtu.clamp(1, 5).min(peer.mtu as u32),
            dest_qp_num: peer.qpn,
            rq_psn: peer.psn,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ah_attr: ah,
            ..Default::default()
        };
        self.modify(
            &mut rtr,
            sys::IBV_QP_STATE
                | sys::IBV_QP_AV
                | sys::IBV_QP_PATH_MTU
                | sys::IBV_QP_DEST_QPN
                | sys::IBV_QP_RQ_PSN
                | sys::IBV_QP_MAX_DEST_RD_ATOMIC
                | sys::IBV_QP_MIN_RNR_TIMER,
            "RTR",
        )?;
        let mut rts = sys::ibv_qp_attr {
            qp_state: sys::IBV_QPS_RTS,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            sq_psn: self.psn,
            max_rd_atomic: 1,
            ..Default::default()
        };
        self.modify(
            &mut rts,
            sys::IBV_QP_STATE
                | sys::IBV_QP_TIMEOUT
                | sys::IBV_QP_RETRY_CNT
                | sys::IBV_QP_RNR_RETRY
                | sys::IBV_QP_SQ_PSN
                | sys::IBV_QP_MAX_QP_RD_ATOMIC,
            "RTS",
        )
    }

    /// RDMA READ (`write` false: remote → local) or WRITE of `len` bytes
    /// between `local` (registered as `lkey`) and `remote`, in chunks, and
    /// wait for every completion. An error leaves the QP unusable.
    pub fn rdma(
        &self,
        write: bool,
        local: usize,
        lkey: u32,
        remote: RemoteRegion,
        len: usize,
    ) -> Result<()> {
        let ops = {
            // SAFETY: the context is open; `ops` is filled by the provider.
            let ctx = unsafe { &*self.dev.ctx };
            (ctx.ops.post_send, ctx.ops.poll_cq)
        };
        let (Some(post_send), Some(poll_cq)) = ops else {
            return Err(verbs_err("the provider has no post_send/poll_cq"));
        };
        // The NIC copies; this thread only polls, at the copier priority.
        let _copier = crate::pacing::Copier::new(len);
        let mut posted = 0usize; // bytes posted
        let mut outstanding = 0usize;
        let mut next_id = 0u64;
        let mut wcs = [sys::ibv_wc::default(); WINDOW];
        let mut last_progress = Instant::now();
        let mut idle_turns = 0u32;
        while posted < len || outstanding > 0 {
            while posted < len && outstanding < WINDOW {
                let n = CHUNK.min(len - posted);
                let mut sge = sys::ibv_sge {
                    addr: (local + posted) as u64,
                    length: n as u32,
                    lkey,
                };
                let mut wr = sys::ibv_send_wr {
                    wr_id: next_id,
                    next: std::ptr::null_mut(),
                    sg_list: &mut sge,
                    num_sge: 1,
                    opcode: if write {
                        sys::IBV_WR_RDMA_WRITE
                    } else {
                        sys::IBV_WR_RDMA_READ
                    },
                    send_flags: sys::IBV_SEND_SIGNALED,
                    imm_data: 0,
                    wr: sys::ibv_send_wr_rdma {
                        remote_addr: remote.addr + posted as u64,
                        rkey: remote.rkey,
                        _rest: [0; 5],
                    },
                    qp_type: 0,
                    _pad: 0,
                    _bind_mw: [0; 6],
                };
                let mut bad: *mut sys::ibv_send_wr = std::ptr::null_mut();
                // SAFETY: a connected QP; `wr` and `sge` are valid for the
                // call (the provider copies them into its queue).
                let rc = unsafe { post_send(self.qp, &mut wr, &mut bad) };
                if rc != 0 {
                    return Err(verbs_err(format!(
                        "ibv_post_send failed: {}",
                        std::io::Error::from_raw_os_error(rc)
                    )));
                }
                next_id += 1;
                posted += n;
                outstanding += 1;
            }
            // SAFETY: a live CQ; `wcs` has room for WINDOW entries.
            let got = unsafe { poll_cq(self.cq, WINDOW as c_int, wcs.as_mut_ptr()) };
            if got < 0 {
                return Err(verbs_err(format!("ibv_poll_cq failed ({got})")));
            }
            for wc in &wcs[..got as usize] {
                if wc.status != sys::IBV_WC_SUCCESS {
                    return Err(verbs_err(format!(
                        "RDMA {} failed: work completion status {} (vendor error {})",
                        if write { "WRITE" } else { "READ" },
                        wc.status,
                        wc.vendor_err
                    )));
                }
                outstanding -= 1;
            }
            if got > 0 {
                last_progress = Instant::now();
                idle_turns = 0;
            } else {
                idle_turns += 1;
                if idle_turns < 64 {
                    std::hint::spin_loop();
                } else if idle_turns < 256 {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(Duration::from_micros(50));
                    if last_progress.elapsed() > conn::IO_TIMEOUT {
                        return Err(verbs_err(format!(
                            "no RDMA completion for {} s",
                            conn::IO_TIMEOUT.as_secs()
                        )));
                    }
                }
            }
        }
        Ok(())
    }
}

/// A data connection with its connected QP (reader side).
struct VConn {
    s: Stream,
    qp: Qp,
}

fn pool() -> &'static Mutex<HashMap<String, Vec<VConn>>> {
    static P: OnceLock<Mutex<HashMap<String, Vec<VConn>>>> = OnceLock::new();
    P.get_or_init(|| Mutex::new(HashMap::new()))
}

fn connect(target: &str, token: &str, owner: &str) -> Result<VConn> {
    if let Some(c) = pool().lock().get_mut(target).and_then(|v| v.pop()) {
        return Ok(c);
    }
    let qp = Qp::new()?;
    let mut s = conn::get(target, token, owner)?;
    let req = Request {
        op: conn::OP_IB_CONNECT,
        id: 0,
        key: 0,
        offset: 0,
        len: QPINFO_LEN as u64,
    };
    let mut msg = req.encode().to_vec();
    msg.extend_from_slice(&qp.info().encode());
    s.write_all(&msg)
        .map_err(|e| conn::lost(owner, "the ibverbs connection", e))?;
    match conn::recv_status(&mut s).map_err(|e| conn::lost(owner, "the ibverbs connection", e))? {
        Ok(()) => {}
        Err(m) => {
            conn::put(target, s);
            return Err(verbs_err(format!(
                "proc {owner} refused an ibverbs connection: {m}"
            )));
        }
    }
    let mut b = [0u8; QPINFO_LEN];
    s.read_exact(&mut b)
        .map_err(|e| conn::lost(owner, "the ibverbs connection", e))?;
    let peer = QpInfo::decode(&b)?;
    qp.connect(&peer)?;
    Ok(VConn { s, qp })
}

/// Reader side: copy `len` bytes between the buffer `d` (from `offset`)
/// and `local` with RDMA READ/WRITE. Errors of kind `Io` mean the verbs
/// path does not work for this pair (the caller falls back to TCP);
/// `InvalidArgument` is the owner's refusal; `ProcFailed` a dead owner.
pub(crate) fn transfer(
    d: &Descriptor,
    token: &str,
    target: &str,
    offset: u64,
    local: usize,
    len: usize,
    write: bool,
) -> Result<()> {
    let what = if write { "write" } else { "read" };
    let access = if write {
        0
    } else {
        sys::IBV_ACCESS_LOCAL_WRITE
    };
    let mr = Mr::register(local, len, access)?;
    let mut c = connect(target, token, &d.owner)?;
    let lease = Request {
        op: if write {
            conn::OP_IB_LEASE_WRITE
        } else {
            conn::OP_IB_LEASE_READ
        },
        id: d.id,
        key: d.key,
        offset,
        len: len as u64,
    };
    if let Err(e) = conn::request(&mut c.s, &lease, &d.owner, what) {
        if e.kind == ErrorKind::InvalidArgument {
            pool().lock().entry(target.to_string()).or_default().push(c);
        }
        return Err(e);
    }
    let mut rb = [0u8; REGION_LEN];
    c.s.read_exact(&mut rb)
        .map_err(|e| conn::lost(&d.owner, what, e))?;
    let remote = RemoteRegion::decode(&rb);
    let moved = c.qp.rdma(write, local, mr.lkey(), remote, len);
    drop(mr);
    let release = Request {
        op: conn::OP_RELEASE,
        ..lease
    };
    // The owner's acknowledgement proves it lived through the transfer.
    conn::request(&mut c.s, &release, &d.owner, what)?;
    moved?;
    let mut p = pool().lock();
    let v = p.entry(target.to_string()).or_default();
    if v.len() < 16 {
        v.push(c);
    }
    Ok(())
}

/// Owner side of `OP_IB_CONNECT`: read the reader's QP info, make and
/// connect a QP for this connection (kept in `qp`), answer with ours.
pub(crate) fn serve_connect(
    s: &mut Stream,
    req: &Request,
    qp: &mut Option<Qp>,
) -> std::io::Result<()> {
    if req.len as usize != QPINFO_LEN {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "bad ibverbs connect request",
        ));
    }
    let mut b = [0u8; QPINFO_LEN];
    s.read_exact(&mut b)?;
    *qp = None;
    let made = QpInfo::decode(&b).and_then(|peer| {
        let q = Qp::new()?;
        q.connect(&peer)?;
        Ok(q)
    });
    match made {
        Ok(q) => {
            let info = q.info().encode();
            *qp = Some(q);
            conn::send_status(s, &Ok(()))?;
            s.write_all(&info)
        }
        Err(e) => conn::send_status(s, &Err(e.message)),
    }
}

/// Owner side of `OP_IB_LEASE_*`: the registration's RDMA key for the
/// leased range (registering the region with the device on first use).
pub(crate) fn serve_lease(
    s: &mut Stream,
    region_ptr: usize,
    region_len: usize,
    mr: &OnceLock<std::result::Result<Mr, String>>,
    offset: u64,
) -> std::io::Result<bool> {
    let r = mr.get_or_init(|| {
        Mr::register(
            region_ptr,
            region_len,
            sys::IBV_ACCESS_LOCAL_WRITE
                | sys::IBV_ACCESS_REMOTE_READ
                | sys::IBV_ACCESS_REMOTE_WRITE,
        )
        .or_else(|_| {
            // Read-only memory cannot be registered for writing.
            Mr::register(region_ptr, region_len, sys::IBV_ACCESS_REMOTE_READ)
        })
        .map_err(|e| e.message)
    });
    match r {
        Ok(m) => {
            conn::send_status(s, &Ok(()))?;
            let rr = RemoteRegion {
                addr: (region_ptr as u64) + offset,
                rkey: m.rkey(),
            };
            s.write_all(&rr.encode())?;
            Ok(true)
        }
        Err(m) => {
            conn::send_status(s, &Err(m.clone()))?;
            Ok(false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qp_info_round_trip_and_rejects_garbage() {
        let i = QpInfo {
            qpn: 0x12_3456,
            psn: 0xab_cdef,
            lid: 0x1234,
            mtu: 5,
            gid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8],
        };
        let b = i.encode();
        assert_eq!(b.len(), QPINFO_LEN);
        assert_eq!(QpInfo::decode(&b).unwrap(), i);
        for n in 0..b.len() {
            assert!(QpInfo::decode(&b[..n]).is_err(), "prefix {n}");
        }
        let mut bad = b;
        bad[0] = b'X';
        assert!(QpInfo::decode(&bad).is_err());
        let mut bad = b;
        bad[14] = 9; // mtu
        assert!(QpInfo::decode(&bad).is_err());
        let mut bad = b;
        bad[11] = 1; // psn beyond 24 bits
        assert!(QpInfo::decode(&bad).is_err());
    }

    #[test]
    fn psn_is_24_random_bits_or_an_error() {
        assert!(random_psn(random::OS).unwrap() <= 0xff_ffff);
        let e = random_psn(random::tests::broken).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Io);
        assert!(
            e.message.contains("packet sequence number"),
            "{}",
            e.message
        );
    }

    #[test]
    fn remote_region_round_trip() {
        let r = RemoteRegion {
            addr: 0x7fff_1234_5678,
            rkey: 0xdead_beef,
        };
        assert_eq!(RemoteRegion::decode(&r.encode()), r);
    }
}
