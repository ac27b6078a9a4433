/*
 * End-to-end test of the libmonarch C ABI, in one program that is both the
 * controller and the worker:
 *
 *  - started with MONARCH_CONTROLLER set (the bootstrap environment), it is
 *    a worker proc serving a C "counter" actor through the pull API;
 *  - otherwise it is the controller: it spawns 4 procs of itself and checks
 *    calls, slices, errors, handle checking, free(NULL) for every free
 *    function, status names, futures, the runtime fd, this_proc actors
 *    (served from a thread) and stopping.
 *
 * Prints "N passed, M failed" and exits non-zero on any failure.
 * Build: cc -I include tests/c/abi_test.c -L target/debug -lmonarch -lpthread
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "monarch.h"

/* Waits are bounded only so a broken library fails instead of hanging. */
#define HANG_MS 30000

/* ------------------------------------------------------------------------ */
/* The C "counter" actor, shared by the worker procs and this_proc.          */

typedef struct {
    char *key;
    int64_t value;
} counter;

typedef struct {
    counter actors[64];
    size_t n;
} actor_table;

static counter *find_actor(actor_table *t, const char *key) {
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->actors[i].key, key) == 0) return &t->actors[i];
    return NULL;
}

static void remove_actor(actor_table *t, const char *key) {
    for (size_t i = 0; i < t->n; i++) {
        if (strcmp(t->actors[i].key, key) == 0) {
            free(t->actors[i].key);
            t->actors[i] = t->actors[--t->n];
            return;
        }
    }
}

static int read_i64(monarch_event *ev, size_t part, int64_t *out) {
    size_t n = 0;
    if (monarch_event_nparts(ev, &n) != MONARCH_OK || n <= part) return 0;
    const uint8_t *data = NULL;
    size_t len = 0;
    if (monarch_event_part(ev, part, &data, &len) != MONARCH_OK || len != 8) return -1;
    memcpy(out, data, 8); /* little-endian host assumed (x86-64, aarch64) */
    return 1;
}

static void reply_i64(monarch_event *ev, int64_t v) {
    monarch_bytes b = {(const uint8_t *)&v, sizeof v};
    if (monarch_event_reply(ev, &b, 1) != MONARCH_OK)
        fprintf(stderr, "worker: reply failed: %s\n", monarch_last_error());
}

static void reply_err(monarch_event *ev, const char *msg) {
    if (monarch_event_reply_error(ev, msg, NULL, 0) != MONARCH_OK)
        fprintf(stderr, "worker: reply_error failed: %s\n", monarch_last_error());
}

/* Whether `h` (from monarch_runtime_next_event_header) says what the
 * per-field getters say about `ev`. */
static int header_matches(monarch_event *ev, const monarch_event_header *h) {
    uint32_t kind = 0;
    const char *actor = NULL, *method = NULL, *type = NULL;
    size_t n = 0;
    bool wants = false;
    if (monarch_event_info(ev, &kind, &actor, &method, &type) != MONARCH_OK) return 0;
    if (monarch_event_nparts(ev, &n) != MONARCH_OK) return 0;
    if (monarch_event_wants_reply(ev, &wants) != MONARCH_OK) return 0;
    if (kind != h->kind || n != h->nparts || wants != h->wants_reply) return 0;
    if (strcmp(actor, h->actor) || strcmp(method, h->method) || strcmp(type, h->type_name))
        return 0;
    if (n == 0) return h->part0 == NULL && h->part0_len == 0;
    const uint8_t *data = NULL;
    size_t len = 0;
    if (monarch_event_part(ev, 0, &data, &len) != MONARCH_OK) return 0;
    return data == h->part0 && len == h->part0_len;
}

