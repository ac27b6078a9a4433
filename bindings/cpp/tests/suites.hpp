// The test cases of cpp_test (`cpp_test NAME`; ctest `cpp.NAME`), one
// function each, defined in the test_*.cpp file named next to it.
#ifndef MONARCH_CPP_TEST_SUITES_HPP
#define MONARCH_CPP_TEST_SUITES_HPP

namespace cpp_test {

// test_meshes.cpp
void test_lifecycle();
void test_calls();
void test_slicing();
void test_errors();
void test_crash();
void test_local_actors();
void test_views();
// test_handles.cpp
void test_after_free();
void test_handles();
// test_workers.cpp
void test_hosts();
void test_plugin();
void test_python_actors();
void test_slurm();
// test_ports.cpp
void test_ports();
// test_rdma.cpp
void test_rdma();
// test_supervise.cpp
void test_actor_supervise();
// test_schema.cpp
void test_schema();
// test_hardening.cpp
void test_undeliverable_reply();
// test_actor_workers.cpp
void test_actor_workers();
// test_introspect.cpp
void test_introspect();
// test_progress.cpp
void test_progress();
// test_tensor.cpp
void test_tensor();

}  // namespace cpp_test

#endif  // MONARCH_CPP_TEST_SUITES_HPP
