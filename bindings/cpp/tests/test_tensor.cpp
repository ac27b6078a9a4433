// cpp_test case `tensor`: the tensor plane on raw memory (monarch/tensor.hpp):
// combine kernels on vectors, a chunk reduce over two buffers of this
// process (one read as the owner's memory, one through a handle rebuilt
// from its descriptor, on the data plane), and bad arguments.
#include <monarch/monarch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "check.hpp"
#include "suites.hpp"

namespace cpp_test {

void test_tensor() {
  monarch::Runtime rt;
  std::vector<float> a{1, 2, std::numeric_limits<float>::quiet_NaN(), -1};
  std::vector<float> b{4, -2, 0, -5};
  monarch::combine(a, b, monarch::ReduceOp::Sum);
  CHECK(a[0] == 5 && a[1] == 0 && std::isnan(a[2]) && a[3] == -6);
  monarch::combine(a, b, monarch::ReduceOp::Min);
  CHECK(a[0] == 4 && a[1] == -2 && std::isnan(a[2]) && a[3] == -6);
  std::vector<std::int64_t> i{-7, 9};
  std::vector<std::int64_t> z{0, 0};
  monarch::combine(i, z, monarch::ReduceOp::Avg);
  monarch::finish(monarch::DType::I64, monarch::ReduceOp::Avg, i.data(), i.size(), 2);
  CHECK(i[0] == -3 && i[1] == 4);
  std::vector<std::int32_t> bits{0b1100, 0b1100};
  std::vector<std::int32_t> mask{0b1010, 0b0110};
  monarch::combine(bits, mask, monarch::ReduceOp::BitXor);
  CHECK(bits[0] == 0b0110 && bits[1] == 0b1010);
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, monarch::combine(a, b, monarch::ReduceOp::BitAnd));
  CHECK(monarch::dtype_size(monarch::DType::F16) == 2);

  // A chunk reduce in group order: elements 8..24 of both members.
  std::vector<double> m0(64), m1(64), out(16);
  for (int k = 0; k < 64; ++k) m0[k] = k, m1[k] = 1000 + k;
  auto b0 = monarch::RdmaBuffer::register_memory(m0, monarch::RdmaAccess::ReadOnly);
  auto b1 = monarch::RdmaBuffer::register_memory(m1, monarch::RdmaAccess::ReadOnly);
  auto h1 = monarch::RdmaBuffer::from_bytes(b1.to_bytes());
  auto direct = monarch::reduce_chunk(monarch::DType::F64, monarch::ReduceOp::Max, {&b0, &h1},
                                      8 * sizeof(double), out.data(), out.size());
  CHECK(direct.size() == 2 && !direct[0] && !direct[1]);
  bool ok = true;
  for (int k = 0; k < 16; ++k) ok = ok && out[k] == 1008 + k;
  CHECK(ok);
  double first = 0;
  CHECK(!monarch::read_member(h1, 0, &first, sizeof first) && first == 1000);
  // Pushing into the members' results: both are this process's memory, so
  // nothing is pushed (between procs: tensor/tests/reduce.rs).
  auto paths = monarch::reduce_chunk_push(monarch::DType::F64, monarch::ReduceOp::Sum, {&b0, &h1},
                                          {&b0, &h1}, 0, out.data(), out.size());
  CHECK(paths.pushed.size() == 2 && !paths.pushed[0] && !paths.pushed[1] && out[3] == 1006);
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT,
                monarch::reduce_chunk_push(monarch::DType::F64, monarch::ReduceOp::Sum,
                                           {&b0, &h1}, {&b0}, 0, out.data(), 4));

  // Bad arguments and handles.
  std::vector<float> shorter{1};
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT, monarch::combine(a, shorter, monarch::ReduceOp::Sum));
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT,
                monarch::combine(monarch::DType::F32, monarch::ReduceOp::Sum, nullptr, b.data(), 4));
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT,
                monarch::combine(static_cast<monarch::DType>(99), monarch::ReduceOp::Sum, a.data(),
                                 b.data(), 4));
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT,
                monarch::combine(monarch::DType::F32, static_cast<monarch::ReduceOp>(0), a.data(),
                                 b.data(), 4));
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT,
                monarch::reduce_chunk(monarch::DType::F64, monarch::ReduceOp::Sum, {&b0, &h1}, 0,
                                      out.data(), 65));
  THROWS_STATUS(MONARCH_ERR_INVALID_HANDLE,
                monarch::reduce_chunk(monarch::DType::F64, monarch::ReduceOp::Sum, {&b0, nullptr}, 0,
                                      out.data(), 4));
  b0.drop();
  THROWS_STATUS(MONARCH_ERR_INVALID_ARGUMENT,
                monarch::reduce_chunk(monarch::DType::F64, monarch::ReduceOp::Sum, {&b0, &h1}, 0,
                                      out.data(), 4));
}

}  // namespace cpp_test