/* Handle one event; returns 0 when the proc must stop. */
static int serve_event(actor_table *t, monarch_event *ev) {
    uint32_t kind = 0;
    const char *actor = NULL, *method = NULL, *type = NULL;
    if (monarch_event_info(ev, &kind, &actor, &method, &type) != MONARCH_OK) {
        fprintf(stderr, "worker: event_info failed: %s\n", monarch_last_error());
        monarch_event_free(ev);
        return 1;
    }
    char msg[256];
    int64_t arg = 0;
    switch (kind) {
    case MONARCH_EVENT_SPAWN:
        if (strcmp(type, "counter") != 0) {
            snprintf(msg, sizeof msg, "C worker has no actor type '%s'", type);
            reply_err(ev, msg);
        } else if (read_i64(ev, 0, &arg) < 0) {
            reply_err(ev, "counter start must be 8 bytes");
        } else if (t->n == sizeof t->actors / sizeof t->actors[0]) {
            reply_err(ev, "too many actors");
        } else {
            t->actors[t->n].key = strdup(actor);
            t->actors[t->n].value = arg;
            t->n++;
            monarch_event_reply(ev, NULL, 0);
        }
        break;
    case MONARCH_EVENT_MESSAGE: {
        counter *c = find_actor(t, actor);
        if (!c) {
            reply_err(ev, "no such actor in the C worker");
        } else if (strcmp(method, "incr") == 0) {
            int r = read_i64(ev, 0, &arg);
            if (r < 0) {
                reply_err(ev, "incr takes 8 bytes");
            } else {
                c->value += r ? arg : 1;
                reply_i64(ev, c->value);
            }
        } else if (strcmp(method, "get") == 0) {
            /* Answer and free in one call. */
            int64_t v = c->value;
            if (monarch_event_reply_one_and_free(ev, (const uint8_t *)&v, sizeof v) != MONARCH_OK)
                fprintf(stderr, "worker: reply_one_and_free failed: %s\n", monarch_last_error());
            return 1;
        } else if (strcmp(method, "rank") == 0) {
            uint64_t rank = 0;
            const uint8_t *shape = NULL;
            size_t shape_len = 0;
            monarch_event_rank(ev, &rank, &shape, &shape_len);
            reply_i64(ev, (int64_t)rank);
        } else if (strcmp(method, "echo") == 0) {
            size_t n = 0;
            monarch_event_nparts(ev, &n);
            monarch_bytes parts[8];
            if (n > 8) n = 8;
            for (size_t i = 0; i < n; i++)
                monarch_event_part(ev, i, &parts[i].ptr, &parts[i].len);
            monarch_event_reply(ev, parts, n);
        } else if (strcmp(method, "env") == 0) {
            /* The value of ABI_TEST_ENV, passed by the controller at spawn. */
            const char *v = getenv("ABI_TEST_ENV");
            if (!v) {
                reply_err(ev, "ABI_TEST_ENV is not set");
            } else {
                monarch_bytes b = {(const uint8_t *)v, strlen(v)};
                monarch_event_reply(ev, &b, 1);
            }
        } else if (strcmp(method, "sleep") == 0) {
            /* Reply after `arg` milliseconds (to have a pending future). */
            if (read_i64(ev, 0, &arg) > 0) usleep((useconds_t)arg * 1000);
            reply_i64(ev, c->value);
        } else if (strcmp(method, "fail") == 0) {
            reply_err(ev, "counter.fail raised as requested");
        } else if (strcmp(method, "exit") == 0) {
            _exit(3);
        } else {
            snprintf(msg, sizeof msg, "counter has no endpoint '%s'", method);
            reply_err(ev, msg);
        }
        break;
    }
    case MONARCH_EVENT_STOP_ACTOR:
        remove_actor(t, actor);
        monarch_event_reply(ev, NULL, 0);
        break;
    case MONARCH_EVENT_STOP_PROC:
        monarch_event_free(ev);
        return 0;
    default:
        fprintf(stderr, "worker: unknown event kind %u\n", kind);
    }
    monarch_event_free(ev);
    return 1;
}

static void free_table(actor_table *t) {
    while (t->n) remove_actor(t, t->actors[0].key);
}

static int worker_main(void) {
    monarch_runtime *rt = NULL;
    if (monarch_runtime_new(&rt) != MONARCH_OK) {
        fprintf(stderr, "worker: runtime_new failed: %s\n", monarch_last_error());
        return 1;
    }
    bool is_worker = false;
    monarch_runtime_is_worker(rt, &is_worker);
    if (!is_worker) {
        fprintf(stderr, "worker: runtime does not think it is a worker\n");
        return 1;
    }
    actor_table t = {0};
    for (;;) {
        monarch_event *ev = NULL;
        monarch_event_header h;
        monarch_status s = monarch_runtime_next_event_header(rt, -1, &ev, &h);
        if (s == MONARCH_ERR_STOPPED) break;
        if (s != MONARCH_OK) {
            fprintf(stderr, "worker: next_event_header: %d %s\n", s, monarch_last_error());
            break;
        }
        if (!header_matches(ev, &h)) {
            /* Makes the controller's checks of this call fail. */
            if (h.wants_reply) reply_err(ev, "event header disagrees with the getters");
            monarch_event_free(ev);
            continue;
        }
        if (!serve_event(&t, ev)) break;
    }
    free_table(&t);
    monarch_runtime_free(rt);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Controller-side checks.                                                   */

static int passed, failed;

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (cond) {                                                            \
            passed++;                                                          \
        } else {                                                               \
            failed++;                                                          \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);    \
            fprintf(stderr, __VA_ARGS__);                                      \
            fprintf(stderr, "\n");                                             \
        }                                                                      \
    } while (0)

