//! The part of libibverbs' C ABI the verbs backend uses, mirrored from
//! rdma-core's `libibverbs/verbs.h` (checked against rdma-core 44.0's
//! header on x86_64: the layout tests below assert the sizes and offsets
//! a C compiler gives for that header).
//!
//! Only what is used is spelled out; trailing members that are only ever
//! written by the library (pthread objects) are opaque byte arrays of the
//! right size, so the structs keep their full size and alignment.
//! `ibv_post_send` and `ibv_poll_cq` are `static inline` in verbs.h: they
//! call through `ibv_context::ops`, which is why that table is mirrored
//! member by member.

#![allow(non_camel_case_types, dead_code)]

use std::ffi::{c_int, c_uint, c_void};

/// `union ibv_gid` (16 bytes; 8-aligned because of its `__be64` view).
#[repr(C, align(8))]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct ibv_gid {
    pub raw: [u8; 16],
}

/// `pthread_mutex_t` on x86_64 glibc: 40 bytes, 8-aligned.
#[repr(C, align(8))]
pub struct pthread_mutex_t([u8; 40]);
/// `pthread_cond_t` on x86_64 glibc: 48 bytes, 8-aligned.
#[repr(C, align(8))]
pub struct pthread_cond_t([u8; 48]);

pub type PollCq = unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int;
pub type PostSend =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int;
pub type PostRecv = unsafe extern "C" fn(*mut ibv_qp, *mut c_void, *mut *mut c_void) -> c_int;

type Fp = Option<unsafe extern "C" fn()>;

/// `struct ibv_context_ops` (32 function pointers).
#[repr(C)]
pub struct ibv_context_ops {
    pub _compat_query_device: Fp,
    pub _compat_query_port: Fp,
    pub _compat_alloc_pd: Fp,
    pub _compat_dealloc_pd: Fp,
    pub _compat_reg_mr: Fp,
    pub _compat_rereg_mr: Fp,
    pub _compat_dereg_mr: Fp,
    pub alloc_mw: Fp,
    pub bind_mw: Fp,
    pub dealloc_mw: Fp,
    pub _compat_create_cq: Fp,
    pub poll_cq: Option<PollCq>,
    pub req_notify_cq: Fp,
    pub _compat_cq_event: Fp,
    pub _compat_resize_cq: Fp,
    pub _compat_destroy_cq: Fp,
    pub _compat_create_srq: Fp,
    pub _compat_modify_srq: Fp,
    pub _compat_query_srq: Fp,
    pub _compat_destroy_srq: Fp,
    pub post_srq_recv: Fp,
    pub _compat_create_qp: Fp,
    pub _compat_query_qp: Fp,
    pub _compat_modify_qp: Fp,
    pub _compat_destroy_qp: Fp,
    pub post_send: Option<PostSend>,
    pub post_recv: Option<PostRecv>,
    pub _compat_create_ah: Fp,
    pub _compat_destroy_ah: Fp,
    pub _compat_attach_mcast: Fp,
    pub _compat_detach_mcast: Fp,
    pub _compat_async_event: Fp,
}

/// `struct ibv_context`.
#[repr(C)]
pub struct ibv_context {
    pub device: *mut c_void,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: pthread_mutex_t,
    pub abi_compat: *mut c_void,
}

/// `struct ibv_pd`.
#[repr(C)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

/// `struct ibv_mr`.
#[repr(C)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ibv_cq`.
#[repr(C)]
pub struct ibv_cq {
    pub context: *mut ibv_context,
    pub channel: *mut c_void,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

/// `struct ibv_qp`.
#[repr(C)]
pub struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub handle: u32,
    pub qp_num: u32,
    pub state: c_uint,
    pub qp_type: c_uint,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
}

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `wr.rdma` of `struct ibv_send_wr` (the 32-byte `wr` union is sized by
/// its `atomic` member; `rdma` is its first 12 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_send_wr_rdma {
    pub remote_addr: u64,
    pub rkey: u32,
    pub _rest: [u32; 5],
}

