/* The C "counter" actor declared in counter_actor.h. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "counter_actor.h"

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

int serve_event(actor_table *t, monarch_event *ev) {
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

void free_table(actor_table *t) {
    while (t->n) remove_actor(t, t->actors[0].key);
}

int worker_main(void) {
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
