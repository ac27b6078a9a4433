/* The tensor plane: combine kernels and chunk reduces (monarch_tensor_*). */

#include <math.h>

#include "check.h"
#include "suites.h"

/* Combine and finish on plain arrays, a chunk reduce over two buffers of
 * this process (one the owner's handle, one rebuilt from its descriptor,
 * read on the data plane), then bad codes, pointers and handles.
 * (Reduces between procs are tested in tensor/tests/reduce.rs and
 * bindings/python/tests/test_tensor_transfers.py.) */
void test_tensor(monarch_runtime *rt, monarch_actor_mesh *am) {
    float a[5] = {1, 2, 3, NAN, -1}, b[5] = {4, -2, 3, 0, -5};
    CHECK_OK(monarch_tensor_combine(MONARCH_DTYPE_F32, MONARCH_OP_SUM, a, b, 5));
    CHECK(a[0] == 5 && a[1] == 0 && a[2] == 6 && isnan(a[3]) && a[4] == -6, "f32 sum");
    CHECK_OK(monarch_tensor_combine(MONARCH_DTYPE_F32, MONARCH_OP_MAX, a, b, 5));
    CHECK(a[0] == 5 && a[1] == 0 && isnan(a[3]) && a[4] == -5, "f32 max keeps NaN");
    int32_t ia[3] = {-7, 7, 9}, ib[3] = {0, 0, 0};
    CHECK_OK(monarch_tensor_combine(MONARCH_DTYPE_I32, MONARCH_OP_AVG, ia, ib, 3));
    CHECK_OK(monarch_tensor_finish(MONARCH_DTYPE_I32, MONARCH_OP_AVG, ia, 3, 2));
    CHECK(ia[0] == -3 && ia[1] == 3 && ia[2] == 4, "i32 avg truncates");
    uint8_t u[2] = {0x0C, 0xF0}, v[2] = {0x0A, 0x0F};
    CHECK_OK(monarch_tensor_combine(MONARCH_DTYPE_U8, MONARCH_OP_BAND, u, v, 2));
    CHECK(u[0] == 0x08 && u[1] == 0x00, "u8 band");
    CHECK_OK(monarch_tensor_combine(MONARCH_DTYPE_U8, MONARCH_OP_BOR, u, v, 2));
    CHECK(u[0] == 0x0A && u[1] == 0x0F, "u8 bor");
    size_t esize = 0;
    CHECK_OK(monarch_tensor_dtype_size(MONARCH_DTYPE_BF16, &esize));
    CHECK(esize == 2, "bf16 size %zu", esize);

    /* A chunk reduce: members in group order, avg divides by 2. */
    double m0[64], m1[64], out[16];
    for (int i = 0; i < 64; i++) m0[i] = i, m1[i] = 100 + i;
    monarch_rdma_buffer *b0 = NULL, *b1 = NULL, *h1 = NULL;
    CHECK_OK(monarch_rdma_register(rt, (uint8_t *)m0, sizeof m0, MONARCH_RDMA_READ_ONLY, 1, &b0));
    CHECK_OK(monarch_rdma_register(rt, (uint8_t *)m1, sizeof m1, MONARCH_RDMA_READ_ONLY, 1, &b1));
    uint8_t *desc = NULL;
    size_t desc_len = 0;
    CHECK_OK(monarch_rdma_buffer_to_bytes(b1, &desc, &desc_len));
    CHECK_OK(monarch_rdma_buffer_from_bytes(rt, desc, desc_len, &h1));
    monarch_buffer_free(desc, desc_len);
    const monarch_rdma_buffer *members[2] = {b0, h1};
    bool direct[2] = {true, true};
    CHECK_OK(monarch_tensor_reduce_chunk(MONARCH_DTYPE_F64, MONARCH_OP_AVG, members, 2,
                                         8 * sizeof(double), out, 16, direct));
    int ok = 1;
    for (int i = 0; i < 16; i++) ok &= out[i] == (8 + i + 108 + i) / 2.0;
    CHECK(ok && !direct[0] && !direct[1], "reduce_chunk avg (%g)", out[0]);
    double one[4] = {0};
    CHECK_OK(monarch_tensor_read_member(h1, 0, one, sizeof one, NULL));
    CHECK(one[3] == 103, "read_member");
    /* The same reduce writing into the members' results: both are this
     * process's memory (an owner's handle is skipped, a rebuilt handle of
     * this process is no peer), so nothing is pushed and the sum is the
     * same. */
    const monarch_rdma_buffer *results[2] = {b0, h1};
    bool pushed[2] = {true, true};
    CHECK_OK(monarch_tensor_reduce_chunk_push(MONARCH_DTYPE_F64, MONARCH_OP_AVG, members, results,
                                              2, 8 * sizeof(double), out, 16, direct, pushed));
    CHECK(out[0] == 58 && out[15] == 73 && !pushed[0] && !pushed[1] && !direct[1],
          "reduce_chunk_push avg (%g)", out[0]);
    CHECK_OK(monarch_tensor_reduce_chunk_push(MONARCH_DTYPE_F64, MONARCH_OP_SUM, members, NULL, 2,
                                              0, out, 16, NULL, NULL));
    CHECK(out[1] == 1 + 101, "reduce_chunk_push without results (%g)", out[1]);

    /* Bad codes, pointers, ranges. */
    CHECK_STATUS(monarch_tensor_combine(0, MONARCH_OP_SUM, a, b, 5), MONARCH_ERR_INVALID_ARGUMENT,
                 "dtype");
    CHECK_STATUS(monarch_tensor_combine(MONARCH_DTYPE_F32, 99, a, b, 5),
                 MONARCH_ERR_INVALID_ARGUMENT, "op");
    CHECK_STATUS(monarch_tensor_combine(MONARCH_DTYPE_F32, MONARCH_OP_SUM, NULL, b, 5),
                 MONARCH_ERR_INVALID_ARGUMENT, "NULL");
    CHECK_STATUS(monarch_tensor_combine(MONARCH_DTYPE_F32, MONARCH_OP_SUM, a, NULL, 5),
                 MONARCH_ERR_INVALID_ARGUMENT, "NULL");
    CHECK_STATUS(monarch_tensor_combine(MONARCH_DTYPE_F32, MONARCH_OP_SUM, (char *)a + 1, b, 2),
                 MONARCH_ERR_INVALID_ARGUMENT, "aligned");
    CHECK_STATUS(monarch_tensor_combine(MONARCH_DTYPE_F32, MONARCH_OP_SUM, a + 1, a, 3),
                 MONARCH_ERR_INVALID_ARGUMENT, "overlap");
    uint8_t flags[2] = {1, 0};
    CHECK_STATUS(monarch_tensor_combine(MONARCH_DTYPE_BOOL, MONARCH_OP_AVG, flags, flags + 1, 1),
                 MONARCH_ERR_INVALID_ARGUMENT, "bool");
    CHECK_STATUS(monarch_tensor_combine(MONARCH_DTYPE_F32, MONARCH_OP_BXOR, a, b, 5),
                 MONARCH_ERR_INVALID_ARGUMENT, "integers and bool only");
    CHECK_STATUS(monarch_tensor_finish(MONARCH_DTYPE_F32, MONARCH_OP_AVG, a, 5, 0),
                 MONARCH_ERR_INVALID_ARGUMENT, "0 members");
    CHECK_STATUS(monarch_tensor_dtype_size(42, &esize), MONARCH_ERR_INVALID_ARGUMENT, "dtype");
    CHECK_STATUS(monarch_tensor_dtype_size(MONARCH_DTYPE_F32, NULL), MONARCH_ERR_INVALID_ARGUMENT,
                 "out");
    CHECK_STATUS(monarch_tensor_reduce_chunk(MONARCH_DTYPE_F64, MONARCH_OP_SUM, members, 2, 0, out,
                                             65, NULL),
                 MONARCH_ERR_INVALID_ARGUMENT, "outside");
    CHECK_STATUS(monarch_tensor_reduce_chunk(MONARCH_DTYPE_F64, MONARCH_OP_SUM, members, 0, 0, out,
                                             4, NULL),
                 MONARCH_ERR_INVALID_ARGUMENT, "at least one member");
    CHECK_STATUS(monarch_tensor_reduce_chunk(MONARCH_DTYPE_F64, MONARCH_OP_SUM, NULL, 2, 0, out, 4,
                                             NULL),
                 MONARCH_ERR_INVALID_ARGUMENT, "members");
    CHECK_STATUS(monarch_tensor_reduce_chunk(MONARCH_DTYPE_F64, MONARCH_OP_SUM, members, 2, 0, NULL,
                                             4, NULL),
                 MONARCH_ERR_INVALID_ARGUMENT, "NULL");
    CHECK_STATUS(monarch_tensor_reduce_chunk(MONARCH_DTYPE_I8, 0, members, 2, 0, out, 4, NULL),
                 MONARCH_ERR_INVALID_ARGUMENT, "op");
    CHECK_STATUS(monarch_tensor_read_member(h1, 0, NULL, 8, NULL), MONARCH_ERR_INVALID_ARGUMENT,
                 "NULL");
    /* Bad handles: wrong kind, never valid, freed. */
    const monarch_rdma_buffer *wrong[2] = {b0, (const monarch_rdma_buffer *)am};
    CHECK_STATUS(monarch_tensor_reduce_chunk(MONARCH_DTYPE_F64, MONARCH_OP_SUM, wrong, 2, 0, out, 4,
                                             NULL),
                 MONARCH_ERR_INVALID_HANDLE, "actor mesh");
    const monarch_rdma_buffer *wrong_results[2] = {NULL, (const monarch_rdma_buffer *)am};
    CHECK_STATUS(monarch_tensor_reduce_chunk_push(MONARCH_DTYPE_F64, MONARCH_OP_SUM, members,
                                                  wrong_results, 2, 0, out, 4, NULL, NULL),
                 MONARCH_ERR_INVALID_HANDLE, "actor mesh");
    CHECK_STATUS(monarch_tensor_reduce_chunk_push(MONARCH_DTYPE_F64, MONARCH_OP_SUM, members,
                                                  results, 2, 0, out, 65, NULL, NULL),
                 MONARCH_ERR_INVALID_ARGUMENT, "outside");
    CHECK_STATUS(monarch_tensor_read_member((monarch_rdma_buffer *)(uintptr_t)0x123456789abcULL, 0,
                                            one, 8, NULL),
                 MONARCH_ERR_INVALID_HANDLE, "stale");
    /* A dropped member: refused. */
    CHECK_OK(monarch_rdma_buffer_drop(b0));
    CHECK_STATUS(monarch_tensor_reduce_chunk(MONARCH_DTYPE_F64, MONARCH_OP_SUM, members, 2, 0, out,
                                             4, NULL),
                 MONARCH_ERR_INVALID_ARGUMENT, "dropped");
    CHECK_OK(monarch_rdma_buffer_free(b0));
    CHECK_OK(monarch_rdma_buffer_free(h1));
    CHECK_OK(monarch_rdma_buffer_free(b1));
    CHECK_STATUS(monarch_tensor_reduce_chunk(MONARCH_DTYPE_F64, MONARCH_OP_SUM, members, 2, 0, out,
                                             4, NULL),
                 MONARCH_ERR_INVALID_HANDLE, "stale");
}
