/* The counters and value-mesh helpers declared in check.h. */
#define _GNU_SOURCE
#include <time.h>

#include "check.h"

int checks_passed, checks_failed;

double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

monarch_value_mesh *finish(monarch_future *f) {
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

monarch_value_mesh *call(monarch_actor_mesh *am, const char *method,
                         const monarch_bytes *parts, size_t n, uint32_t mode) {
    monarch_future *f = NULL;
    monarch_status s = monarch_actor_mesh_call(am, method, parts, n, mode, &f);
    CHECK(s == MONARCH_OK, "call %s: %d %s", method, s, monarch_last_error());
    return s == MONARCH_OK ? finish(f) : NULL;
}

size_t vm_len(monarch_value_mesh *vm) {
    size_t n = 0;
    if (vm) CHECK_OK(monarch_value_mesh_len(vm, &n));
    return n;
}

int64_t vm_i64(monarch_value_mesh *vm, size_t rank) {
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

void expect_ints(monarch_value_mesh *vm, const int64_t *want, size_t n, int line) {
    size_t len = vm_len(vm);
    CHECK(len == n, "line %d: value mesh has %zu points, want %zu", line, len, n);
    for (size_t i = 0; i < n && i < len; i++) {
        int64_t got = vm_i64(vm, i);
        CHECK(got == want[i], "line %d: point %zu is %lld, want %lld", line, i,
              (long long)got, (long long)want[i]);
    }
    if (vm) monarch_value_mesh_free(vm);
}

void expect_errors(monarch_value_mesh *vm, size_t n, const char *needle, int line) {
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

void expect_all_ok(monarch_value_mesh *vm, size_t n, int line) {
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

monarch_bytes i64_part(const int64_t *v) {
    monarch_bytes b = {(const uint8_t *)v, sizeof *v};
    return b;
}
