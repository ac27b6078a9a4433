/*
 * A fake libibverbs for the data-plane tests (rdma/tests/rdma_ibverbs.rs):
 * no RDMA hardware, no kernel driver. It exports the functions libmonarch
 * resolves, with the structure layouts of rdma-core's verbs.h (x86_64),
 * and "executes" RDMA READ/WRITE work requests with process_vm_readv /
 * process_vm_writev into the peer process, whose pid it carries in the
 * port's GID. Built by the test with variants:
 *   -DFAKE_NO_DEVICES   ibv_get_device_list returns an empty list
 *   -DFAKE_PORT_DOWN    the device's port 1 is not active
 *   -DFAKE_ONLY_IOVA2   no ibv_reg_mr symbol, only ibv_reg_mr_iova2
 *   -DFAKE_BROKEN_RTR   queue pairs never reach RTR (an unreachable peer)
 * It checks what a real device would refuse: unknown lkey, a QP that is
 * not in RTS, and the sizes/opcodes libmonarch sends.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>
#include <sys/uio.h>

struct ibv_gid { uint8_t raw[16]; } __attribute__((aligned(8)));
struct ibv_sge { uint64_t addr; uint32_t length; uint32_t lkey; };
struct ibv_send_wr {
    uint64_t wr_id; struct ibv_send_wr *next; struct ibv_sge *sg_list;
    int num_sge; unsigned opcode; unsigned send_flags; uint32_t imm;
    struct { uint64_t remote_addr; uint32_t rkey; uint32_t rest[5]; } rdma;
    uint32_t qp_type; uint32_t pad; uint64_t bind_mw[6];
};
struct ibv_wc {
    uint64_t wr_id; unsigned status; unsigned opcode; uint32_t vendor_err;
    uint32_t byte_len; uint32_t imm; uint32_t qp_num; uint32_t src_qp;
    unsigned wc_flags; uint16_t pkey_index; uint16_t slid; uint8_t sl; uint8_t dlid_path_bits;
};
typedef void (*fp)(void);
struct ibv_cq;
struct ibv_qp;
struct ibv_context_ops {
    fp f0[11];
    int (*poll_cq)(struct ibv_cq *, int, struct ibv_wc *);
    fp f12[13];
    int (*post_send)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **);
    fp post_recv;
    fp f27[5];
};
struct ibv_context {
    void *device; struct ibv_context_ops ops; int cmd_fd, async_fd, num_comp_vectors;
    char mutex[40] __attribute__((aligned(8))); void *abi_compat;
};
struct ibv_pd { struct ibv_context *context; uint32_t handle; };
struct ibv_mr { struct ibv_context *context; struct ibv_pd *pd; void *addr; size_t length;
                uint32_t handle, lkey, rkey; };
struct ibv_cq { struct ibv_context *context; void *channel, *cq_context; uint32_t handle; int cqe;
                char mutex[40] __attribute__((aligned(8))); char cond[48]; uint32_t a, b;
                /* fake */ struct ibv_wc ring[256]; int head, count; };
struct ibv_qp { struct ibv_context *context; void *qp_context; struct ibv_pd *pd;
                struct ibv_cq *send_cq, *recv_cq; void *srq; uint32_t handle, qp_num;
                unsigned state, qp_type; char mutex[40] __attribute__((aligned(8)));
                char cond[48]; uint32_t events_completed;
                /* fake */ pid_t peer; uint32_t dest_qpn; };
struct ibv_qp_cap { uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data; };
struct ibv_qp_init_attr { void *qp_context; struct ibv_cq *send_cq, *recv_cq; void *srq;
                          struct ibv_qp_cap cap; unsigned qp_type; int sq_sig_all; };
struct ibv_global_route { struct ibv_gid dgid; uint32_t flow_label; uint8_t sgid_index, hop_limit, tclass; };
struct ibv_ah_attr { struct ibv_global_route grh; uint16_t dlid; uint8_t sl, src_path_bits, static_rate,
                     is_global, port_num; };
