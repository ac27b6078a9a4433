/* Calls on the worker procs' counters: gather, call modes, errors,
 * references, a proc exiting mid-call. */

#define _GNU_SOURCE /* memmem */
#include "check.h"
#include "suites.h"

void test_calls(monarch_actor_mesh *am) {
    /* Shapes are flatbuffers; their length is all we look at here. */
    uint8_t *shape = NULL;
    size_t shape_len = 0;
    CHECK_OK(monarch_actor_mesh_shape(am, &shape, &shape_len));
    CHECK(shape && shape_len > 0, "actor mesh shape");
    monarch_buffer_free(shape, shape_len);

    /* Call and gather. */
    EXPECT_INTS(call(am, "get", NULL, 0, MONARCH_CALL_ALL), 7, 7, 7, 7);
    /* All points in one call: a uniform answer is marked as such. */
    monarch_value_mesh *pv = call(am, "get", NULL, 0, MONARCH_CALL_ALL);
    monarch_point_info pts[4];
    size_t npts = 0;
    CHECK_OK(monarch_value_mesh_points(pv, pts, 2, &npts));
    CHECK(npts == 4, "points len %zu", npts);
    CHECK_OK(monarch_value_mesh_points(pv, pts, 4, &npts));
    for (size_t i = 0; i < 4; i++)
        CHECK(!pts[i].is_error && pts[i].nparts == 1 && pts[i].part0_len == 8 &&
                  pts[i].same_as_first == (i > 0) && pts[i].error == NULL,
              "get point %zu", i);
    CHECK_STATUS(monarch_value_mesh_points(pv, NULL, 4, &npts), MONARCH_ERR_INVALID_ARGUMENT,
                 "out");
    if (pv) monarch_value_mesh_free(pv);
    pv = call(am, "rank", NULL, 0, MONARCH_CALL_ALL);
    CHECK_OK(monarch_value_mesh_points(pv, pts, 4, &npts));
    for (size_t i = 0; i < 4; i++) {
        int64_t r = -1;
        if (pts[i].part0_len == 8) memcpy(&r, pts[i].part0, 8);
        CHECK(r == (int64_t)i && !pts[i].same_as_first, "rank point %zu", i);
    }
    if (pv) monarch_value_mesh_free(pv);
    EXPECT_INTS(call(am, "rank", NULL, 0, MONARCH_CALL_ALL), 0, 1, 2, 3);
    monarch_value_mesh *vm = call(am, "env", NULL, 0, MONARCH_CALL_ALL);
    CHECK(vm_len(vm) == 4, "env len");
    for (size_t i = 0; vm && i < 4; i++) {
        const uint8_t *d = NULL;
        size_t l = 0;
        CHECK_OK(monarch_value_mesh_part(vm, i, 0, &d, &l));
        CHECK(l == strlen("from-controller") && memcmp(d, "from-controller", l) == 0,
              "env of proc %zu", i);
    }
    if (vm) monarch_value_mesh_free(vm);
    vm = call(am, "echo", (monarch_bytes[]){{(const uint8_t *)"ab", 2},
                                                                {(const uint8_t *)"", 0}},
                                  2, MONARCH_CALL_ALL);
    CHECK(vm_len(vm) == 4, "echo len");
    for (size_t i = 0; vm && i < 4; i++) {
        bool is_err = true;
        const char *err = NULL;
        size_t np = 0;
        const uint8_t *d = NULL;
        size_t l = 99;
        CHECK_OK(monarch_value_mesh_point(vm, i, &is_err, &err, &np));
        CHECK(!is_err && np == 2, "echo point %zu: err=%d np=%zu", i, is_err, np);
        CHECK_OK(monarch_value_mesh_part(vm, i, 0, &d, &l));
        CHECK(l == 2 && memcmp(d, "ab", 2) == 0, "echo part 0");
        CHECK_OK(monarch_value_mesh_part(vm, i, 1, &d, &l));
        CHECK(l == 0, "echo part 1 len %zu", l);
        CHECK_STATUS(monarch_value_mesh_part(vm, i, 2, &d, &l), MONARCH_ERR_INVALID_ARGUMENT,
                     "out of range");
    }
    CHECK_STATUS(monarch_value_mesh_point(vm, 4, &(bool){0}, &(const char *){0}, &(size_t){0}),
                 MONARCH_ERR_INVALID_ARGUMENT, "out of range");
    if (vm) {
        uint8_t *vs = NULL;
        size_t vs_len = 0;
        CHECK_OK(monarch_value_mesh_shape(vm, &vs, &vs_len));
        CHECK(vs && vs_len > 0, "value mesh shape");
        monarch_buffer_free(vs, vs_len);
        monarch_value_mesh_free(vm);
    }

    /* Give each actor its own value with call_one on 0-d slices:
     * base rank b = 2*h + g gets 7 + 10*b. */
    for (size_t h = 0; h < 2; h++) {
        for (size_t g = 0; g < 2; g++) {
            monarch_actor_mesh *row = NULL, *one = NULL;
            CHECK_OK(monarch_actor_mesh_slice_index(am, "hosts", h, &row));
            CHECK_OK(monarch_actor_mesh_slice_index(row, "gpus", g, &one));
            int64_t by = 10 * (int64_t)(2 * h + g);
            monarch_bytes p = i64_part(&by);
            EXPECT_INTS(call(one, "incr", &p, 1, MONARCH_CALL_ONE), 7 + by);
            monarch_actor_mesh_free(one);
            monarch_actor_mesh_free(row);
        }
    }
    EXPECT_INTS(call(am, "get", NULL, 0, MONARCH_CALL_ALL), 7, 17, 27, 37);
}

