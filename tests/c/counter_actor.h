/*
 * The C "counter" actor, served through the pull API: by the worker procs
 * (worker_main) and by a thread of the controller (this_proc.c).
 *
 * Spawned as type "counter" from an optional 8-byte i64 start value.
 * Endpoints: "incr" (by its 8-byte argument, or 1) and "get" answer the
 * value; "rank" the message rank; "echo" its parts; "env" the worker's
 * ABI_TEST_ENV; "sleep" answers after its argument in milliseconds;
 * "fail" answers an error; "exit" ends the proc with code 3.
 */
#ifndef ABI_TEST_COUNTER_ACTOR_H
#define ABI_TEST_COUNTER_ACTOR_H

#include <stddef.h>
#include <stdint.h>

#include "monarch.h"

typedef struct {
    char *key;
    int64_t value;
} counter;

typedef struct {
    counter actors[64];
    size_t n;
} actor_table;

/* Handle one event; returns 0 when the proc must stop. */
int serve_event(actor_table *t, monarch_event *ev);

/* Free every actor of `t`. */
void free_table(actor_table *t);

/* The worker proc's main: serve events until the proc is stopped. */
int worker_main(void);

#endif