/// `struct ibv_send_wr`.
#[repr(C)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: c_uint,
    pub send_flags: c_uint,
    /// `imm_data` / `invalidate_rkey`.
    pub imm_data: u32,
    pub wr: ibv_send_wr_rdma,
    /// `qp_type.xrc.remote_srqn`.
    pub qp_type: u32,
    pub _pad: u32,
    /// `bind_mw` / `tso` union (48 bytes).
    pub _bind_mw: [u64; 6],
}

/// `struct ibv_wc`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_wc {
    pub wr_id: u64,
    pub status: c_uint,
    pub opcode: c_uint,
    pub vendor_err: u32,
    pub byte_len: u32,
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub cap: ibv_qp_cap,
    pub qp_type: c_uint,
    pub sq_sig_all: c_int,
}

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_global_route {
    pub dgid: ibv_gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// `struct ibv_qp_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_qp_attr {
    pub qp_state: c_uint,
    pub cur_qp_state: c_uint,
    pub path_mtu: c_uint,
    pub path_mig_state: c_uint,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: c_uint,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

/// `struct ibv_port_attr` (the exported `ibv_query_port` fills its
/// `_compat_ibv_port_attr` prefix, which ends with `flags`).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_port_attr {
    pub state: c_uint,
    pub max_mtu: c_uint,
    pub active_mtu: c_uint,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

// enum ibv_port_state
pub const IBV_PORT_ACTIVE: c_uint = 4;
// enum ibv_mtu: 1 = 256 ... 5 = 4096
pub const IBV_MTU_1024: c_uint = 3;
// link layer
pub const IBV_LINK_LAYER_INFINIBAND: u8 = 1;
pub const IBV_LINK_LAYER_ETHERNET: u8 = 2;
// enum ibv_access_flags
pub const IBV_ACCESS_LOCAL_WRITE: c_int = 1;
pub const IBV_ACCESS_REMOTE_WRITE: c_int = 1 << 1;
pub const IBV_ACCESS_REMOTE_READ: c_int = 1 << 2;
// enum ibv_qp_type
pub const IBV_QPT_RC: c_uint = 2;
// enum ibv_qp_state
pub const IBV_QPS_RESET: c_uint = 0;
pub const IBV_QPS_INIT: c_uint = 1;
pub const IBV_QPS_RTR: c_uint = 2;
pub const IBV_QPS_RTS: c_uint = 3;
// enum ibv_qp_attr_mask
pub const IBV_QP_STATE: c_int = 1;
pub const IBV_QP_ACCESS_FLAGS: c_int = 1 << 3;
pub const IBV_QP_PKEY_INDEX: c_int = 1 << 4;
pub const IBV_QP_PORT: c_int = 1 << 5;
pub const IBV_QP_AV: c_int = 1 << 7;
pub const IBV_QP_PATH_MTU: c_int = 1 << 8;
pub const IBV_QP_TIMEOUT: c_int = 1 << 9;
pub const IBV_QP_RETRY_CNT: c_int = 1 << 10;
pub const IBV_QP_RNR_RETRY: c_int = 1 << 11;
pub const IBV_QP_RQ_PSN: c_int = 1 << 12;
pub const IBV_QP_MAX_QP_RD_ATOMIC: c_int = 1 << 13;
pub const IBV_QP_MIN_RNR_TIMER: c_int = 1 << 15;
pub const IBV_QP_SQ_PSN: c_int = 1 << 16;
pub const IBV_QP_MAX_DEST_RD_ATOMIC: c_int = 1 << 17;
pub const IBV_QP_DEST_QPN: c_int = 1 << 20;
// enum ibv_wr_opcode
pub const IBV_WR_RDMA_WRITE: c_uint = 0;
pub const IBV_WR_RDMA_READ: c_uint = 4;
// enum ibv_send_flags
pub const IBV_SEND_SIGNALED: c_uint = 1 << 1;
// enum ibv_wc_status
pub const IBV_WC_SUCCESS: c_uint = 0;

// Exported functions (resolved with dlsym).
pub type GetDeviceList = unsafe extern "C" fn(*mut c_int) -> *mut *mut c_void;
pub type FreeDeviceList = unsafe extern "C" fn(*mut *mut c_void);
pub type GetDeviceName = unsafe extern "C" fn(*mut c_void) -> *const std::ffi::c_char;
pub type OpenDevice = unsafe extern "C" fn(*mut c_void) -> *mut ibv_context;
pub type CloseDevice = unsafe extern "C" fn(*mut ibv_context) -> c_int;
pub type AllocPd = unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_pd;
pub type DeallocPd = unsafe extern "C" fn(*mut ibv_pd) -> c_int;
pub type RegMr = unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, c_int) -> *mut ibv_mr;
pub type RegMrIova2 =
    unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, u64, c_uint) -> *mut ibv_mr;
