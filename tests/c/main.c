/*
 * End-to-end test of the libmonarch C ABI, in one program that is both the
 * controller and the worker:
 *
 *  - started with MONARCH_CONTROLLER set (the bootstrap environment), it is
 *    a worker proc serving the C "counter" actor (counter_actor.c) through
 *    the pull API;
 *  - otherwise it is the controller: it spawns 4 procs of itself and runs
 *    the suites of suites.h: calls, slices, errors, handle checking,
 *    free(NULL) for every free function, status names, futures, the
 *    runtime fd, ports, rdma, this_proc actors (served from a thread) and
 *    stopping.
 *
 * Prints "N passed, M failed" and exits non-zero on any failure.
 * Build, from tests/c: cc -I ../../include *.c -L ../../target/debug -lmonarch -lpthread
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "counter_actor.h"
#include "suites.h"

static int controller_main(void) {
    CHECK(monarch_abi_version() == MONARCH_ABI_VERSION, "abi version %u",
          monarch_abi_version());

    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        perror("readlink /proc/self/exe");
        return 1;
    }
    exe[n] = '\0';

    monarch_runtime *rt = NULL;
    CHECK_OK(monarch_runtime_new(&rt));
    if (!rt) return 1;
    bool is_worker = true;
    CHECK_OK(monarch_runtime_is_worker(rt, &is_worker));
    CHECK(!is_worker, "controller thinks it is a worker");
    test_status_names();
    test_free_null(rt);

    const char *labels[] = {"hosts", "gpus"};
    size_t sizes[] = {2, 2};
    const char *argv[] = {exe};
    monarch_proc_mesh *pm = NULL;
    const char *env[] = {"ABI_TEST_ENV=from-controller"};
    const char *bad_env[] = {"NO_EQUALS_SIGN"};
    CHECK_STATUS(monarch_proc_mesh_spawn(rt, labels, sizes, 2, argv, 1, bad_env, 1, &pm),
                 MONARCH_ERR_INVALID_ARGUMENT, "NAME=value");
    CHECK_STATUS(monarch_proc_mesh_spawn(rt, labels, sizes, 2, argv, 1, NULL, 1, &pm),
                 MONARCH_ERR_INVALID_ARGUMENT, "env");
    CHECK_OK(monarch_proc_mesh_spawn(rt, labels, sizes, 2, argv, 1, env, 1, &pm));
    if (!pm) return 1;

    /* Spawn counters starting at 7. */
    int64_t seven = 7;
    monarch_bytes arg = i64_part(&seven);
    monarch_actor_mesh *am = NULL;
    monarch_future *ready = NULL;
    CHECK_OK(monarch_actor_mesh_spawn(pm, "counter", "counter", &arg, 1, &am, &ready));
    if (!am) return 1;
    expect_all_ok(finish(ready), 4, __LINE__);

    test_calls(am);
    test_slices_and_geometry(pm, am);
    test_call_modes_and_errors(rt, pm, am);
    test_bad_handles_and_args(rt, pm, am);
    test_ports(rt, am);
    test_rdma(rt, am);
    test_tensor(rt, am);
    test_future_wait_poll_and_fd(rt, am);
    test_this_proc(rt);
    test_input_limits(rt, pm, am);
    test_progress();
    test_ref_round_trip(rt, am);
    test_proc_mesh_ref(rt, pm, am);
    test_proc_exit_mid_call(rt, am);

    /* Stop the actors, then the procs. */
    monarch_future *stopped = NULL;
    monarch_actor_mesh *first_host = NULL;
    CHECK_OK(monarch_actor_mesh_slice_index(am, "hosts", 0, &first_host));
    CHECK_OK(monarch_actor_mesh_stop(first_host, &stopped));
    expect_all_ok(finish(stopped), 2, __LINE__);
    expect_errors(call(first_host, "get", NULL, 0, MONARCH_CALL_ALL), 2, "no actor", __LINE__);
    monarch_actor_mesh_free(first_host);

    CHECK_OK(monarch_proc_mesh_stop(pm, &stopped));
    expect_all_ok(finish(stopped), 4, __LINE__);
    CHECK_OK(monarch_actor_mesh_free(am));
    CHECK_OK(monarch_proc_mesh_free(pm));
    CHECK_STATUS(monarch_proc_mesh_free(pm), MONARCH_ERR_INVALID_HANDLE, "proc mesh");

    CHECK_OK(monarch_runtime_free(rt));
    CHECK_STATUS(monarch_runtime_free(rt), MONARCH_ERR_INVALID_HANDLE, "runtime");
    CHECK_STATUS(monarch_runtime_this_proc(rt, &pm), MONARCH_ERR_INVALID_HANDLE, "runtime");
    uint8_t *ev_buf = NULL;
    size_t ev_len = 0;
    CHECK_STATUS(monarch_supervision_next(rt, 0, &ev_buf, &ev_len), MONARCH_ERR_INVALID_HANDLE,
                 "runtime");

    printf("%d passed, %d failed\n", checks_passed, checks_failed);
    return checks_failed ? 1 : 0;
}

int main(void) {
    if (getenv("MONARCH_CONTROLLER")) return worker_main();
    return controller_main();
}