void test_call_modes_and_errors(monarch_runtime *rt, monarch_proc_mesh *pm,
                                monarch_actor_mesh *am) {
    /* call_one on 4 actors is an argument error; nothing is sent. */
    monarch_future *f = NULL;
    CHECK_STATUS(monarch_actor_mesh_call(am, "incr", NULL, 0, MONARCH_CALL_ONE, &f),
                 MONARCH_ERR_INVALID_ARGUMENT, "exactly one");

    /* Choose: exactly one actor answers. */
    monarch_value_mesh *vm = call(am, "incr", NULL, 0, MONARCH_CALL_CHOOSE);
    CHECK(vm_len(vm) == 1, "choose answered by %zu actors", vm_len(vm));
    if (vm) monarch_value_mesh_free(vm);
    vm = call(am, "get", NULL, 0, MONARCH_CALL_ALL);
    int64_t sum = 0;
    for (size_t i = 0; i < 4; i++) sum += vm_i64(vm, i);
    CHECK(sum == 7 + 17 + 27 + 37 + 1, "sum after choose: %lld", (long long)sum);
    if (vm) monarch_value_mesh_free(vm);

    /* Broadcast (no future, out may be NULL), then a call sees its effects. */
    int64_t minus = -1;
    monarch_bytes pm1 = i64_part(&minus);
    vm = call(am, "get", NULL, 0, MONARCH_CALL_ALL);
    int64_t before[4];
    for (size_t i = 0; i < 4; i++) before[i] = vm_i64(vm, i);
    if (vm) monarch_value_mesh_free(vm);
    for (int i = 0; i < 100; i++)
        CHECK_OK(monarch_actor_mesh_call(am, "incr", NULL, 0, MONARCH_CALL_BROADCAST, NULL));
    f = (monarch_future *)1;
    CHECK_OK(monarch_actor_mesh_call(am, "incr", &pm1, 1, MONARCH_CALL_BROADCAST, &f));
    CHECK(f == NULL, "broadcast wrote a future");
    EXPECT_INTS(call(am, "get", NULL, 0, MONARCH_CALL_ALL), before[0] + 99, before[1] + 99,
                before[2] + 99, before[3] + 99);

    /* Endpoint errors are error points; the actors still answer after. */
    expect_errors(call(am, "fail", NULL, 0, MONARCH_CALL_ALL), 4, "fail raised", __LINE__);
    expect_errors(call(am, "no_such_endpoint", NULL, 0, MONARCH_CALL_ALL), 4,
                  "no_such_endpoint", __LINE__);
    EXPECT_INTS(call(am, "rank", NULL, 0, MONARCH_CALL_ALL), 0, 1, 2, 3);

    /* Constructor failure: the ready future holds error points; the
     * actors have failed (their owner, this program's top level, hears of
     * it: see main.c), so later calls are refused at once with the
     * failure report. */
    monarch_actor_mesh *bad = NULL;
    monarch_future *ready = NULL;
    CHECK_OK(monarch_actor_mesh_spawn(pm, "bad", "no_such_type", NULL, 0, &bad, &ready));
    expect_errors(finish(ready), 4, "no_such_type", __LINE__);
    monarch_future *refused = NULL;
    CHECK_STATUS(monarch_actor_mesh_call(bad, "get", NULL, 0, MONARCH_CALL_ALL, &refused),
                 MONARCH_ERR_PROC_FAILED, "and all its descendants have failed");
    /* The owner hears of each failed point once: a SupervisionEvent
     * flatbuffer naming the mesh and carrying the constructor's error. */
    for (int i = 0; i < 4; i++) {
        uint8_t *sev = NULL;
        size_t sev_len = 0;
        CHECK_OK(monarch_supervision_next(rt, HANG_MS, &sev, &sev_len));
        CHECK(sev && memmem(sev, sev_len, "no_such_type", 12), "event %d lacks the cause", i);
        if (sev) monarch_buffer_free(sev, sev_len);
    }
    monarch_actor_mesh_free(bad);
}