pub type DeregMr = unsafe extern "C" fn(*mut ibv_mr) -> c_int;
pub type CreateCq =
    unsafe extern "C" fn(*mut ibv_context, c_int, *mut c_void, *mut c_void, c_int) -> *mut ibv_cq;
pub type DestroyCq = unsafe extern "C" fn(*mut ibv_cq) -> c_int;
pub type CreateQp = unsafe extern "C" fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp;
pub type ModifyQp = unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int;
pub type DestroyQp = unsafe extern "C" fn(*mut ibv_qp) -> c_int;
pub type QueryPort = unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr) -> c_int;
pub type QueryGid = unsafe extern "C" fn(*mut ibv_context, u8, c_int, *mut ibv_gid) -> c_int;

#[cfg(all(test, target_arch = "x86_64", target_os = "linux"))]
mod layout {
    //! Sizes and offsets printed by a C program compiled against rdma-core
    //! 44.0's `infiniband/verbs.h` on x86_64 (Debian bookworm).
    use super::*;
    use std::mem::{align_of, offset_of, size_of};

    #[test]
    fn sizes_match_verbs_h() {
        assert_eq!(size_of::<ibv_gid>(), 16);
        assert_eq!(size_of::<ibv_context_ops>(), 256);
        assert_eq!(size_of::<ibv_context>(), 328);
        assert_eq!(size_of::<ibv_qp>(), 160);
        assert_eq!(size_of::<ibv_cq>(), 128);
        assert_eq!(size_of::<ibv_send_wr>(), 128);
        assert_eq!(size_of::<ibv_sge>(), 16);
        assert_eq!(size_of::<ibv_wc>(), 48);
        assert_eq!(size_of::<ibv_qp_cap>(), 20);
        assert_eq!(size_of::<ibv_qp_init_attr>(), 64);
        assert_eq!(size_of::<ibv_global_route>(), 24);
        assert_eq!(size_of::<ibv_ah_attr>(), 32);
        assert_eq!(size_of::<ibv_qp_attr>(), 144);
        assert_eq!(size_of::<ibv_port_attr>(), 52);
        assert_eq!(size_of::<ibv_mr>(), 48);
        assert_eq!(size_of::<ibv_pd>(), 16);
        assert_eq!(align_of::<ibv_global_route>(), 8);
        assert_eq!(align_of::<ibv_port_attr>(), 4);
        assert_eq!(align_of::<ibv_qp_cap>(), 4);
    }

