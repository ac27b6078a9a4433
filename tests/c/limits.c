/* Limits on arguments: negative timeouts, names, dimension names, mesh
 * sizes and RDMA ranges are refused before anything reaches a proc. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "suites.h"

void test_input_limits(monarch_runtime *rt, monarch_proc_mesh *pm,
                              monarch_actor_mesh *am) {
    /* Timeouts: -1 waits forever, any other negative value is refused. */
    monarch_future *f = NULL;
    CHECK_OK(monarch_actor_mesh_call(am, "rank", NULL, 0, MONARCH_CALL_ALL, &f));
    CHECK_STATUS(monarch_future_wait(f, -2), MONARCH_ERR_INVALID_ARGUMENT, "timeout_ms");
    CHECK_STATUS(monarch_future_wait(f, INT64_MIN), MONARCH_ERR_INVALID_ARGUMENT, "timeout_ms");
    CHECK_OK(monarch_future_wait(f, -1));
    EXPECT_INTS(finish(f), 0, 1, 2, 3);
    monarch_event *ev = NULL;
    CHECK_STATUS(monarch_runtime_next_event(rt, -5, &ev), MONARCH_ERR_INVALID_ARGUMENT,
                 "timeout_ms");
    uint8_t *sev = NULL;
    size_t sev_len = 0;
    CHECK_STATUS(monarch_supervision_next(rt, -1000, &sev, &sev_len),
                 MONARCH_ERR_INVALID_ARGUMENT, "timeout_ms");

    /* Names: too long, control characters, empty. */
    size_t big_len = (2u << 20);
    char *big = malloc(big_len + 1);
    if (!big) return;
    memset(big, 'n', big_len);
    big[big_len] = '\0';
    monarch_actor_mesh *bad = NULL;
    monarch_future *ready = NULL;
    CHECK_STATUS(monarch_actor_mesh_spawn(pm, big, "counter", NULL, 0, &bad, &ready),
                 MONARCH_ERR_INVALID_ARGUMENT, "actor mesh name");
    CHECK_STATUS(monarch_actor_mesh_spawn(pm, "c", big, NULL, 0, &bad, &ready),
                 MONARCH_ERR_INVALID_ARGUMENT, "actor type name");
    CHECK_STATUS(monarch_actor_mesh_spawn(pm, "new\nline", "counter", NULL, 0, &bad, &ready),
                 MONARCH_ERR_INVALID_ARGUMENT, "control character");
    CHECK_STATUS(monarch_actor_mesh_spawn(pm, "", "counter", NULL, 0, &bad, &ready),
                 MONARCH_ERR_INVALID_ARGUMENT, "empty");
    CHECK(bad == NULL && ready == NULL, "a refused spawn wrote a handle");
    CHECK_STATUS(monarch_actor_mesh_call(am, big, NULL, 0, MONARCH_CALL_ALL, &f),
                 MONARCH_ERR_INVALID_ARGUMENT, "method name");
    CHECK_STATUS(monarch_actor_mesh_call(am, "", NULL, 0, MONARCH_CALL_BROADCAST, NULL),
                 MONARCH_ERR_INVALID_ARGUMENT, "method name");
    monarch_port_receiver *rx = NULL;
    CHECK_OK(monarch_port_open(rt, false, &rx));
    uint8_t *ref = NULL;
    size_t ref_len = 0;
    CHECK_OK(monarch_port_receiver_ref(rx, &ref, &ref_len));
    CHECK_STATUS(monarch_actor_mesh_send(am, big, NULL, 0, ref, ref_len, MONARCH_CALL_ALL),
                 MONARCH_ERR_INVALID_ARGUMENT, "method name");
    monarch_buffer_free(ref, ref_len);
    monarch_port_receiver_free(rx);
    monarch_port_receiver *stream = NULL;
    CHECK_STATUS(monarch_actor_mesh_stream(am, big, NULL, 0, &stream),
                 MONARCH_ERR_INVALID_ARGUMENT, "method name");

    /* Dimension names and mesh sizes. */
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = '\0';
    const char *argv[] = {exe};
    const char *big_label[] = {big};
    size_t one[] = {1};
    monarch_proc_mesh *pm2 = NULL;
    CHECK_STATUS(monarch_proc_mesh_spawn(rt, big_label, one, 1, argv, 1, NULL, 0, &pm2),
                 MONARCH_ERR_INVALID_ARGUMENT, "dimension name");
    const char *label[] = {"gpus"};
    size_t huge[] = {(size_t)1 << 40};
    CHECK_STATUS(monarch_proc_mesh_spawn(rt, label, huge, 1, argv, 1, NULL, 0, &pm2),
                 MONARCH_ERR_INVALID_ARGUMENT, "MONARCH_MAX_MESH_SIZE");
    size_t huger[] = {(size_t)1 << 62};
    CHECK_STATUS(monarch_proc_mesh_spawn(rt, label, huger, 1, argv, 1, NULL, 0, &pm2),
                 MONARCH_ERR_INVALID_ARGUMENT, "MONARCH_MAX_MESH_SIZE");
    const char *labels2[] = {"hosts", "gpus"};
    size_t overflow[] = {(size_t)1 << 40, (size_t)1 << 40};
    CHECK_STATUS(monarch_proc_mesh_spawn(rt, labels2, overflow, 2, argv, 1, NULL, 0, &pm2),
                 MONARCH_ERR_INVALID_ARGUMENT, "too large");
    CHECK(pm2 == NULL, "a refused proc mesh spawn wrote a handle");
    monarch_actor_mesh *split = NULL;
    const char *names[] = {big};
    size_t split_sizes[] = {MONARCH_SPLIT_INFER};
    CHECK_STATUS(monarch_actor_mesh_split(am, "gpus", names, split_sizes, 1, &split),
                 MONARCH_ERR_INVALID_ARGUMENT, "dimension name");
    free(big);

    /* An RDMA range that wraps the address space. */
    monarch_rdma_buffer *b = NULL;
    CHECK_STATUS(monarch_rdma_register(rt, (uint8_t *)(UINTPTR_MAX - 15), 64, 0, 1, &b),
                 MONARCH_ERR_INVALID_ARGUMENT, "address space");
    CHECK(b == NULL, "a refused registration wrote a handle");

    /* None of it reached a proc: the mesh still answers. */
    EXPECT_INTS(call(am, "rank", NULL, 0, MONARCH_CALL_ALL), 0, 1, 2, 3);
}
