//! `monarch_tensor_*`: the tensor plane (crate monarch-tensor). Combine
//! kernels on raw typed buffers and one member's chunk of a collective
//! reduced from the members' RDMA buffers. Tensors are passed as data
//! pointers (`torch.Tensor.data_ptr()`, `torch::Tensor::data_ptr()`,
//! `pointer(v)` in Julia): nothing is copied on the way in or out. No type
//! of its own: these functions work on memory and `monarch_rdma_buffer`s,
//! from any thread.

use std::ffi::c_void;
use std::sync::Arc;

use monarch_rdma::Buffer;
use monarch_tensor::{self as tensor, DType, Op};

use crate::args::{arg_slice, out_ptr};
use crate::handles::get;
use crate::rdma::monarch_rdma_buffer;
use crate::status::{guard, monarch_status, Fail};

/// Element type: 32-bit float.
pub const MONARCH_DTYPE_F32: u32 = 1;
/// Element type: 64-bit float.
pub const MONARCH_DTYPE_F64: u32 = 2;
/// Element type: IEEE half (16-bit float).
pub const MONARCH_DTYPE_F16: u32 = 3;
/// Element type: bfloat16.
pub const MONARCH_DTYPE_BF16: u32 = 4;
/// Element type: signed 8-bit integer.
pub const MONARCH_DTYPE_I8: u32 = 5;
/// Element type: signed 16-bit integer.
pub const MONARCH_DTYPE_I16: u32 = 6;
/// Element type: signed 32-bit integer.
pub const MONARCH_DTYPE_I32: u32 = 7;
/// Element type: signed 64-bit integer.
pub const MONARCH_DTYPE_I64: u32 = 8;
/// Element type: unsigned 8-bit integer.
pub const MONARCH_DTYPE_U8: u32 = 9;
/// Element type: bool, one byte holding 0 or 1.
pub const MONARCH_DTYPE_BOOL: u32 = 10;

/// Reduction: sum (integers wrap; bool: or).
pub const MONARCH_OP_SUM: u32 = 1;
/// Reduction: mean over the members, summed then divided once at the end
/// (`monarch_tensor_finish`); integers divide truncating. Not for bool.
pub const MONARCH_OP_AVG: u32 = 2;
/// Reduction: minimum; NaN in either operand gives NaN (bool: and).
pub const MONARCH_OP_MIN: u32 = 3;
/// Reduction: maximum; NaN in either operand gives NaN (bool: or).
pub const MONARCH_OP_MAX: u32 = 4;
/// Reduction: product (integers wrap; bool: and).
pub const MONARCH_OP_PRODUCT: u32 = 5;
/// Reduction: bitwise and (bool: and). Integer and bool types only.
pub const MONARCH_OP_BAND: u32 = 6;
/// Reduction: bitwise or (bool: or). Integer and bool types only.
pub const MONARCH_OP_BOR: u32 = 7;
/// Reduction: bitwise exclusive or (bool: xor). Integer and bool types only.
pub const MONARCH_OP_BXOR: u32 = 8;

fn codes(dtype: u32, op: u32) -> Result<(DType, Op), Fail> {
    Ok((DType::from_code(dtype)?, Op::from_code(op)?))
}

/// Write the size in bytes of one element of `dtype` (a `MONARCH_DTYPE_*`)
/// to `*out`; an unknown code is `MONARCH_ERR_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn monarch_tensor_dtype_size(dtype: u32, out: *mut usize) -> monarch_status {
    guard(|| {
        *out_ptr(out, "out")? = DType::from_code(dtype)?.size();
        Ok(())
    })
}

/// `out[i] = op(out[i], src[i])` for `i < count` elements of `dtype`
/// (`MONARCH_DTYPE_*`, `MONARCH_OP_*`; for `MONARCH_OP_AVG` the sum, see
/// `monarch_tensor_finish`). Both pointers must be aligned to the element
/// size and valid for `count` elements; `out == src` is allowed, any
/// other overlap is refused. Unknown codes, avg of bool, NULL or
/// misaligned pointers (when `count > 0`): `MONARCH_ERR_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn monarch_tensor_combine(
    dtype: u32,
    op: u32,
    out: *mut c_void,
    src: *const c_void,
    count: usize,
) -> monarch_status {
    guard(|| {
        let (dtype, op) = codes(dtype, op)?;
        tensor::combine(dtype, op, out as *mut u8, src as *const u8, count)?;
        Ok(())
    })
}