    #[test]
    fn offsets_match_verbs_h() {
        assert_eq!(offset_of!(ibv_context, ops), 8);
        assert_eq!(offset_of!(ibv_context, cmd_fd), 264);
        assert_eq!(offset_of!(ibv_context, mutex), 280);
        assert_eq!(offset_of!(ibv_context, abi_compat), 320);
        assert_eq!(offset_of!(ibv_context_ops, poll_cq), 88);
        assert_eq!(offset_of!(ibv_context_ops, post_send), 200);
        assert_eq!(offset_of!(ibv_context_ops, post_recv), 208);
        assert_eq!(offset_of!(ibv_context_ops, _compat_async_event), 248);
        assert_eq!(offset_of!(ibv_qp, qp_num), 52);
        assert_eq!(offset_of!(ibv_qp, state), 56);
        assert_eq!(offset_of!(ibv_qp, mutex), 64);
        assert_eq!(offset_of!(ibv_qp, cond), 104);
        assert_eq!(offset_of!(ibv_qp, events_completed), 152);
        assert_eq!(offset_of!(ibv_cq, cqe), 28);
        assert_eq!(offset_of!(ibv_cq, mutex), 32);
        assert_eq!(offset_of!(ibv_cq, cond), 72);
        assert_eq!(offset_of!(ibv_cq, async_events_completed), 124);
        assert_eq!(offset_of!(ibv_send_wr, num_sge), 24);
        assert_eq!(offset_of!(ibv_send_wr, opcode), 28);
        assert_eq!(offset_of!(ibv_send_wr, send_flags), 32);
        assert_eq!(offset_of!(ibv_send_wr, imm_data), 36);
        assert_eq!(offset_of!(ibv_send_wr, wr), 40);
        assert_eq!(
            offset_of!(ibv_send_wr, wr) + offset_of!(ibv_send_wr_rdma, rkey),
            48
        );
        assert_eq!(offset_of!(ibv_send_wr, qp_type), 72);
        assert_eq!(offset_of!(ibv_send_wr, _bind_mw), 80);
        assert_eq!(offset_of!(ibv_wc, status), 8);
        assert_eq!(offset_of!(ibv_wc, opcode), 12);
        assert_eq!(offset_of!(ibv_wc, byte_len), 20);
        assert_eq!(offset_of!(ibv_wc, qp_num), 28);
        assert_eq!(offset_of!(ibv_wc, wc_flags), 36);
        assert_eq!(offset_of!(ibv_wc, slid), 42);
        assert_eq!(offset_of!(ibv_wc, sl), 44);
        assert_eq!(offset_of!(ibv_qp_init_attr, cap), 32);
        assert_eq!(offset_of!(ibv_qp_init_attr, qp_type), 52);
        assert_eq!(offset_of!(ibv_qp_init_attr, sq_sig_all), 56);
        assert_eq!(offset_of!(ibv_global_route, flow_label), 16);
        assert_eq!(offset_of!(ibv_global_route, sgid_index), 20);
        assert_eq!(offset_of!(ibv_ah_attr, dlid), 24);
        assert_eq!(offset_of!(ibv_ah_attr, is_global), 29);
        assert_eq!(offset_of!(ibv_ah_attr, port_num), 30);
        assert_eq!(offset_of!(ibv_qp_attr, qkey), 16);
        assert_eq!(offset_of!(ibv_qp_attr, dest_qp_num), 28);
        assert_eq!(offset_of!(ibv_qp_attr, qp_access_flags), 32);
        assert_eq!(offset_of!(ibv_qp_attr, cap), 36);
        assert_eq!(offset_of!(ibv_qp_attr, ah_attr), 56);
        assert_eq!(offset_of!(ibv_qp_attr, alt_ah_attr), 88);
        assert_eq!(offset_of!(ibv_qp_attr, pkey_index), 120);
        assert_eq!(offset_of!(ibv_qp_attr, max_rd_atomic), 126);
        assert_eq!(offset_of!(ibv_qp_attr, max_dest_rd_atomic), 127);
        assert_eq!(offset_of!(ibv_qp_attr, min_rnr_timer), 128);
        assert_eq!(offset_of!(ibv_qp_attr, port_num), 129);
        assert_eq!(offset_of!(ibv_qp_attr, timeout), 130);
        assert_eq!(offset_of!(ibv_qp_attr, retry_cnt), 131);
        assert_eq!(offset_of!(ibv_qp_attr, rnr_retry), 132);
        assert_eq!(offset_of!(ibv_qp_attr, rate_limit), 136);
        assert_eq!(offset_of!(ibv_port_attr, active_mtu), 8);
        assert_eq!(offset_of!(ibv_port_attr, lid), 34);
        assert_eq!(offset_of!(ibv_port_attr, link_layer), 46);
        assert_eq!(offset_of!(ibv_port_attr, port_cap_flags2), 48);
        assert_eq!(offset_of!(ibv_mr, lkey), 36);
        assert_eq!(offset_of!(ibv_mr, rkey), 40);
    }
}