/* Check a call returned OK, showing the library's message otherwise. */
#define CHECK_OK(expr)                                                         \
    do {                                                                       \
        monarch_status s_ = (expr);                                            \
        CHECK(s_ == MONARCH_OK, "status %d: %s", s_, monarch_last_error());    \
    } while (0)

#define CHECK_STATUS(expr, want, needle)                                       \
    do {                                                                       \
        monarch_status s_ = (expr);                                            \
        const char *e_ = monarch_last_error();                                 \
        CHECK(s_ == (want) && e_ && strstr(e_, (needle)),                      \
              "status %d (want %d), last_error '%s' (want it to contain '%s')", \
              s_, (want), e_ ? e_ : "(null)", (needle));                      \
    } while (0)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Wait for a future, take its value mesh and free the future. */
static monarch_value_mesh *finish(monarch_future *f) {
    monarch_value_mesh *vm = NULL;
    if (!f) return NULL;
    monarch_status s = monarch_future_wait(f, HANG_MS);
    CHECK(s == MONARCH_OK, "future_wait: %d %s", s, monarch_last_error());
    if (s == MONARCH_OK) {
        s = monarch_future_take(f, &vm);
        CHECK(s == MONARCH_OK, "future_take: %d %s", s, monarch_last_error());
    }
    monarch_future_free(f);
    return s == MONARCH_OK ? vm : NULL;
}

static monarch_value_mesh *call(monarch_actor_mesh *am, const char *method,
                                const monarch_bytes *parts, size_t n, uint32_t mode) {
    monarch_future *f = NULL;
    monarch_status s = monarch_actor_mesh_call(am, method, parts, n, mode, &f);
    CHECK(s == MONARCH_OK, "call %s: %d %s", method, s, monarch_last_error());
    return s == MONARCH_OK ? finish(f) : NULL;
}

static size_t vm_len(monarch_value_mesh *vm) {
    size_t n = 0;
    if (vm) CHECK_OK(monarch_value_mesh_len(vm, &n));
    return n;
}

/* The i64 at point `rank`, or INT64_MIN if it is an error or malformed. */
static int64_t vm_i64(monarch_value_mesh *vm, size_t rank) {
    bool is_err = true;
    const char *err = NULL;
    size_t nparts = 0;
    if (!vm || monarch_value_mesh_point(vm, rank, &is_err, &err, &nparts) != MONARCH_OK)
        return INT64_MIN;
    if (is_err || nparts != 1) {
        fprintf(stderr, "  point %zu: error=%d '%s' nparts=%zu\n", rank, is_err,
                err ? err : "", nparts);
        return INT64_MIN;
    }
    const uint8_t *data = NULL;
    size_t len = 0;
    if (monarch_value_mesh_part(vm, rank, 0, &data, &len) != MONARCH_OK || len != 8)
        return INT64_MIN;
    int64_t v;
    memcpy(&v, data, 8);
    return v;
}

/* Check the value mesh holds exactly `want[0..n]`, then free it. */
static void expect_ints(monarch_value_mesh *vm, const int64_t *want, size_t n, int line) {
    size_t len = vm_len(vm);
    CHECK(len == n, "line %d: value mesh has %zu points, want %zu", line, len, n);
    for (size_t i = 0; i < n && i < len; i++) {
        int64_t got = vm_i64(vm, i);
        CHECK(got == want[i], "line %d: point %zu is %lld, want %lld", line, i,
              (long long)got, (long long)want[i]);
    }
    if (vm) monarch_value_mesh_free(vm);
}
#define EXPECT_INTS(vm, ...)                                                   \
    do {                                                                       \
        const int64_t want_[] = {__VA_ARGS__};                                 \
        expect_ints((vm), want_, sizeof want_ / sizeof want_[0], __LINE__);    \
    } while (0)