struct ibv_qp_attr {
    unsigned qp_state, cur_qp_state, path_mtu, path_mig_state; uint32_t qkey, rq_psn, sq_psn, dest_qp_num;
    unsigned qp_access_flags; struct ibv_qp_cap cap; struct ibv_ah_attr ah_attr, alt_ah_attr;
    uint16_t pkey_index, alt_pkey_index; uint8_t en_sqd, sq_draining, max_rd_atomic, max_dest_rd_atomic,
    min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry, alt_port_num, alt_timeout; uint32_t rate_limit;
};
struct ibv_port_attr { unsigned state, max_mtu, active_mtu; int gid_tbl_len; uint32_t f[4];
                       uint16_t pkey_tbl_len, lid, sm_lid; uint8_t b[10]; uint16_t f2; };

_Static_assert(sizeof(struct ibv_send_wr) == 128, "send_wr");
_Static_assert(sizeof(struct ibv_wc) == 48, "wc");
_Static_assert(sizeof(struct ibv_context_ops) == 256, "ops");
_Static_assert(sizeof(struct ibv_qp_attr) == 144, "qp_attr");
_Static_assert(sizeof(struct ibv_port_attr) == 52, "port_attr");
_Static_assert(sizeof(struct ibv_qp_init_attr) == 64, "init_attr");

static int dummy_device;
static uint32_t next_key = 0x100, next_qpn = 0x40;
static uint32_t live_lkeys[4096];

void **ibv_get_device_list(int *n) {
#ifdef FAKE_NO_DEVICES
    *n = 0;
    return calloc(1, sizeof(void *));
#else
    void **l = calloc(2, sizeof(void *));
    l[0] = &dummy_device;
    *n = 1;
    return l;
#endif
}
void ibv_free_device_list(void **l) { free(l); }
const char *ibv_get_device_name(void *d) { (void)d; return "fakeib0"; }

static int fake_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
    int got = 0;
    while (got < n && cq->count > 0) {
        wc[got++] = cq->ring[cq->head];
        cq->head = (cq->head + 1) % 256;
        cq->count--;
    }
    return got;
}

static int lkey_known(uint32_t k) {
    for (int i = 0; i < 4096; i++) if (live_lkeys[i] == k) return 1;
    return 0;
}

static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
    for (; wr; wr = wr->next) {
        struct ibv_cq *cq = qp->send_cq;
        if (qp->state != 3 || wr->num_sge != 1 || (wr->opcode != 0 && wr->opcode != 4)
            || cq->count >= 256 || wr->rdma.rkey == 0) { *bad = wr; return EINVAL; }
        struct ibv_wc c = {0};
        c.wr_id = wr->wr_id; c.opcode = wr->opcode == 4 ? 1 : 0; c.qp_num = qp->qp_num;
        struct iovec l = { (void *)(uintptr_t)wr->sg_list->addr, wr->sg_list->length };
        struct iovec r = { (void *)(uintptr_t)wr->rdma.remote_addr, wr->sg_list->length };
        ssize_t got;
        if (!lkey_known(wr->sg_list->lkey)) c.status = 4; /* IBV_WC_LOC_PROT_ERR */
        else {
            got = wr->opcode == 4 ? process_vm_readv(qp->peer, &l, 1, &r, 1, 0)
                                  : process_vm_writev(qp->peer, &l, 1, &r, 1, 0);
            c.status = got == (ssize_t)l.iov_len ? 0 : 10; /* IBV_WC_REM_ACCESS_ERR */
            c.byte_len = l.iov_len;
        }
        if (wr->send_flags & 2) {
            cq->ring[(cq->head + cq->count) % 256] = c;
            cq->count++;
        }
    }
    return 0;
}

struct ibv_context *ibv_open_device(void *d) {
    (void)d;
    struct ibv_context *c = calloc(1, sizeof *c);
    c->ops.poll_cq = fake_poll_cq;
    c->ops.post_send = fake_post_send;
    return c;
}
int ibv_close_device(struct ibv_context *c) { free(c); return 0; }
struct ibv_pd *ibv_alloc_pd(struct ibv_context *c) { struct ibv_pd *p = calloc(1, sizeof *p); p->context = c; return p; }
int ibv_dealloc_pd(struct ibv_pd *p) { free(p); return 0; }

