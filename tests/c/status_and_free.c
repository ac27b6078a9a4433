/* Status names and free(NULL) for every free function. */

#include "check.h"
#include "suites.h"

/* Every free function takes NULL as a no-op returning MONARCH_OK (and
 * leaves no error behind); a stale handle is still an error. */
void test_free_null(monarch_runtime *rt) {
    CHECK_OK(monarch_runtime_free(NULL));
    CHECK_OK(monarch_proc_mesh_free(NULL));
    CHECK_OK(monarch_actor_mesh_free(NULL));
    CHECK_OK(monarch_future_free(NULL));
    CHECK_OK(monarch_value_mesh_free(NULL));
    CHECK_OK(monarch_event_free(NULL));
    CHECK_OK(monarch_port_receiver_free(NULL));
    CHECK_OK(monarch_host_mesh_free(NULL));
    CHECK_OK(monarch_rdma_buffer_free(NULL));
    CHECK_OK(monarch_slurm_job_free(NULL));
    CHECK_OK(monarch_progress_free(NULL));
    CHECK_OK(monarch_buffer_free(NULL, 0));
    CHECK_OK(monarch_buffer_free(NULL, 16));
    /* Freeing NULL did not free this process's runtime. */
    bool is_worker = true;
    CHECK_OK(monarch_runtime_is_worker(rt, &is_worker));
    monarch_runtime *rt2 = NULL;
    CHECK_STATUS(monarch_runtime_new(&rt2), MONARCH_ERR_INVALID_ARGUMENT, "already");
    /* Answering is not freeing: a NULL event cannot be answered. */
    CHECK_STATUS(monarch_event_reply_one_and_free(NULL, NULL, 0), MONARCH_ERR_INVALID_HANDLE,
                 "NULL");
}

/* monarch_status_name: every code by its name, unknown codes as one name. */
void test_status_names(void) {
    static const struct {
        monarch_status code;
        const char *name;
    } names[] = {
        {MONARCH_OK, "MONARCH_OK"},
        {MONARCH_ERR_INVALID_ARGUMENT, "MONARCH_ERR_INVALID_ARGUMENT"},
        {MONARCH_ERR_INVALID_HANDLE, "MONARCH_ERR_INVALID_HANDLE"},
        {MONARCH_ERR_TIMEOUT, "MONARCH_ERR_TIMEOUT"},
        {MONARCH_ERR_PROC_FAILED, "MONARCH_ERR_PROC_FAILED"},
        {MONARCH_ERR_STOPPED, "MONARCH_ERR_STOPPED"},
        {MONARCH_ERR_IO, "MONARCH_ERR_IO"},
        {MONARCH_ERR_PANIC, "MONARCH_ERR_PANIC"},
        {MONARCH_ERR_INTERNAL, "MONARCH_ERR_INTERNAL"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *got = monarch_status_name(names[i].code);
        CHECK(got && strcmp(got, names[i].name) == 0, "status %d is named '%s', not '%s'",
              names[i].code, got ? got : "(null)", names[i].name);
    }
    const monarch_status unknown[] = {-1, 9, 1000};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        const char *got = monarch_status_name(unknown[i]);
        CHECK(got && strcmp(got, "MONARCH_ERR_UNKNOWN") == 0, "unknown status %d is named '%s'",
              unknown[i], got ? got : "(null)");
    }
    /* A static string: the same pointer every time. */
    CHECK(monarch_status_name(MONARCH_ERR_TIMEOUT) == monarch_status_name(MONARCH_ERR_TIMEOUT),
          "status names are not static");
}