/// The last step of a reduce over `members` members: for `MONARCH_OP_AVG`
/// divide each of the `count` elements at `out` by `members` (integers
/// truncating); nothing for the other ops. Arguments as for
/// `monarch_tensor_combine`; `members` 0 with avg is
/// `MONARCH_ERR_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn monarch_tensor_finish(
    dtype: u32,
    op: u32,
    out: *mut c_void,
    count: usize,
    members: u32,
) -> monarch_status {
    guard(|| {
        let (dtype, op) = codes(dtype, op)?;
        tensor::finish(dtype, op, out as *mut u8, count, members)?;
        Ok(())
    })
}

fn buffers(members: *const *const monarch_rdma_buffer, n: usize) -> Result<Vec<Arc<Buffer>>, Fail> {
    arg_slice(members, n, "members")?
        .iter()
        .map(|&h| get(h))
        .collect()
}

/// One member's chunk of a collective: `count` elements of `dtype` at byte
/// `offset` of every member's buffer (`members[0..n]`, in group order)
/// combined into `out`: `out = m0 op m1 op ... op m(n-1)`, then
/// `monarch_tensor_finish` (avg divides by `n`). Every member that reduces
/// a chunk this way computes the same bits for it.
///
/// A member's range is read from this process's memory when its handle is
/// the owner's (`monarch_rdma_register`; `out` may be that range itself),
/// straight from a same-host peer's memory with `process_vm_readv` a
/// cache-sized block at a time, or on the data plane (another host, a
/// kernel that refuses, `MONARCH_RDMA_BACKEND=tcp`/`ibverbs`). `direct`
/// (NULL, or `n` entries) receives whether each member was read straight.
/// Straight reads take no lease: the members must keep their buffers
/// registered until every member is done (a last message exchange).
///
/// Errors: `MONARCH_ERR_INVALID_HANDLE` for a stale member handle;
/// `MONARCH_ERR_INVALID_ARGUMENT` for unknown codes, `n` 0, a NULL or
/// misaligned `out`, a range outside a member's buffer or a dropped one;
/// `MONARCH_ERR_PROC_FAILED` when a member's process is gone (also when it
/// exited during the reads: what was read may not be its memory). `out`
/// is then partly written. Blocks the calling thread.
#[no_mangle]
pub unsafe extern "C" fn monarch_tensor_reduce_chunk(
    dtype: u32,
    op: u32,
    members: *const *const monarch_rdma_buffer,
    n: usize,
    offset: u64,
    out: *mut c_void,
    count: usize,
    direct: *mut bool,
) -> monarch_status {
    guard(|| {
        let (dtype, op) = codes(dtype, op)?;
        let bufs = buffers(members, n)?;
        let mut flags = vec![false; bufs.len()];
        tensor::reduce_chunk(dtype, op, &bufs, offset, out as *mut u8, count, &mut flags)?;
        if !direct.is_null() {
            std::slice::from_raw_parts_mut(direct, flags.len()).copy_from_slice(&flags);
        }
        Ok(())
    })
}