static struct ibv_mr *reg(struct ibv_pd *pd, void *addr, size_t len, unsigned access) {
    (void)access;
    if (!addr || !len) { errno = EINVAL; return NULL; }
    struct ibv_mr *m = calloc(1, sizeof *m);
    m->pd = pd; m->addr = addr; m->length = len;
    m->lkey = __sync_fetch_and_add(&next_key, 1);
    m->rkey = m->lkey | 0x10000;
    for (int i = 0; i < 4096; i++) if (__sync_bool_compare_and_swap(&live_lkeys[i], 0, m->lkey)) break;
    return m;
}
#ifndef FAKE_ONLY_IOVA2
struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access) { return reg(pd, addr, len, access); }
#endif
struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, unsigned access) {
    if (iova != (uintptr_t)addr) { errno = EINVAL; return NULL; }
    return reg(pd, addr, len, access);
}
int ibv_dereg_mr(struct ibv_mr *m) {
    for (int i = 0; i < 4096; i++) if (live_lkeys[i] == m->lkey) live_lkeys[i] = 0;
    free(m); return 0;
}
struct ibv_cq *ibv_create_cq(struct ibv_context *c, int cqe, void *ctx, void *ch, int vec) {
    (void)ctx; (void)ch; (void)vec;
    struct ibv_cq *q = calloc(1, sizeof *q); q->context = c; q->cqe = cqe; return q;
}
int ibv_destroy_cq(struct ibv_cq *q) { free(q); return 0; }
struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a) {
    if (a->qp_type != 2 || !a->send_cq || a->cap.max_send_wr == 0) { errno = EINVAL; return NULL; }
    struct ibv_qp *q = calloc(1, sizeof *q);
    q->pd = pd; q->context = pd->context; q->send_cq = a->send_cq; q->recv_cq = a->recv_cq;
    q->qp_num = __sync_fetch_and_add(&next_qpn, 1); q->qp_type = 2;
    return q;
}
int ibv_modify_qp(struct ibv_qp *q, struct ibv_qp_attr *a, int mask) {
    if (!(mask & 1)) return EINVAL;
    if (a->qp_state != q->state + 1) return EINVAL; /* RESET->INIT->RTR->RTS only */
    if (a->qp_state == 2) { /* RTR: needs the address vector and the peer */
#ifdef FAKE_BROKEN_RTR
        return ENETUNREACH;
#endif
        if (!(mask & (1 << 7)) || !(mask & (1 << 20)) || !a->ah_attr.is_global) return EINVAL;
        const uint8_t *g = a->ah_attr.grh.dgid.raw;
        if (g[0] != 0xfe || g[1] != 0xfa) return EINVAL;
        memcpy(&q->peer, g + 4, sizeof(pid_t));
        q->dest_qpn = a->dest_qp_num;
    }
    q->state = a->qp_state;
    return 0;
}
int ibv_destroy_qp(struct ibv_qp *q) { free(q); return 0; }
int ibv_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a) {
    (void)c;
    if (port != 1) return EINVAL;
    memset(a, 0, 48); /* the _compat_ibv_port_attr prefix */
#ifdef FAKE_PORT_DOWN
    a->state = 1;
#else
    a->state = 4;
#endif
    a->active_mtu = 3; a->lid = 7; a->b[8] = 1; /* link_layer: InfiniBand */
    return 0;
}
int ibv_query_gid(struct ibv_context *c, uint8_t port, int index, struct ibv_gid *g) {
    (void)c; (void)port;
    if (index != 0) return EINVAL;
    memset(g, 0, sizeof *g);
    g->raw[0] = 0xfe; g->raw[1] = 0xfa;
    pid_t me = getpid();
    memcpy(g->raw + 4, &me, sizeof me);
    return 0;
}
