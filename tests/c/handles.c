/* Bad handles (NULL, stale, wrong kind) and bad arguments, across the types. */

#include "check.h"
#include "suites.h"

void test_bad_handles_and_args(monarch_runtime *rt, monarch_proc_mesh *pm,
                               monarch_actor_mesh *am) {
    /* NULL handles. */
    CHECK_STATUS(monarch_future_wait(NULL, 0), MONARCH_ERR_INVALID_HANDLE, "NULL");
    /* A handle that was never valid. */
    CHECK_STATUS(monarch_future_wait((monarch_future *)(uintptr_t)0x123456789abcULL, 0),
                 MONARCH_ERR_INVALID_HANDLE, "stale");

    /* A freed future, then used, then freed again. */
    monarch_future *f = NULL;
    CHECK_OK(monarch_actor_mesh_call(am, "get", NULL, 0, MONARCH_CALL_ALL, &f));
    CHECK_OK(monarch_future_wait(f, HANG_MS));
    CHECK_OK(monarch_future_free(f));
    CHECK_STATUS(monarch_future_wait(f, 0), MONARCH_ERR_INVALID_HANDLE, "stale");
    bool ready = false;
    CHECK_STATUS(monarch_future_poll(f, &ready), MONARCH_ERR_INVALID_HANDLE, "future");
    monarch_value_mesh *vm = NULL;
    CHECK_STATUS(monarch_future_take(f, &vm), MONARCH_ERR_INVALID_HANDLE, "future");
    CHECK_STATUS(monarch_future_free(f), MONARCH_ERR_INVALID_HANDLE, "future");

    /* A freed value mesh. */
    vm = call(am, "get", NULL, 0, MONARCH_CALL_ALL);
    CHECK_OK(monarch_value_mesh_free(vm));
    size_t n = 0;
    CHECK_STATUS(monarch_value_mesh_len(vm, &n), MONARCH_ERR_INVALID_HANDLE, "value mesh");
    CHECK_STATUS(monarch_value_mesh_points(vm, NULL, 0, &n), MONARCH_ERR_INVALID_HANDLE,
                 "value mesh");
    CHECK_STATUS(monarch_value_mesh_points((monarch_value_mesh *)am, NULL, 0, &n),
                 MONARCH_ERR_INVALID_HANDLE, "actor mesh");

    /* Events: bad handles and out-pointers of the one-call variants. */
    monarch_event *ev = NULL;
    monarch_event_header h;
    CHECK_STATUS(monarch_runtime_next_event_header(NULL, 0, &ev, &h),
                 MONARCH_ERR_INVALID_HANDLE, "NULL");
    CHECK_STATUS(monarch_runtime_next_event_header(rt, 0, &ev, NULL),
                 MONARCH_ERR_INVALID_ARGUMENT, "out_header");
    CHECK_STATUS(monarch_event_reply_one_and_free(NULL, NULL, 0), MONARCH_ERR_INVALID_HANDLE,
                 "NULL");
    CHECK_STATUS(monarch_event_reply_one_and_free((monarch_event *)am, (const uint8_t *)"x", 1),
                 MONARCH_ERR_INVALID_HANDLE, "actor mesh");

    /* Wrong kinds: a proc mesh where an actor mesh is expected, and back. */
    CHECK_STATUS(monarch_actor_mesh_call((monarch_actor_mesh *)pm, "get", NULL, 0,
                                         MONARCH_CALL_ALL, &f),
                 MONARCH_ERR_INVALID_HANDLE, "proc mesh");
    CHECK_STATUS(monarch_actor_mesh_free((monarch_actor_mesh *)pm), MONARCH_ERR_INVALID_HANDLE,
                 "not a");
    uint8_t *buf = NULL;
    size_t len = 0;
    CHECK_STATUS(monarch_proc_mesh_shape((monarch_proc_mesh *)am, &buf, &len),
                 MONARCH_ERR_INVALID_HANDLE, "actor mesh");
    CHECK_STATUS(monarch_future_wait((monarch_future *)rt, 0), MONARCH_ERR_INVALID_HANDLE,
                 "runtime");
    /* Host meshes: bad handles and arguments. */
    monarch_host_mesh *hm = NULL;
    monarch_proc_mesh *hpm = NULL;
    CHECK_STATUS(monarch_host_mesh_free((monarch_host_mesh *)pm), MONARCH_ERR_INVALID_HANDLE,
                 "proc mesh");
    CHECK_STATUS(monarch_host_mesh_shape((monarch_host_mesh *)am, &buf, &len),
                 MONARCH_ERR_INVALID_HANDLE, "actor mesh");
    CHECK_STATUS(monarch_host_mesh_slice_index(NULL, "hosts", 0, &hm),
                 MONARCH_ERR_INVALID_HANDLE, "NULL");
    CHECK_STATUS(monarch_host_mesh_slice_range((monarch_host_mesh *)rt, "hosts", 0, 1, 1, &hm),
                 MONARCH_ERR_INVALID_HANDLE, "runtime");
    CHECK_STATUS(monarch_host_mesh_spawn_procs((monarch_host_mesh *)pm, NULL, NULL, 0, NULL, 0,
                                               NULL, 0, &hpm),
                 MONARCH_ERR_INVALID_HANDLE, "proc mesh");
    CHECK_STATUS(monarch_host_mesh_attach((monarch_runtime *)pm, NULL, 0, &hm),
                 MONARCH_ERR_INVALID_HANDLE, "proc mesh");
    CHECK_STATUS(monarch_host_mesh_attach(rt, NULL, 0, &hm), MONARCH_ERR_INVALID_ARGUMENT,
                 "at least one host");
    const char *bad_addr[] = {"not an address"};
    CHECK_STATUS(monarch_host_mesh_attach(rt, bad_addr, 1, &hm), MONARCH_ERR_INVALID_ARGUMENT,
                 "address");
    CHECK_STATUS(monarch_host_mesh_attach(rt, bad_addr, 1, NULL), MONARCH_ERR_INVALID_ARGUMENT,
                 "out");
    CHECK_STATUS(monarch_runtime_logging_option((monarch_runtime *)pm, true, 0),
                 MONARCH_ERR_INVALID_HANDLE, "proc mesh");
    CHECK_STATUS(monarch_runtime_job_token((monarch_runtime *)pm, &buf, &len),
                 MONARCH_ERR_INVALID_HANDLE, "proc mesh");
    CHECK_STATUS(monarch_runtime_job_token(rt, NULL, &len), MONARCH_ERR_INVALID_ARGUMENT, "out");
    CHECK_OK(monarch_runtime_job_token(rt, &buf, &len));
    CHECK(buf && len >= 16, "job token is too short: %zu", len);
    monarch_buffer_free(buf, len);
    /* SLURM jobs: bad handles and arguments (no srun is run). */
    monarch_slurm_job *sj = NULL;
    const char *agent[] = {"monarch", "host", "--listen", "127.0.0.1:0"};
    CHECK_STATUS(monarch_slurm_job_free((monarch_slurm_job *)pm), MONARCH_ERR_INVALID_HANDLE,
                 "proc mesh");
    CHECK_STATUS(monarch_slurm_job_stop((monarch_slurm_job *)rt), MONARCH_ERR_INVALID_HANDLE,
                 "runtime");
    CHECK_STATUS(monarch_slurm_job_host_mesh((monarch_slurm_job *)am, &hm),
                 MONARCH_ERR_INVALID_HANDLE, "actor mesh");
    CHECK_STATUS(monarch_slurm_job_id(NULL, &buf, &len), MONARCH_ERR_INVALID_HANDLE, "NULL");
    CHECK_STATUS(monarch_slurm_job_start((monarch_runtime *)pm, 2, agent, 4, NULL, 0, -1, &sj),
                 MONARCH_ERR_INVALID_HANDLE, "proc mesh");
    CHECK_STATUS(monarch_slurm_job_start(rt, 2, NULL, 0, NULL, 0, -1, &sj),
                 MONARCH_ERR_INVALID_ARGUMENT, "agent_argv is empty");
    CHECK_STATUS(monarch_slurm_job_start(rt, 2, agent, 4, NULL, 1, -1, &sj),
                 MONARCH_ERR_INVALID_ARGUMENT, "srun_args");
    CHECK_STATUS(monarch_slurm_job_start(rt, 2, agent, 4, NULL, 0, -1, NULL),
                 MONARCH_ERR_INVALID_ARGUMENT, "out");
    /* Supervision events: bad handles, NULL out-pointers, nothing queued. */
    CHECK_STATUS(monarch_supervision_next(NULL, 0, &buf, &len), MONARCH_ERR_INVALID_HANDLE,
                 "NULL");
    CHECK_STATUS(monarch_supervision_next((monarch_runtime *)pm, 0, &buf, &len),
                 MONARCH_ERR_INVALID_HANDLE, "runtime");
    CHECK_STATUS(monarch_supervision_next(rt, 0, NULL, &len), MONARCH_ERR_INVALID_ARGUMENT,
                 "out");
    CHECK_STATUS(monarch_supervision_next(rt, 0, &buf, NULL), MONARCH_ERR_INVALID_ARGUMENT,
                 "out_len");
    CHECK_STATUS(monarch_supervision_next(rt, 0, &buf, &len), MONARCH_ERR_TIMEOUT, "");
    CHECK_STATUS(monarch_runtime_set_owner(NULL, "a.1"), MONARCH_ERR_INVALID_HANDLE, "NULL");
    CHECK_STATUS(monarch_runtime_set_owner((monarch_runtime *)am, "a.1"),
                 MONARCH_ERR_INVALID_HANDLE, "actor mesh");
    CHECK_OK(monarch_runtime_set_owner(rt, "nobody.1"));
    CHECK_OK(monarch_runtime_set_owner(rt, NULL));
    /* The wrongly-typed free did not free the proc mesh. */
    CHECK_OK(monarch_proc_mesh_shape(pm, &buf, &len));
    CHECK(buf && len > 0, "proc mesh shape is empty");
    monarch_buffer_free(buf, len);

    /* NULL out-pointers and bad arguments. */
    CHECK_STATUS(monarch_runtime_new(NULL), MONARCH_ERR_INVALID_ARGUMENT, "out");
    CHECK_STATUS(monarch_proc_mesh_shape(pm, NULL, &len), MONARCH_ERR_INVALID_ARGUMENT, "out");
    CHECK_STATUS(monarch_proc_mesh_shape(pm, &buf, NULL), MONARCH_ERR_INVALID_ARGUMENT,
                 "out_len");
    CHECK_STATUS(monarch_actor_mesh_call(am, "get", NULL, 0, MONARCH_CALL_ALL, NULL),
                 MONARCH_ERR_INVALID_ARGUMENT, "out");
    CHECK_STATUS(monarch_actor_mesh_call(am, NULL, NULL, 0, MONARCH_CALL_ALL, &f),
                 MONARCH_ERR_INVALID_ARGUMENT, "method");
    CHECK_STATUS(monarch_actor_mesh_call(am, "get", NULL, 0, 99, &f),
                 MONARCH_ERR_INVALID_ARGUMENT, "mode");
    monarch_bytes bad_part = {NULL, 5};
    CHECK_STATUS(monarch_actor_mesh_call(am, "get", &bad_part, 1, MONARCH_CALL_ALL, &f),
                 MONARCH_ERR_INVALID_ARGUMENT, "NULL");
    CHECK_STATUS(monarch_runtime_fd(rt, NULL), MONARCH_ERR_INVALID_ARGUMENT, "out_fd");
    monarch_actor_mesh *am2 = NULL;
    CHECK_STATUS(monarch_actor_mesh_spawn(pm, "x", "counter", NULL, 0, &am2, NULL),
                 MONARCH_ERR_INVALID_ARGUMENT, "out_ready");
    CHECK_STATUS(monarch_actor_mesh_slice_index(am, "nope", 0, &am2),
                 MONARCH_ERR_INVALID_ARGUMENT, "nope");
    CHECK_STATUS(monarch_actor_mesh_slice_index(am, "hosts", 2, &am2),
                 MONARCH_ERR_INVALID_ARGUMENT, "out of range");
    CHECK_STATUS(monarch_actor_mesh_slice_range(am, "gpus", 0, 2, 0, &am2),
                 MONARCH_ERR_INVALID_ARGUMENT, "step");
    CHECK_STATUS(monarch_actor_mesh_from_ref(rt, (const uint8_t *)"garbage", 7, &am2),
                 MONARCH_ERR_INVALID_ARGUMENT, "");
    /* One runtime per process. */
    monarch_runtime *rt2 = NULL;
    CHECK_STATUS(monarch_runtime_new(&rt2), MONARCH_ERR_INVALID_ARGUMENT, "already");
}