/* Check every point is an error whose message contains `needle`; free. */
static void expect_errors(monarch_value_mesh *vm, size_t n, const char *needle, int line) {
    size_t len = vm_len(vm);
    CHECK(len == n, "line %d: value mesh has %zu points, want %zu", line, len, n);
    for (size_t i = 0; i < len; i++) {
        bool is_err = false;
        const char *err = NULL;
        size_t nparts = 99;
        CHECK_OK(monarch_value_mesh_point(vm, i, &is_err, &err, &nparts));
        CHECK(is_err && err && strstr(err, needle),
              "line %d: point %zu: is_error=%d message '%s' (want '%s')", line, i, is_err,
              err ? err : "(null)", needle);
        CHECK(nparts == 0, "line %d: error point has %zu parts", line, nparts);
    }
    if (vm) monarch_value_mesh_free(vm);
}

static void expect_all_ok(monarch_value_mesh *vm, size_t n, int line) {
    size_t len = vm_len(vm);
    CHECK(len == n, "line %d: value mesh has %zu points, want %zu", line, len, n);
    for (size_t i = 0; i < len; i++) {
        bool is_err = true;
        const char *err = NULL;
        size_t nparts = 0;
        CHECK_OK(monarch_value_mesh_point(vm, i, &is_err, &err, &nparts));
        CHECK(!is_err && err == NULL, "line %d: point %zu failed: %s", line, i,
              err ? err : "(null)");
    }
    if (vm) monarch_value_mesh_free(vm);
}

static monarch_bytes i64_part(const int64_t *v) {
    monarch_bytes b = {(const uint8_t *)v, sizeof *v};
    return b;
}

/* ------------------------------------------------------------------------ */
/* this_proc: actors in the controller, served from a thread.                */

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

