// ctest `cpp.torch`: monarch/torch.hpp against the venv's libtorch (built
// only when CMake finds Torch; skipped with a message otherwise). An RDMA
// buffer over a tensor's memory, read back through a handle rebuilt from
// its descriptor; the combine and a chunk reduce on at::Tensors; the
// errors for tensors the plane does not take.
#include <ATen/ATen.h>

#include <monarch/monarch.hpp>
#include <monarch/torch.hpp>

#include <iostream>

// Not check.hpp: c10 defines a CHECK macro of its own.
namespace {
int failures = 0;

void expect(bool ok, int line) {
  if (!ok) {
    std::cerr << __FILE__ << ":" << line << ": check failed\n";
    ++failures;
  }
}

// `f` throws monarch::Error with status `st`.
template <class F>
void expect_status(monarch_status st, F&& f, int line) {
  try {
    f();
  } catch (const monarch::Error& e) {
    expect(e.status() == st, line);
    return;
  }
  expect(false, line);
}
}  // namespace

#define EXPECT(cond) expect((cond), __LINE__)
#define EXPECT_STATUS(st, expr) expect_status((st), [&] { expr; }, __LINE__)

int main() {
  using monarch::ReduceOp;
  monarch::Runtime rt;
  at::Tensor x = at::arange(1000, at::kFloat);
  at::Tensor y = at::full({1000}, 2.0f);
  auto bx = monarch::register_tensor(x, monarch::RdmaAccess::ReadOnly);
  auto by = monarch::register_tensor(y, monarch::RdmaAccess::ReadOnly);
  EXPECT(bx.buffer().size() == 4000);
  auto hy = monarch::RdmaBuffer::from_bytes(by.buffer().to_bytes());

  // Elements 100..300 of x and y, summed then averaged over 2 members.
  at::Tensor out = at::empty({200}, at::kFloat);
  monarch::reduce_chunk(ReduceOp::Avg, {&bx.buffer(), &hy}, 100 * sizeof(float), out);
  EXPECT(at::equal(out, (at::arange(100, 300, at::kFloat) + 2) / 2));

  at::Tensor a = at::tensor({1.0, 5.0, -2.0}, at::kDouble);
  monarch::combine_(a, at::tensor({3.0, 4.0, -1.0}, at::kDouble), ReduceOp::Max);
  EXPECT(at::equal(a, at::tensor({3.0, 5.0, -1.0}, at::kDouble)));
  at::Tensor h = at::tensor({1.0, 2.0}, at::kFloat).to(at::kHalf);
  monarch::combine_(h, h.clone(), ReduceOp::Product);
  EXPECT(at::equal(h, at::tensor({1.0, 4.0}, at::kFloat).to(at::kHalf)));
  EXPECT(monarch::dtype_of(at::ScalarType::BFloat16) == monarch::DType::BF16);

  // What the plane does not take: a clear error, nothing registered.
  at::Tensor strided = at::zeros({10, 10}).t();
  EXPECT_STATUS(MONARCH_ERR_INVALID_ARGUMENT, monarch::register_tensor(strided));
  EXPECT_STATUS(MONARCH_ERR_INVALID_ARGUMENT, monarch::dtype_of(at::ScalarType::ComplexFloat));
  EXPECT_STATUS(MONARCH_ERR_INVALID_ARGUMENT, monarch::combine_(a, y, ReduceOp::Sum));
  at::Tensor undefined;
  EXPECT_STATUS(MONARCH_ERR_INVALID_ARGUMENT, monarch::combine_(undefined, a, ReduceOp::Sum));

  if (failures) {
    std::cerr << failures << " check(s) failed\n";
    return 1;
  }
  std::cout << "torch: ok\n";
  return 0;
}
