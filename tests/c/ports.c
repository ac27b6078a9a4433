/* Ports: channels, casts answered to a port, streams, bad handles. */

#include "check.h"
#include "suites.h"

/* The i64 of a one-point value mesh taken from a port future, then freed. */
static int64_t port_value(monarch_future *f) {
    monarch_value_mesh *vm = finish(f);
    CHECK(vm_len(vm) == 1, "port value mesh has %zu points", vm_len(vm));
    int64_t v = vm_i64(vm, 0);
    if (vm) monarch_value_mesh_free(vm);
    return v;
}

void test_ports(monarch_runtime *rt, monarch_actor_mesh *am) {
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
