// monarch/tensor.hpp: the tensor plane (docs/tensors.md) on raw memory:
// combine kernels (out = op(out, src) elementwise) and one member's chunk
// of a collective reduced from the members' RdmaBuffers. No tensor library
// is needed; monarch/torch.hpp adds the same over at::Tensor.
#ifndef MONARCH_TENSOR_HPP
#define MONARCH_TENSOR_HPP

#include <monarch.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include <monarch/error.hpp>
#include <monarch/rdma.hpp>

namespace monarch {

/// Element types the tensor plane has kernels for.
enum class DType : std::uint32_t {
  F32 = MONARCH_DTYPE_F32,
  F64 = MONARCH_DTYPE_F64,
  F16 = MONARCH_DTYPE_F16,
  BF16 = MONARCH_DTYPE_BF16,
  I8 = MONARCH_DTYPE_I8,
  I16 = MONARCH_DTYPE_I16,
  I32 = MONARCH_DTYPE_I32,
  I64 = MONARCH_DTYPE_I64,
  U8 = MONARCH_DTYPE_U8,
  Bool = MONARCH_DTYPE_BOOL,
};

/// Reductions. Avg sums, then divides once at the end (integers truncate).
/// Min and max propagate NaN like torch.minimum / torch.maximum. The
/// bitwise ops take integer and bool types only.
enum class ReduceOp : std::uint32_t {
  Sum = MONARCH_OP_SUM,
  Avg = MONARCH_OP_AVG,
  Min = MONARCH_OP_MIN,
  Max = MONARCH_OP_MAX,
  Product = MONARCH_OP_PRODUCT,
  BitAnd = MONARCH_OP_BAND,
  BitOr = MONARCH_OP_BOR,
  BitXor = MONARCH_OP_BXOR,
};

/// The DType of a C++ element type (16-bit floats have no standard C++17
/// type: use the raw-pointer functions with DType::F16 / DType::BF16).
template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::F32;
  else if constexpr (std::is_same_v<T, double>) return DType::F64;
  else if constexpr (std::is_same_v<T, std::int8_t>) return DType::I8;
  else if constexpr (std::is_same_v<T, std::int16_t>) return DType::I16;
  else if constexpr (std::is_same_v<T, std::int32_t>) return DType::I32;
  else if constexpr (std::is_same_v<T, std::int64_t>) return DType::I64;
  else if constexpr (std::is_same_v<T, std::uint8_t>) return DType::U8;
  else if constexpr (std::is_same_v<T, bool>) return DType::Bool;
  else static_assert(!sizeof(T*), "no tensor-plane dtype for this element type");
}

/// Bytes per element of `d`.
inline std::size_t dtype_size(DType d) {
  std::size_t n = 0;
  detail::check(monarch_tensor_dtype_size(static_cast<std::uint32_t>(d), &n));
  return n;
}

/// out[i] = op(out[i], src[i]) for `count` elements of `d` (Avg: the sum;
/// see finish). Throws Error(MONARCH_ERR_INVALID_ARGUMENT) for NULL or
/// misaligned pointers, overlapping ranges other than out == src, avg of
/// bool.
inline void combine(DType d, ReduceOp op, void* out, const void* src, std::size_t count) {
  detail::check(monarch_tensor_combine(static_cast<std::uint32_t>(d), static_cast<std::uint32_t>(op),
                                       out, src, count));
}

/// combine over two vectors of the same length.
template <class T>
void combine(std::vector<T>& out, const std::vector<T>& src, ReduceOp op) {
  if (out.size() != src.size())
    throw Error(MONARCH_ERR_INVALID_ARGUMENT, "combine of vectors of different lengths");
  combine(dtype_of<T>(), op, out.data(), src.data(), out.size());
}

/// The last step of a reduce over `members`: Avg divides; nothing else.
inline void finish(DType d, ReduceOp op, void* out, std::size_t count, std::uint32_t members) {
  detail::check(monarch_tensor_finish(static_cast<std::uint32_t>(d), static_cast<std::uint32_t>(op),
                                      out, count, members));
}

/// One member's chunk of a collective: `count` elements of `d` at byte
/// `offset` of every member's buffer (in group order; this process's own
/// as its owner's RdmaBuffer) combined into `out`, then finished. Same-host
/// peers are read straight from their memory, others on the data plane;
/// the result says, per member, whether it was read straight. Straight
/// reads take no lease: keep every member's buffer registered until all
/// members are done. Throws Error (MONARCH_ERR_PROC_FAILED: a member's
/// process is gone).
inline std::vector<bool> reduce_chunk(DType d, ReduceOp op,
                                      const std::vector<const RdmaBuffer*>& members,
                                      std::uint64_t offset, void* out, std::size_t count) {
  std::vector<const monarch_rdma_buffer*> hs;
  hs.reserve(members.size());
  for (const RdmaBuffer* m : members) hs.push_back(m ? m->handle() : nullptr);
  std::unique_ptr<bool[]> direct(new bool[hs.size() + 1]());
  detail::check(monarch_tensor_reduce_chunk(static_cast<std::uint32_t>(d),
                                            static_cast<std::uint32_t>(op), hs.data(), hs.size(),
                                            offset, out, count, direct.get()));
  return std::vector<bool>(direct.get(), direct.get() + hs.size());
}

/// What reduce_chunk_push says per member.
struct ChunkPaths {
  std::vector<bool> direct;  ///< read straight from a same-host peer's memory
  std::vector<bool> pushed;  ///< the chunk written into that member's result
};

/// reduce_chunk that also writes each finished block, while it is in
/// cache, at byte `offset` of `results[k]` (member k's result buffer,
/// registered writable; nullptr or this process's own: skipped) for every
/// same-host peer this process may write; the others read the chunk
/// themselves. `results` is empty or has one entry per member. A member's
/// input and result may be the same memory (a reduce in place). Member k
/// must not read that range of its result before this call returned here.
inline ChunkPaths reduce_chunk_push(DType d, ReduceOp op,
                                    const std::vector<const RdmaBuffer*>& members,
                                    const std::vector<const RdmaBuffer*>& results,
                                    std::uint64_t offset, void* out, std::size_t count) {
  if (!results.empty() && results.size() != members.size())
    throw Error(MONARCH_ERR_INVALID_ARGUMENT, "reduce_chunk_push: one result per member, or none");
  std::vector<const monarch_rdma_buffer*> hs, rs;
  for (const RdmaBuffer* m : members) hs.push_back(m ? m->handle() : nullptr);
  for (const RdmaBuffer* r : results) rs.push_back(r ? r->handle() : nullptr);
  std::unique_ptr<bool[]> direct(new bool[hs.size() + 1]()), pushed(new bool[hs.size() + 1]());
  detail::check(monarch_tensor_reduce_chunk_push(
      static_cast<std::uint32_t>(d), static_cast<std::uint32_t>(op), hs.data(),
      rs.empty() ? nullptr : rs.data(), hs.size(), offset, out, count, direct.get(), pushed.get()));
  return {std::vector<bool>(direct.get(), direct.get() + hs.size()),
          std::vector<bool>(pushed.get(), pushed.get() + hs.size())};
}

/// Copy `len` bytes at byte `offset` of `buf` into `dst`: straight from a
/// same-host owner's memory (true) or on the data plane (false).
inline bool read_member(const RdmaBuffer& buf, std::uint64_t offset, void* dst, std::size_t len) {
  bool direct = false;
  detail::check(monarch_tensor_read_member(buf.handle(), offset, dst, len, &direct));
  return direct;
}

}  // namespace monarch

#endif  // MONARCH_TENSOR_HPP