static void test_this_proc(monarch_runtime *rt) {
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

/* ------------------------------------------------------------------------ */

/* The i64 of a one-point value mesh taken from a port future, then freed. */
static int64_t port_value(monarch_future *f) {
    monarch_value_mesh *vm = finish(f);
    CHECK(vm_len(vm) == 1, "port value mesh has %zu points", vm_len(vm));
    int64_t v = vm_i64(vm, 0);
    if (vm) monarch_value_mesh_free(vm);
    return v;
}

static void test_ports(monarch_runtime *rt, monarch_actor_mesh *am) {
    /* A channel: send to its reference, receive in order. */
    monarch_port_receiver *rx = NULL;
    CHECK_OK(monarch_port_open(rt, false, &rx));
    uint8_t *ref = NULL;
    size_t ref_len = 0;
    CHECK_OK(monarch_port_receiver_ref(rx, &ref, &ref_len));
    monarch_future *first = NULL;
    CHECK_OK(monarch_port_receiver_recv(rx, &first));
    for (int64_t i = 40; i < 42; i++) {
        monarch_bytes p = i64_part(&i);
        CHECK_OK(monarch_port_send(rt, ref, ref_len, &p, 1));
    }
    CHECK(port_value(first) == 40, "first port value");
    monarch_future *f = NULL;
    CHECK_OK(monarch_port_receiver_recv(rx, &f));
    CHECK(port_value(f) == 41, "second port value");
    /* An error sent to the port is an error point. */
    CHECK_OK(monarch_port_send_error(rt, ref, ref_len, "port says no", NULL, 0));
    CHECK_OK(monarch_port_receiver_recv(rx, &f));
    expect_errors(finish(f), 1, "port says no", __LINE__);
    /* Replies of a cast sent to the port: one per actor (ranks 0..3). */
    CHECK_OK(monarch_actor_mesh_send(am, "rank", NULL, 0, ref, ref_len, MONARCH_CALL_ALL));
    int64_t sum = 0;
    for (int i = 0; i < 4; i++) {
        CHECK_OK(monarch_port_receiver_recv(rx, &f));
        sum += port_value(f);
    }
    CHECK(sum == 6, "ranks sent to the port sum to %lld", (long long)sum);
    CHECK_STATUS(monarch_actor_mesh_send(am, "rank", NULL, 0, ref, ref_len,
                                         MONARCH_CALL_BROADCAST),
                 MONARCH_ERR_INVALID_ARGUMENT, "MONARCH_CALL_ALL");
    monarch_buffer_free(ref, ref_len);
    CHECK_OK(monarch_port_receiver_free(rx));

    /* stream(): one value per actor, as they arrive. */
    CHECK_OK(monarch_actor_mesh_stream(am, "rank", NULL, 0, &rx));
    sum = 0;
    for (int i = 0; i < 4; i++) {
        CHECK_OK(monarch_port_receiver_recv(rx, &f));
        sum += port_value(f);
    }
    CHECK(sum == 6, "streamed ranks sum to %lld", (long long)sum);
    /* Every point answered: the stream is closed. */
    CHECK_OK(monarch_port_receiver_recv(rx, &f));
    CHECK_OK(monarch_future_wait(f, HANG_MS));
    monarch_value_mesh *vm = NULL;
    CHECK_STATUS(monarch_future_take(f, &vm), MONARCH_ERR_INVALID_ARGUMENT, "closed");
    monarch_future_free(f);
    CHECK_OK(monarch_port_receiver_free(rx));

    /* Bad handles and arguments. */
    CHECK_STATUS(monarch_port_receiver_recv(rx, &f), MONARCH_ERR_INVALID_HANDLE, "stale");
    CHECK_STATUS(monarch_port_receiver_free(rx), MONARCH_ERR_INVALID_HANDLE, "port receiver");
    CHECK_STATUS(monarch_port_receiver_ref(NULL, &ref, &ref_len), MONARCH_ERR_INVALID_HANDLE,
                 "NULL");
    CHECK_STATUS(monarch_port_receiver_recv((monarch_port_receiver *)am, &f),
                 MONARCH_ERR_INVALID_HANDLE, "actor mesh");
    CHECK_STATUS(monarch_port_open(NULL, false, &rx), MONARCH_ERR_INVALID_HANDLE, "NULL");
    CHECK_STATUS(monarch_port_open(rt, false, NULL), MONARCH_ERR_INVALID_ARGUMENT, "out");
    CHECK_STATUS(monarch_port_send(rt, (const uint8_t *)"garbage", 7, NULL, 0),
                 MONARCH_ERR_INVALID_ARGUMENT, "port reference");
    CHECK_STATUS(monarch_port_send((monarch_runtime *)am, (const uint8_t *)"garbage", 7, NULL, 0),
                 MONARCH_ERR_INVALID_HANDLE, "actor mesh");
    CHECK_STATUS(monarch_port_send_error(rt, NULL, 0, "x", NULL, 0),
                 MONARCH_ERR_INVALID_ARGUMENT, "");
    CHECK_STATUS(monarch_actor_mesh_stream(NULL, "rank", NULL, 0, &rx),
                 MONARCH_ERR_INVALID_HANDLE, "NULL");
    CHECK_STATUS(monarch_actor_mesh_stream(am, "rank", NULL, 0, NULL),
                 MONARCH_ERR_INVALID_ARGUMENT, "out");
    CHECK_STATUS(monarch_event_take_port(NULL, &ref, &ref_len), MONARCH_ERR_INVALID_HANDLE,
                 "NULL");
}

static void test_bad_handles_and_args(monarch_runtime *rt, monarch_proc_mesh *pm,
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

/* Every free function takes NULL as a no-op returning MONARCH_OK (and
 * leaves no error behind); a stale handle is still an error. */
static void test_free_null(monarch_runtime *rt) {
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
static void test_status_names(void) {
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

/* The data plane's C ABI: a buffer registered here, read back through a
 * handle rebuilt from its descriptor bytes, then bad handles and bad
 * arguments. (Transfers between procs are tested in rdma/tests/rdma.rs and
 * bindings/python/tests/test_rdma.py.) */
static void test_rdma(monarch_runtime *rt, monarch_actor_mesh *am) {
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

static void test_future_wait_poll_and_fd(monarch_runtime *rt, monarch_actor_mesh *am) {
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

/* Hardening of inputs: names, mesh sizes, timeouts and RDMA ranges the
 * library cannot honour fail that one call with INVALID_ARGUMENT, and the
 * mesh keeps answering. */
static void test_input_limits(monarch_runtime *rt, monarch_proc_mesh *pm,
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

    /* Slices: by index, by range, negative bounds, slices of proc meshes. */
    monarch_actor_mesh *s = NULL;
    CHECK_OK(monarch_actor_mesh_slice_index(am, "hosts", 1, &s));
    EXPECT_INTS(call(s, "get", NULL, 0, MONARCH_CALL_ALL), 27, 37);
    EXPECT_INTS(call(s, "rank", NULL, 0, MONARCH_CALL_ALL), 0, 1);
    monarch_actor_mesh_free(s);
    CHECK_OK(monarch_actor_mesh_slice_range(am, "gpus", 1, MONARCH_SLICE_END, 1, &s));
    EXPECT_INTS(call(s, "get", NULL, 0, MONARCH_CALL_ALL), 17, 37);
    monarch_actor_mesh_free(s);
    CHECK_OK(monarch_actor_mesh_slice_range(am, "hosts", -1, MONARCH_SLICE_END, 1, &s));
    EXPECT_INTS(call(s, "get", NULL, 0, MONARCH_CALL_ALL), 27, 37);
    monarch_actor_mesh_free(s);
    CHECK_OK(monarch_actor_mesh_slice_range(am, "gpus", 0, 0, 1, &s));
    vm = call(s, "get", NULL, 0, MONARCH_CALL_ALL); /* empty slice: no points */
    CHECK(vm && vm_len(vm) == 0, "empty slice answered with %zu points", vm_len(vm));
    if (vm) monarch_value_mesh_free(vm);
    monarch_actor_mesh_free(s);
    monarch_proc_mesh *ps = NULL;
    CHECK_OK(monarch_proc_mesh_slice_index(pm, "hosts", 0, &ps));
    monarch_proc_mesh *ps2 = NULL;
    CHECK_OK(monarch_proc_mesh_slice_range(ps, "gpus", 1, 2, 1, &ps2));
    CHECK_OK(monarch_proc_mesh_shape(ps2, &shape, &shape_len));
    monarch_buffer_free(shape, shape_len);
    monarch_proc_mesh_free(ps2);
    monarch_proc_mesh_free(ps);

    /* Geometry: flatten, rename, split (actor and proc meshes). */
    monarch_actor_mesh *flat = NULL, *g2 = NULL, *g3 = NULL;
    CHECK_OK(monarch_actor_mesh_flatten(am, "all", &flat));
    EXPECT_INTS(call(flat, "get", NULL, 0, MONARCH_CALL_ALL), 7, 17, 27, 37);
    EXPECT_INTS(call(flat, "rank", NULL, 0, MONARCH_CALL_ALL), 0, 1, 2, 3);
    CHECK_STATUS(monarch_actor_mesh_flatten(am, "", &g2), MONARCH_ERR_INVALID_ARGUMENT,
                 "must not be empty");
    const char *split_names[] = {"x", "y"};
    size_t split_sizes[] = {2, MONARCH_SPLIT_INFER};
    CHECK_OK(monarch_actor_mesh_split(flat, "all", split_names, split_sizes, 2, &g2));
    CHECK_OK(monarch_actor_mesh_slice_index(g2, "x", 1, &g3));
    EXPECT_INTS(call(g3, "get", NULL, 0, MONARCH_CALL_ALL), 27, 37);
    EXPECT_INTS(call(g3, "rank", NULL, 0, MONARCH_CALL_ALL), 0, 1);
    monarch_actor_mesh_free(g3);
    monarch_actor_mesh_free(g2);
    size_t bad_sizes[] = {3, MONARCH_SPLIT_INFER};
    CHECK_STATUS(monarch_actor_mesh_split(flat, "all", split_names, bad_sizes, 2, &g2),
                 MONARCH_ERR_INVALID_ARGUMENT, "cannot be split");
    CHECK_STATUS(monarch_actor_mesh_split(flat, "gpus", split_names, split_sizes, 2, &g2),
                 MONARCH_ERR_INVALID_ARGUMENT, "no dimension 'gpus'");
    monarch_actor_mesh_free(flat);
    const char *from[] = {"hosts", "gpus"}, *to[] = {"gpus", "tp"};
    CHECK_OK(monarch_actor_mesh_rename(am, from, to, 2, &g2));
    CHECK_OK(monarch_actor_mesh_slice_index(g2, "tp", 1, &g3));
    EXPECT_INTS(call(g3, "get", NULL, 0, MONARCH_CALL_ALL), 17, 37);
    monarch_actor_mesh_free(g3);
    monarch_actor_mesh_free(g2);
    CHECK_STATUS(monarch_actor_mesh_rename(am, to + 1, from, 1, &g2),
                 MONARCH_ERR_INVALID_ARGUMENT, "no dimension 'tp'");
    CHECK_STATUS(monarch_actor_mesh_rename(am, from, to, 1, &g2), MONARCH_ERR_INVALID_ARGUMENT,
                 "'gpus' twice");
    monarch_proc_mesh *pf = NULL, *pr = NULL, *psp = NULL;
    CHECK_OK(monarch_proc_mesh_flatten(pm, "all", &pf));
    CHECK_OK(monarch_proc_mesh_rename(pf, (const char *[]){"all"}, (const char *[]){"procs"}, 1,
                                      &pr));
    CHECK_OK(monarch_proc_mesh_split(pr, "procs", split_names, split_sizes, 2, &psp));
    CHECK_STATUS(monarch_proc_mesh_split(pr, "procs", split_names, bad_sizes, 2, &ps),
                 MONARCH_ERR_INVALID_ARGUMENT, "multiply to 4");
    CHECK_STATUS(monarch_proc_mesh_flatten(NULL, "x", &ps), MONARCH_ERR_INVALID_HANDLE, "NULL");
    CHECK_OK(monarch_proc_mesh_free(psp));
    CHECK_OK(monarch_proc_mesh_free(pr));
    CHECK_OK(monarch_proc_mesh_free(pf));

    /* call_one on 4 actors is an argument error; nothing is sent. */
    monarch_future *f = NULL;
    CHECK_STATUS(monarch_actor_mesh_call(am, "incr", NULL, 0, MONARCH_CALL_ONE, &f),
                 MONARCH_ERR_INVALID_ARGUMENT, "exactly one");

    /* Choose: exactly one actor answers. */
    vm = call(am, "incr", NULL, 0, MONARCH_CALL_CHOOSE);
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

    /* Constructor failure: the ready future holds error points, later
     * calls are answered with an error by the runtime. */
    monarch_actor_mesh *bad = NULL;
    CHECK_OK(monarch_actor_mesh_spawn(pm, "bad", "no_such_type", NULL, 0, &bad, &ready));
    expect_errors(finish(ready), 4, "no_such_type", __LINE__);
    expect_errors(call(bad, "get", NULL, 0, MONARCH_CALL_ALL), 4, "failed", __LINE__);
    monarch_actor_mesh_free(bad);

    test_bad_handles_and_args(rt, pm, am);
    test_ports(rt, am);
    test_rdma(rt, am);
    test_future_wait_poll_and_fd(rt, am);
    test_this_proc(rt);
    test_input_limits(rt, pm, am);

    /* Reference round trip from the same runtime. */
    uint8_t *ref = NULL;
    size_t ref_len = 0;
    CHECK_OK(monarch_actor_mesh_to_ref(am, &ref, &ref_len));
    monarch_actor_mesh *back = NULL;
    CHECK_OK(monarch_actor_mesh_from_ref(rt, ref, ref_len, &back));
    monarch_buffer_free(ref, ref_len);
    EXPECT_INTS(call(back, "rank", NULL, 0, MONARCH_CALL_ALL), 0, 1, 2, 3);
    monarch_actor_mesh_free(back);

    /* A proc that exits while its call is in flight fails only its point. */
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
    CHECK(sev && sev_len > 0, "empty supervision event");
    monarch_buffer_free(sev, sev_len);
    /* ... and later calls to a view holding the dead rank fail at once. */
    monarch_future *dead = NULL;
    CHECK_STATUS(monarch_actor_mesh_call(am, "rank", NULL, 0, MONARCH_CALL_ALL, &dead),
                 MONARCH_ERR_PROC_FAILED, "rank 3");
    monarch_actor_mesh *first3 = NULL;
    CHECK_OK(monarch_actor_mesh_flatten(am, "all", &first3));
    monarch_actor_mesh *alive3 = NULL;
    CHECK_OK(monarch_actor_mesh_slice_range(first3, "all", 0, 3, 1, &alive3));
    vm = call(alive3, "rank", NULL, 0, MONARCH_CALL_ALL);
    CHECK(vm_len(vm) == 3, "len after exit");
    for (size_t i = 0; i < 3; i++) CHECK(vm_i64(vm, i) == (int64_t)i, "rank %zu", i);
    if (vm) monarch_value_mesh_free(vm);
    monarch_actor_mesh_free(alive3);
    monarch_actor_mesh_free(first3);
    monarch_actor_mesh_free(last);
    monarch_actor_mesh_free(row);

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

    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

int main(void) {
    if (getenv("MONARCH_CONTROLLER")) return worker_main();
    return controller_main();
}