/* Reference round trip from the same runtime. */
void test_ref_round_trip(monarch_runtime *rt, monarch_actor_mesh *am) {
    uint8_t *ref = NULL;
    size_t ref_len = 0;
    CHECK_OK(monarch_actor_mesh_to_ref(am, &ref, &ref_len));
    monarch_actor_mesh *back = NULL;
    CHECK_OK(monarch_actor_mesh_from_ref(rt, ref, ref_len, &back));
    monarch_buffer_free(ref, ref_len);
    EXPECT_INTS(call(back, "rank", NULL, 0, MONARCH_CALL_ALL), 0, 1, 2, 3);
    monarch_actor_mesh_free(back);
}

/* A proc mesh reference: actors spawn on its procs; it cannot stop them,
   and an actor mesh's reference is not taken for one. */
void test_proc_mesh_ref(monarch_runtime *rt, monarch_proc_mesh *pm, monarch_actor_mesh *am) {
    uint8_t *ref = NULL;
    size_t ref_len = 0;
    CHECK_OK(monarch_proc_mesh_to_ref(pm, &ref, &ref_len));
    monarch_proc_mesh *back = NULL;
    CHECK_OK(monarch_proc_mesh_from_ref(rt, ref, ref_len, &back));
    monarch_buffer_free(ref, ref_len);
    monarch_actor_mesh *echo = NULL;
    monarch_future *ready = NULL;
    CHECK_OK(monarch_actor_mesh_spawn(back, "via_ref", "counter", NULL, 0, &echo, &ready));
    expect_all_ok(finish(ready), 4, __LINE__);
    EXPECT_INTS(call(echo, "rank", NULL, 0, MONARCH_CALL_ALL), 0, 1, 2, 3);
    monarch_actor_mesh_free(echo);
    monarch_future *stopped = NULL;
    CHECK_OK(monarch_proc_mesh_stop(back, &stopped));
    CHECK_OK(monarch_future_wait(stopped, 30000));
    monarch_value_mesh *vm = NULL;
    CHECK(monarch_future_take(stopped, &vm) == MONARCH_ERR_INVALID_ARGUMENT,
          "stopping a proc mesh reference is refused");
    monarch_future_free(stopped);
    monarch_proc_mesh_free(back);
    CHECK_OK(monarch_actor_mesh_to_ref(am, &ref, &ref_len));
    CHECK(monarch_proc_mesh_from_ref(rt, ref, ref_len, &back) == MONARCH_ERR_INVALID_ARGUMENT,
          "an actor mesh reference is not a proc mesh reference");
    monarch_buffer_free(ref, ref_len);
}

/* A proc that exits while its call is in flight fails only its point. */
void test_proc_exit_mid_call(monarch_runtime *rt, monarch_actor_mesh *am) {
    monarch_actor_mesh *row = NULL, *last = NULL;
    CHECK_OK(monarch_actor_mesh_slice_index(am, "hosts", 1, &row));
    CHECK_OK(monarch_actor_mesh_slice_index(row, "gpus", 1, &last));
    double t0 = now_s();
    expect_errors(call(last, "exit", NULL, 0, MONARCH_CALL_ONE), 1, "code 3", __LINE__);
    double dt = now_s() - t0;
    CHECK(dt < 3.0, "the failed point took %.3f s", dt);
    /* The owner (this controller) gets a supervision event ... */
    uint8_t *sev = NULL;
    size_t sev_len = 0;
    CHECK_OK(monarch_supervision_next(rt, HANG_MS, &sev, &sev_len));
    CHECK(sev && memmem(sev, sev_len, "code 3", 6), "the event is not about the exit");
    if (sev) monarch_buffer_free(sev, sev_len);
    /* ... and later calls to a view holding the dead rank fail at once. */
    monarch_future *dead = NULL;
    CHECK_STATUS(monarch_actor_mesh_call(am, "rank", NULL, 0, MONARCH_CALL_ALL, &dead),
                 MONARCH_ERR_PROC_FAILED, "rank 3");
    monarch_actor_mesh *first3 = NULL;
    CHECK_OK(monarch_actor_mesh_flatten(am, "all", &first3));
    monarch_actor_mesh *alive3 = NULL;
    CHECK_OK(monarch_actor_mesh_slice_range(first3, "all", 0, 3, 1, &alive3));
    monarch_value_mesh *vm = call(alive3, "rank", NULL, 0, MONARCH_CALL_ALL);
    CHECK(vm_len(vm) == 3, "len after exit");
    for (size_t i = 0; i < 3; i++) CHECK(vm_i64(vm, i) == (int64_t)i, "rank %zu", i);
    if (vm) monarch_value_mesh_free(vm);
    monarch_actor_mesh_free(alive3);
    monarch_actor_mesh_free(first3);
    monarch_actor_mesh_free(last);
    monarch_actor_mesh_free(row);
}
