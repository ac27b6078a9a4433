/* this_proc: actors in the controller, served from a thread. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>

#include "check.h"
#include "counter_actor.h"
#include "suites.h"

typedef struct {
    monarch_runtime *rt;
    atomic_int stop;
    int served;
} server;

static void *serve_thread(void *arg) {
    server *sv = arg;
    actor_table t = {0};
    while (!atomic_load(&sv->stop)) {
        monarch_event *ev = NULL;
        monarch_status s = monarch_runtime_next_event(sv->rt, 50, &ev);
        if (s == MONARCH_ERR_TIMEOUT) continue;
        if (s != MONARCH_OK) break;
        sv->served++;
        if (!serve_event(&t, ev)) break;
    }
    free_table(&t);
    return NULL;
}

void test_this_proc(monarch_runtime *rt) {
    server sv = {.rt = rt, .stop = 0, .served = 0};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, serve_thread, &sv) == 0, "pthread_create");

    monarch_proc_mesh *me = NULL;
    CHECK_OK(monarch_runtime_this_proc(rt, &me));
    int64_t start = 40;
    monarch_bytes arg = i64_part(&start);
    monarch_actor_mesh *am = NULL;
    monarch_future *ready = NULL;
    CHECK_OK(monarch_actor_mesh_spawn(me, "local", "counter", &arg, 1, &am, &ready));
    expect_all_ok(finish(ready), 1, __LINE__);

    int64_t two = 2;
    monarch_bytes p = i64_part(&two);
    EXPECT_INTS(call(am, "incr", &p, 1, MONARCH_CALL_ONE), 42);
    EXPECT_INTS(call(am, "get", NULL, 0, MONARCH_CALL_ALL), 42);
    expect_errors(call(am, "fail", NULL, 0, MONARCH_CALL_ONE), 1, "fail raised", __LINE__);

    /* A reference to it, rebuilt and used from the same runtime. */
    uint8_t *ref = NULL;
    size_t ref_len = 0;
    CHECK_OK(monarch_actor_mesh_to_ref(am, &ref, &ref_len));
    monarch_actor_mesh *back = NULL;
    CHECK_OK(monarch_actor_mesh_from_ref(rt, ref, ref_len, &back));
    monarch_buffer_free(ref, ref_len);
    EXPECT_INTS(call(back, "incr", NULL, 0, MONARCH_CALL_ONE), 43);
    monarch_actor_mesh_free(back);

    monarch_future *stopped = NULL;
    CHECK_OK(monarch_actor_mesh_stop(am, &stopped));
    expect_all_ok(finish(stopped), 1, __LINE__);
    expect_errors(call(am, "get", NULL, 0, MONARCH_CALL_ONE), 1, "no actor", __LINE__);

    atomic_store(&sv.stop, 1);
    pthread_join(th, NULL);
    CHECK(sv.served >= 6, "the controller's thread served %d events", sv.served);
    monarch_actor_mesh_free(am);
    monarch_proc_mesh_free(me);
}