/// `monarch_tensor_reduce_chunk` that also writes each finished block of
/// the chunk, while it is in cache, at byte `offset` of `results[k]`
/// (member `k`'s result buffer, registered writable; `results` may be
/// NULL, an entry NULL or the caller's own buffer: skipped) for every
/// member `k` that is a same-host peer this process may write, with
/// `process_vm_writev`. `pushed` (NULL, or `n` entries) receives which
/// members got the chunk that way; the others read it themselves. A
/// member's input and result may be the same memory (a reduce in place):
/// each block is read from every member before it is written to any.
/// Member `k` must not read that range of its result until this call
/// returned (the caller's protocol: a message after it). Errors as for
/// `monarch_tensor_reduce_chunk`; a stale result handle is
/// `MONARCH_ERR_INVALID_HANDLE`.
#[no_mangle]
pub unsafe extern "C" fn monarch_tensor_reduce_chunk_push(
    dtype: u32,
    op: u32,
    members: *const *const monarch_rdma_buffer,
    results: *const *const monarch_rdma_buffer,
    n: usize,
    offset: u64,
    out: *mut c_void,
    count: usize,
    direct: *mut bool,
    pushed: *mut bool,
) -> monarch_status {
    guard(|| {
        let (dtype, op) = codes(dtype, op)?;
        let bufs = buffers(members, n)?;
        let res = if results.is_null() {
            Vec::new()
        } else {
            std::slice::from_raw_parts(results, n)
                .iter()
                .map(|&h| {
                    if h.is_null() {
                        Ok(None)
                    } else {
                        get(h).map(Some)
                    }
                })
                .collect::<Result<Vec<_>, Fail>>()?
        };
        let mut flags = vec![false; bufs.len()];
        let mut pushes = vec![false; bufs.len()];
        tensor::reduce_chunk_push(
            dtype,
            op,
            &bufs,
            &res,
            offset,
            out as *mut u8,
            count,
            &mut flags,
            &mut pushes,
        )?;
        if !direct.is_null() {
            std::slice::from_raw_parts_mut(direct, n).copy_from_slice(&flags);
        }
        if !pushed.is_null() {
            std::slice::from_raw_parts_mut(pushed, n).copy_from_slice(&pushes);
        }
        Ok(())
    })
}

/// Copy `len` bytes at byte `offset` of `buf` into `dst`: straight from the
/// owner's memory when it is a same-host peer this process may read, else
/// on the data plane. `*direct` (may be NULL) says which. As for
/// `monarch_tensor_reduce_chunk`, a straight read takes no lease: the
/// owner must keep the buffer registered until the caller is done. Errors
/// as for `monarch_tensor_reduce_chunk`. Blocks the calling thread.
#[no_mangle]
pub unsafe extern "C" fn monarch_tensor_read_member(
    buf: *const monarch_rdma_buffer,
    offset: u64,
    dst: *mut c_void,
    len: usize,
    direct: *mut bool,
) -> monarch_status {
    guard(|| {
        let b = get(buf)?;
        let d = tensor::read_member(&b, offset, dst as *mut u8, len)?;
        if !direct.is_null() {
            *direct = d;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The C constants are the tensor crate's codes (cbindgen needs
    /// literals, so they are written twice).
    #[test]
    fn the_c_codes_are_the_plane_codes() {
        let dtypes = [
            (MONARCH_DTYPE_F32, DType::F32),
            (MONARCH_DTYPE_F64, DType::F64),
            (MONARCH_DTYPE_F16, DType::F16),
            (MONARCH_DTYPE_BF16, DType::BF16),
            (MONARCH_DTYPE_I8, DType::I8),
            (MONARCH_DTYPE_I16, DType::I16),
            (MONARCH_DTYPE_I32, DType::I32),
            (MONARCH_DTYPE_I64, DType::I64),
            (MONARCH_DTYPE_U8, DType::U8),
            (MONARCH_DTYPE_BOOL, DType::Bool),
        ];
        for (code, dtype) in dtypes {
            assert_eq!(DType::from_code(code).unwrap(), dtype);
        }
        assert!(
            DType::from_code(dtypes.len() as u32 + 1).is_err(),
            "a dtype without a C constant"
        );
        let ops = [
            (MONARCH_OP_SUM, Op::Sum),
            (MONARCH_OP_AVG, Op::Avg),
            (MONARCH_OP_MIN, Op::Min),
            (MONARCH_OP_MAX, Op::Max),
            (MONARCH_OP_PRODUCT, Op::Product),
            (MONARCH_OP_BAND, Op::BAnd),
            (MONARCH_OP_BOR, Op::BOr),
            (MONARCH_OP_BXOR, Op::BXor),
        ];
        for (code, op) in ops {
            assert_eq!(Op::from_code(code).unwrap(), op);
        }
        assert!(
            Op::from_code(ops.len() as u32 + 1).is_err(),
            "an op without a C constant"
        );
    }
}
