/* The data plane: registered buffers (monarch_rdma_*). */

#include "check.h"
#include "suites.h"

/* The data plane's C ABI: a buffer registered here, read back through a
 * handle rebuilt from its descriptor bytes, then bad handles and bad
 * arguments. (Transfers between procs are tested in rdma/tests/rdma.rs and
 * bindings/python/tests/test_rdma.py.) */
void test_rdma(monarch_runtime *rt, monarch_actor_mesh *am) {
    uint8_t mem[4096], dst[5000];
    for (size_t i = 0; i < sizeof mem; i++) mem[i] = (uint8_t)(i * 7);
    monarch_rdma_buffer *b = NULL, *h = NULL;
    CHECK_OK(monarch_rdma_register(rt, mem, sizeof mem, 0, 1, &b));
    uint64_t size = 0;
    CHECK_OK(monarch_rdma_buffer_size(b, &size));
    CHECK(size == sizeof mem, "rdma size %llu", (unsigned long long)size);
    uint8_t *desc = NULL;
    size_t desc_len = 0;
    CHECK_OK(monarch_rdma_buffer_to_bytes(b, &desc, &desc_len));
    CHECK_OK(monarch_rdma_buffer_from_bytes(rt, desc, desc_len, &h));
    monarch_buffer_free(desc, desc_len);
    memset(dst, 0xEE, sizeof dst);
    monarch_future *f = NULL;
    CHECK_OK(monarch_rdma_read_into(h, 100, dst, 1000, &f));
    CHECK_OK(monarch_future_wait(f, HANG_MS));
    monarch_value_mesh *vm = NULL;
    CHECK_OK(monarch_future_take(f, &vm));
    monarch_value_mesh_free(vm);
    monarch_future_free(f);
    CHECK(memcmp(dst, mem + 100, 1000) == 0 && dst[1000] == 0xEE, "rdma read bytes");
    const char *name = NULL;
    CHECK_OK(monarch_rdma_buffer_backend(h, &name));
    CHECK(name && *name, "rdma backend name");
    CHECK_OK(monarch_rdma_default_backend(&name));
    bool avail = true;
    const char *why = NULL;
    CHECK_OK(monarch_rdma_ibverbs_status(&avail, &why));
    CHECK(!avail && why && *why, "ibverbs status");

    /* Out of range: refused at once. */
    CHECK_STATUS(monarch_rdma_read_into(h, 4000, dst, 200, &f), MONARCH_ERR_INVALID_ARGUMENT,
                 "outside");
    /* Bad arguments. */
    CHECK_STATUS(monarch_rdma_register(rt, NULL, 10, 0, 1, &b), MONARCH_ERR_INVALID_ARGUMENT,
                 "NULL");
    CHECK_STATUS(monarch_rdma_register(rt, mem, 0, 0, 1, &b), MONARCH_ERR_INVALID_ARGUMENT, "zero");
    CHECK_STATUS(monarch_rdma_register(rt, mem, 10, 0x80, 1, &b), MONARCH_ERR_INVALID_ARGUMENT,
                 "flags");
    CHECK_STATUS(monarch_rdma_register(rt, mem, 10, 0, 1, NULL), MONARCH_ERR_INVALID_ARGUMENT,
                 "out");
    CHECK_STATUS(monarch_rdma_buffer_from_bytes(rt, (const uint8_t *)"garbage", 7, &h),
                 MONARCH_ERR_INVALID_ARGUMENT, "descriptor");
    CHECK_STATUS(monarch_rdma_read_into(h, 0, NULL, 10, &f), MONARCH_ERR_INVALID_ARGUMENT, "NULL");
    CHECK_STATUS(monarch_rdma_read_into(h, 0, dst, 10, NULL), MONARCH_ERR_INVALID_ARGUMENT, "out");
    CHECK_STATUS(monarch_rdma_buffer_size(h, NULL), MONARCH_ERR_INVALID_ARGUMENT, "out");
    /* Bad handles: NULL, never valid, wrong kind. */
    CHECK_STATUS(monarch_rdma_buffer_size(NULL, &size), MONARCH_ERR_INVALID_HANDLE, "NULL");
    CHECK_STATUS(monarch_rdma_read_into((monarch_rdma_buffer *)(uintptr_t)0x123456789abcULL, 0,
                                        dst, 1, &f),
                 MONARCH_ERR_INVALID_HANDLE, "stale");
    CHECK_STATUS(monarch_rdma_buffer_drop((monarch_rdma_buffer *)am), MONARCH_ERR_INVALID_HANDLE,
                 "actor mesh");
    CHECK_STATUS(monarch_rdma_buffer_free((monarch_rdma_buffer *)am), MONARCH_ERR_INVALID_HANDLE,
                 "not a");
    CHECK_STATUS(monarch_rdma_register((monarch_runtime *)am, mem, 10, 0, 1, &b),
                 MONARCH_ERR_INVALID_HANDLE, "actor mesh");
    CHECK_STATUS(monarch_future_wait((monarch_future *)h, 0), MONARCH_ERR_INVALID_HANDLE,
                 "rdma buffer");

    /* Drop: the owner unregisters; the other handle's reads are refused. */
    CHECK_OK(monarch_rdma_buffer_drop(b));
    CHECK_STATUS(monarch_rdma_buffer_drop(b), MONARCH_ERR_INVALID_ARGUMENT, "already dropped");
    CHECK_STATUS(monarch_rdma_read_into(b, 0, dst, 10, &f), MONARCH_ERR_INVALID_ARGUMENT,
                 "dropped");
    bool reg = true;
    CHECK_OK(monarch_rdma_buffer_is_registered(b, &reg));
    CHECK(!reg, "dropped buffer still registered");
    CHECK_OK(monarch_rdma_read_into(h, 0, dst, 10, &f));
    CHECK_OK(monarch_future_wait(f, HANG_MS));
    CHECK_STATUS(monarch_future_take(f, &vm), MONARCH_ERR_INVALID_ARGUMENT, "not registered");
    monarch_future_free(f);
    /* Freed handles. */
    CHECK_OK(monarch_rdma_buffer_free(b));
    CHECK_OK(monarch_rdma_buffer_free(h));
    CHECK_STATUS(monarch_rdma_buffer_size(b, &size), MONARCH_ERR_INVALID_HANDLE, "stale");
    CHECK_STATUS(monarch_rdma_buffer_free(h), MONARCH_ERR_INVALID_HANDLE, "stale");
}
