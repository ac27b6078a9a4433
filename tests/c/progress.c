/* Progress events: an operation the host reports, taken back as events;
 * bad arguments, stale handles and an empty queue. */
#include "check.h"
#include "suites.h"

/* Take every queued event; returns how many, each a non-empty buffer. */
static int drain(int64_t first_timeout_ms) {
    int n = 0;
    int64_t timeout = first_timeout_ms;
    for (;;) {
        uint8_t *buf = NULL;
        size_t len = 0;
        monarch_status s = monarch_progress_next(timeout, &buf, &len);
        if (s == MONARCH_ERR_TIMEOUT) return n;
        CHECK_OK(s);
        if (s != MONARCH_OK) return n;
        CHECK(buf != NULL && len > 8, "event of %zu bytes", len);
        CHECK_OK(monarch_buffer_free(buf, len));
        n++;
        timeout = 0;
    }
}

void test_progress(void) {
    CHECK_OK(monarch_progress_watch(true));
    (void)drain(0);

    monarch_progress *op = NULL;
    CHECK_STATUS(monarch_progress_begin(99, "x", 0, &op), MONARCH_ERR_INVALID_ARGUMENT,
                 "unknown progress kind 99");
    CHECK_STATUS(monarch_progress_begin(4, NULL, 0, &op), MONARCH_ERR_INVALID_ARGUMENT, "label");
    CHECK_STATUS(monarch_progress_begin(4, "x", 0, NULL), MONARCH_ERR_INVALID_ARGUMENT, "out");
    CHECK_OK(monarch_progress_begin(4, "fetch weights", 100, &op));
    CHECK_OK(monarch_progress_set(op, 50, 0));
    CHECK_OK(monarch_progress_set(op, 100, 200));
    CHECK_OK(monarch_progress_free(op));
    CHECK_STATUS(monarch_progress_set(op, 1, 0), MONARCH_ERR_INVALID_HANDLE, "");
    CHECK_STATUS(monarch_progress_free(op), MONARCH_ERR_INVALID_HANDLE, "");

    /* Start, three changes (done, total and done again), the last one. */
    CHECK(drain(HANG_MS) >= 5, "fewer progress events than reported");
    uint8_t *buf = NULL;
    size_t len = 0;
    CHECK_STATUS(monarch_progress_next(0, &buf, &len), MONARCH_ERR_TIMEOUT, "no progress event");
    CHECK_STATUS(monarch_progress_next(0, NULL, &len), MONARCH_ERR_INVALID_ARGUMENT, "out");
    CHECK_STATUS(monarch_progress_next(-5, &buf, &len), MONARCH_ERR_INVALID_ARGUMENT,
                 "timeout_ms");
    CHECK_OK(monarch_progress_watch(false));
}
