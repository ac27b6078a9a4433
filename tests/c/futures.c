/* Futures: wait, poll, take, and the runtime fd. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>

#include "check.h"
#include "suites.h"

void test_future_wait_poll_and_fd(monarch_runtime *rt, monarch_actor_mesh *am) {
    int fd = -1;
    CHECK_OK(monarch_runtime_fd(rt, &fd));
    CHECK(fd >= 0, "runtime fd is %d", fd);
    CHECK_OK(monarch_runtime_clear_fd(rt));
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    CHECK(poll(&pfd, 1, 0) == 0, "fd readable right after clear_fd");

    /* rank 0 sleeps 300 ms before answering: the future is pending. */
    monarch_actor_mesh *one = NULL, *row = NULL;
    CHECK_OK(monarch_actor_mesh_slice_index(am, "hosts", 0, &row));
    CHECK_OK(monarch_actor_mesh_slice_index(row, "gpus", 0, &one));
    int64_t ms = 300;
    monarch_bytes p = i64_part(&ms);
    monarch_future *f = NULL;
    CHECK_OK(monarch_actor_mesh_call(one, "sleep", &p, 1, MONARCH_CALL_ONE, &f));
    CHECK_STATUS(monarch_future_wait(f, 0), MONARCH_ERR_TIMEOUT, "");
    CHECK_STATUS(monarch_future_wait(f, 20), MONARCH_ERR_TIMEOUT, "");
    bool ready = true;
    CHECK_OK(monarch_future_poll(f, &ready));
    CHECK(!ready, "future ready before the actor answered");
    monarch_value_mesh *vm = NULL;
    CHECK_STATUS(monarch_future_take(f, &vm), MONARCH_ERR_INVALID_ARGUMENT, "not complete");

    /* The fd becomes readable when the future completes. */
    int r = poll(&pfd, 1, HANG_MS);
    CHECK(r == 1 && (pfd.revents & POLLIN), "poll(2) on the runtime fd: %d (%s)", r,
          strerror(errno));
    double t0 = now_s();
    ready = false;
    while (!ready && now_s() - t0 < HANG_MS / 1000.0) {
        CHECK_OK(monarch_runtime_clear_fd(rt));
        CHECK_OK(monarch_future_poll(f, &ready));
        if (!ready) poll(&pfd, 1, 100);
    }
    CHECK(ready, "future not ready after the fd woke us");
    CHECK_OK(monarch_future_wait(f, 0));
    CHECK_OK(monarch_future_take(f, &vm));
    CHECK(vm_len(vm) == 1, "sleep value mesh");
    monarch_value_mesh_free(vm);
    CHECK_STATUS(monarch_future_take(f, &vm), MONARCH_ERR_INVALID_ARGUMENT, "already");
    monarch_future_free(f);
    monarch_actor_mesh_free(one);
    monarch_actor_mesh_free(row);
}
