/* A tiny C plugin for `monarch worker --plugin` (test_c_plugin.py compiles it
 * with `cc` against bindings/cpp/include/monarch/plugin.h; no CMake).
 *
 * Type "CCounter": constructed from an optional 8-byte little-endian i64
 * start value. Endpoints: "incr" (one 8-byte i64 part) -> the new value;
 * "echo" -> its parts back; "rank" -> the message rank as 8 bytes; "fail"
 * -> an error; "concat" -> its parts joined into one part; "wait" blocks
 * until another actor of this proc handles "release" (an error after 30 s,
 * so a host that runs actors one after the other fails instead of hanging);
 * "same_thread" -> 1 byte, 1 when the endpoint runs on the thread that ran
 * this actor's constructor. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "monarch/plugin.h"

typedef struct {
  int64_t value;
} counter;

/* "release" calls not yet taken by a "wait", in this proc. */
static pthread_mutex_t release_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t release_cond = PTHREAD_COND_INITIALIZER;
static int releases;

/* The actor this thread constructed last. */
static _Thread_local void *constructed_here;

static int wait_for_release(void) {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += 30;
  int rc = 0;
  pthread_mutex_lock(&release_lock);
  while (releases == 0 && rc != ETIMEDOUT)
    rc = pthread_cond_timedwait(&release_cond, &release_lock, &deadline);
  int got = releases > 0;
  if (got) releases--;
  pthread_mutex_unlock(&release_lock);
  return got;
}

static int64_t get_i64(const monarch_plugin_bytes *b) {
  int64_t v;
  memcpy(&v, b->ptr, sizeof v); /* the test runs on little-endian hosts */
  return v;
}

static void *create(void *type_data, const monarch_plugin_call *call) {
  (void)type_data;
  counter *c = calloc(1, sizeof *c);
  if (call->nparts >= 1) {
    if (call->parts[0].len != 8) {
      call->set_error(call->reply_ctx, "CCounter: start must be 8 bytes");
      free(c);
      return NULL;
    }
    c->value = get_i64(&call->parts[0]);
  }
  constructed_here = c;
  return c;
}

static void handle(void *instance, const monarch_plugin_call *call) {
  counter *c = instance;
  const char *m = call->method;
  if (strcmp(m, "incr") == 0) {
    if (call->nparts != 1 || call->parts[0].len != 8) {
      call->set_error(call->reply_ctx, "CCounter.incr takes one 8-byte part");
      return;
    }
    c->value += get_i64(&call->parts[0]);
    call->add_part(call->reply_ctx, (const uint8_t *)&c->value, 8);
  } else if (strcmp(m, "echo") == 0) {
    for (size_t i = 0; i < call->nparts; ++i)
      call->add_part(call->reply_ctx, call->parts[i].ptr, call->parts[i].len);
  } else if (strcmp(m, "concat") == 0) {
    size_t n = 0;
    for (size_t i = 0; i < call->nparts; ++i) n += call->parts[i].len;
    uint8_t *buf = malloc(n ? n : 1);
    size_t off = 0;
    for (size_t i = 0; i < call->nparts; ++i) {
      memcpy(buf + off, call->parts[i].ptr, call->parts[i].len);
      off += call->parts[i].len;
    }
    call->add_part(call->reply_ctx, buf, n);
    free(buf);
  } else if (strcmp(m, "rank") == 0) {
    uint64_t r = call->rank;
    call->add_part(call->reply_ctx, (const uint8_t *)&r, 8);
  } else if (strcmp(m, "wait") == 0) {
    if (!wait_for_release())
      call->set_error(call->reply_ctx, "CCounter.wait: no release within 30 s");
  } else if (strcmp(m, "release") == 0) {
    pthread_mutex_lock(&release_lock);
    releases++;
    pthread_cond_broadcast(&release_cond);
    pthread_mutex_unlock(&release_lock);
  } else if (strcmp(m, "same_thread") == 0) {
    uint8_t same = constructed_here == instance;
    call->add_part(call->reply_ctx, &same, 1);
  } else if (strcmp(m, "fail") == 0) {
    char msg[64];
    snprintf(msg, sizeof msg, "CCounter.fail on rank %llu", (unsigned long long)call->rank);
    call->set_error(call->reply_ctx, msg);
  } else {
    call->set_error(call->reply_ctx, "CCounter: no such endpoint");
  }
}

static void destroy(void *instance) { free(instance); }

__attribute__((visibility("default"))) int monarch_plugin_init(const monarch_plugin_registry *reg) {
  if (reg->abi_version != MONARCH_PLUGIN_ABI_VERSION) {
    reg->set_error(reg->ctx, "CCounter: plugin ABI version mismatch");
    return 1;
  }
  monarch_plugin_actor_type t = {"CCounter", NULL, create, handle, destroy};
  return reg->register_type(reg->ctx, &t);
}
