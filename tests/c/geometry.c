/* Slices and geometry (flatten, rename, split) of actor and proc meshes. */

#include "check.h"
#include "suites.h"

void test_slices_and_geometry(monarch_proc_mesh *pm, monarch_actor_mesh *am) {
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
    /* An empty slice: no points. */
    monarch_value_mesh *vm = call(s, "get", NULL, 0, MONARCH_CALL_ALL);
    CHECK(vm && vm_len(vm) == 0, "empty slice answered with %zu points", vm_len(vm));
    if (vm) monarch_value_mesh_free(vm);
    monarch_actor_mesh_free(s);
    monarch_proc_mesh *ps = NULL;
    CHECK_OK(monarch_proc_mesh_slice_index(pm, "hosts", 0, &ps));
    monarch_proc_mesh *ps2 = NULL;
    CHECK_OK(monarch_proc_mesh_slice_range(ps, "gpus", 1, 2, 1, &ps2));
    uint8_t *shape = NULL;
    size_t shape_len = 0;
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
}
