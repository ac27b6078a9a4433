/*
 * The controller's test suites, one concept per file, run in this order by
 * main.c against 4 worker procs (hosts=2 x gpus=2) of "counter" actors
 * started at 7. Each suite frees what it creates; `pm` and `am` stay
 * usable after every suite but test_proc_exit_mid_call (rank 3 is dead).
 */
#ifndef ABI_TEST_SUITES_H
#define ABI_TEST_SUITES_H

#include "monarch.h"

/* status_and_free.c */
void test_status_names(void);
void test_free_null(monarch_runtime *rt);

/* calls.c */
void test_calls(monarch_actor_mesh *am);
void test_call_modes_and_errors(monarch_runtime *rt, monarch_proc_mesh *pm,
                                monarch_actor_mesh *am);
void test_ref_round_trip(monarch_runtime *rt, monarch_actor_mesh *am);
void test_proc_mesh_ref(monarch_runtime *rt, monarch_proc_mesh *pm, monarch_actor_mesh *am);
void test_proc_exit_mid_call(monarch_runtime *rt, monarch_actor_mesh *am);

/* geometry.c */
void test_slices_and_geometry(monarch_proc_mesh *pm, monarch_actor_mesh *am);

/* handles.c */
void test_bad_handles_and_args(monarch_runtime *rt, monarch_proc_mesh *pm,
                               monarch_actor_mesh *am);

/* ports.c */
void test_ports(monarch_runtime *rt, monarch_actor_mesh *am);

/* rdma.c */
void test_rdma(monarch_runtime *rt, monarch_actor_mesh *am);

/* tensor.c */
void test_tensor(monarch_runtime *rt, monarch_actor_mesh *am);

/* futures.c */
void test_future_wait_poll_and_fd(monarch_runtime *rt, monarch_actor_mesh *am);

/* this_proc.c */
void test_this_proc(monarch_runtime *rt);

/* progress.c */
void test_progress(void);

/* limits.c */
void test_input_limits(monarch_runtime *rt, monarch_proc_mesh *pm,
                       monarch_actor_mesh *am);

#endif
