/*
 * The checks of the C ABI test: pass/fail counters, CHECK macros, and
 * helpers that wait for futures and check value meshes. Every check adds
 * one to checks_passed or checks_failed; main.c prints both.
 */
#ifndef ABI_TEST_CHECK_H
#define ABI_TEST_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "monarch.h"

/* Waits are bounded only so a broken library fails instead of hanging. */
#define HANG_MS 30000

extern int checks_passed, checks_failed;

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (cond) {                                                            \
            checks_passed++;                                                   \
        } else {                                                               \
            checks_failed++;                                                   \
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

double now_s(void);

/* Wait for a future, take its value mesh and free the future. */
monarch_value_mesh *finish(monarch_future *f);

/* Call `method` on `am` and finish the future. */
monarch_value_mesh *call(monarch_actor_mesh *am, const char *method, const monarch_bytes *parts,
                         size_t n, uint32_t mode);

size_t vm_len(monarch_value_mesh *vm);

/* The i64 at point `rank`, or INT64_MIN if it is an error or malformed. */
int64_t vm_i64(monarch_value_mesh *vm, size_t rank);

/* Check the value mesh holds exactly `want[0..n]`, then free it. */
void expect_ints(monarch_value_mesh *vm, const int64_t *want, size_t n, int line);
#define EXPECT_INTS(vm, ...)                                                   \
    do {                                                                       \
        const int64_t want_[] = {__VA_ARGS__};                                 \
        expect_ints((vm), want_, sizeof want_ / sizeof want_[0], __LINE__);    \
    } while (0)

/* Check every point is an error whose message contains `needle`; free. */
void expect_errors(monarch_value_mesh *vm, size_t n, const char *needle, int line);

/* Check every one of the `n` points answered without error; free. */
void expect_all_ok(monarch_value_mesh *vm, size_t n, int line);

/* An 8-byte part pointing at `*v`. */
monarch_bytes i64_part(const int64_t *v);

#endif
