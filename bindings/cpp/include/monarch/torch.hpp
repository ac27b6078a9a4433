// monarch/torch.hpp: the tensor plane over libtorch tensors (docs/tensors.md).
// Header-only, and not part of monarch/monarch.hpp: include it only in a
// program built against libtorch (find_package(Torch)). It includes ATen's
// core Tensor header, not <torch/torch.h>, to keep compile times short.
//
// Overloads in namespace monarch (not a nested `torch` namespace, which
// would clash with libtorch's under `using namespace monarch`):
// - register_tensor: an RdmaBuffer over a tensor's memory (zero copy; the
//   buffer keeps the tensor's storage alive)
// - dtype_of: the plane's DType of an at::ScalarType
// - combine_, reduce_chunk: the combine kernels and a collective's chunk
//   on at::Tensors (data_ptr() handed over, nothing copied)
// Only contiguous CPU tensors are accepted; others throw
// Error(MONARCH_ERR_INVALID_ARGUMENT) saying why.
#ifndef MONARCH_TORCH_HPP
#define MONARCH_TORCH_HPP

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <monarch/error.hpp>
#include <monarch/rdma.hpp>
#include <monarch/tensor.hpp>

namespace monarch {

/// The tensor plane's DType of `t` (throws for types it has no kernels for).
inline DType dtype_of(at::ScalarType t) {
  switch (t) {
    case at::ScalarType::Float: return DType::F32;
    case at::ScalarType::Double: return DType::F64;
    case at::ScalarType::Half: return DType::F16;
    case at::ScalarType::BFloat16: return DType::BF16;
    case at::ScalarType::Char: return DType::I8;
    case at::ScalarType::Short: return DType::I16;
    case at::ScalarType::Int: return DType::I32;
    case at::ScalarType::Long: return DType::I64;
    case at::ScalarType::Byte: return DType::U8;
    case at::ScalarType::Bool: return DType::Bool;
    default:
      throw Error(MONARCH_ERR_INVALID_ARGUMENT,
                  std::string("the tensor plane has no kernels for dtype ") + c10::toString(t));
  }
}

namespace detail {
inline void check_tensor(const at::Tensor& t, const char* what) {
  if (!t.defined()) throw Error(MONARCH_ERR_INVALID_ARGUMENT, std::string(what) + " is undefined");
  if (!t.device().is_cpu())
    throw Error(MONARCH_ERR_INVALID_ARGUMENT,
                std::string(what) + " is on " + t.device().str() + "; only CPU tensors are supported");
  if (!t.is_contiguous())
    throw Error(MONARCH_ERR_INVALID_ARGUMENT,
                std::string(what) + " is not contiguous (call .contiguous() first)");
}
}  // namespace detail

/// An RdmaBuffer over a tensor's memory, holding a reference to the tensor
/// so its storage outlives the registration.
class TensorBuffer {
 public:
  TensorBuffer() = default;
  TensorBuffer(at::Tensor t, RdmaBuffer b) : tensor_(std::move(t)), buf_(std::move(b)) {}
  const RdmaBuffer& buffer() const { return buf_; }
  const at::Tensor& tensor() const { return tensor_; }

 private:
  at::Tensor tensor_;  // before buf_: unregistered first, then released
  RdmaBuffer buf_;
};

/// Register the memory of contiguous CPU tensor `t` (zero copy) for
/// one-sided reads (and writes, unless ReadOnly) by other procs.
inline TensorBuffer register_tensor(const at::Tensor& t,
                                    RdmaAccess access = RdmaAccess::ReadWrite) {
  detail::check_tensor(t, "the tensor");
  auto bytes = static_cast<std::size_t>(t.numel()) * t.element_size();
  return TensorBuffer(t, RdmaBuffer::register_memory(t.data_ptr(), bytes, access));
}

/// out = op(out, src) elementwise, in place (Avg: the sum; see finish_).
inline void combine_(at::Tensor& out, const at::Tensor& src, ReduceOp op) {
  detail::check_tensor(out, "out");
  detail::check_tensor(src, "src");
  if (out.scalar_type() != src.scalar_type() || out.numel() != src.numel())
    throw Error(MONARCH_ERR_INVALID_ARGUMENT, "combine_ of tensors of different dtypes or sizes");
  combine(dtype_of(out.scalar_type()), op, out.data_ptr(), src.data_ptr(),
          static_cast<std::size_t>(out.numel()));
}

/// The last step of a reduce over `members`: Avg divides.
inline void finish_(at::Tensor& out, ReduceOp op, std::uint32_t members) {
  detail::check_tensor(out, "out");
  finish(dtype_of(out.scalar_type()), op, out.data_ptr(), static_cast<std::size_t>(out.numel()),
         members);
}

/// `out` = the out.numel() elements at byte `offset` of every member's
/// buffer (in group order) combined and finished (see
/// monarch::reduce_chunk); returns which members were read straight.
inline std::vector<bool> reduce_chunk(ReduceOp op, const std::vector<const RdmaBuffer*>& members,
                                      std::uint64_t offset, at::Tensor& out) {
  detail::check_tensor(out, "out");
  return reduce_chunk(dtype_of(out.scalar_type()), op, members, offset, out.data_ptr(),
                               static_cast<std::size_t>(out.numel()));
}

}  // namespace monarch

#endif  // MONARCH_TORCH_HPP
