//! The combine kernels: `out[i] = op(out[i], src[i])` over raw typed
//! buffers, and the last step of an average ([`finish`]).
//!
//! Each (type, op) pair is one monomorphised loop over two slices with no
//! branch a select cannot replace, so LLVM vectorises it (see
//! `benches/combine.rs`). Integers wrap like torch's. Min and max
//! propagate NaN like `torch.minimum`/`torch.maximum`. f16 and bf16
//! compute in f32 and round back per element, as torch does on CPU. Bool
//! is 0/1 bytes: sum and max are `or`, product and min are `and`. The
//! bitwise ops (and, or, xor) take integers and bool only.

use monarch_core::{Error, Result};

use crate::dtype::{DType, Op};
use crate::half::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};

#[inline(always)]
fn zip<T: Copy>(out: &mut [T], src: &[T], f: impl Fn(T, T) -> T) {
    for (o, s) in out.iter_mut().zip(src) {
        *o = f(*o, *s);
    }
}

/// `a` when it is greater than `b` or NaN, else `b`: NaN in either wins.
#[inline(always)]
fn fmax<T: PartialOrd + Copy>(a: T, b: T) -> T {
    #[allow(clippy::eq_op)]
    let a_nan = a != a;
    if a > b || a_nan {
        a
    } else {
        b
    }
}

#[inline(always)]
fn fmin<T: PartialOrd + Copy>(a: T, b: T) -> T {
    #[allow(clippy::eq_op)]
    let a_nan = a != a;
    if a < b || a_nan {
        a
    } else {
        b
    }
}

#[inline(always)]
fn float<T>(out: &mut [T], src: &[T], op: Op)
where
    T: Copy + PartialOrd + std::ops::Add<Output = T> + std::ops::Mul<Output = T>,
{
    match op {
        Op::Sum | Op::Avg => zip(out, src, |a, b| a + b),
        Op::Product => zip(out, src, |a, b| a * b),
        Op::Max => zip(out, src, fmax),
        Op::Min => zip(out, src, fmin),
        Op::BAnd | Op::BOr | Op::BXor => unreachable!("refused by check_op"),
    }
}

/// A 16-bit float format: how it converts to and from f32 (a type, not a
/// function pointer, so the conversions inline into the loop).
trait Half {
    fn to(h: u16) -> f32;
    fn from(f: f32) -> u16;
}

struct F16;
impl Half for F16 {
    #[inline(always)]
    fn to(h: u16) -> f32 {
        f16_to_f32(h)
    }
    #[inline(always)]
    fn from(f: f32) -> u16 {
        f32_to_f16(f)
    }
}

struct BF16;
impl Half for BF16 {
    #[inline(always)]
    fn to(h: u16) -> f32 {
        bf16_to_f32(h)
    }
    #[inline(always)]
    fn from(f: f32) -> u16 {
        f32_to_bf16(f)
    }
}

/// 16-bit floats computed in f32 per element. (Not vectorised on
/// baseline x86-64: about 1.4 GB/s for f16 and 5 GB/s for bf16 in cache,
/// see benches/combine.rs; widening runs to f32 arrays first did not help.)
#[inline(always)]
fn half<H: Half>(out: &mut [u16], src: &[u16], op: Op) {
    match op {
        Op::Sum | Op::Avg => zip(out, src, |a, b| H::from(H::to(a) + H::to(b))),
        Op::Product => zip(out, src, |a, b| H::from(H::to(a) * H::to(b))),
        // The result is one of the operands: keep its bits.
        Op::Max => zip(out, src, |a, b| {
            let (x, y) = (H::to(a), H::to(b));
            if fmax(x, y) == x || x.is_nan() {
                a
            } else {
                b
            }
        }),
        Op::Min => zip(out, src, |a, b| {
            let (x, y) = (H::to(a), H::to(b));
            if fmin(x, y) == x || x.is_nan() {
                a
            } else {
                b
            }
        }),
        Op::BAnd | Op::BOr | Op::BXor => unreachable!("refused by check_op"),
    }
}

fn half_divide<H: Half>(out: &mut [u16], n: u32) {
    let d = n as f32;
    out.iter_mut().for_each(|x| *x = H::from(H::to(*x) / d));
}

macro_rules! int_kernel {
    ($name:ident, $t:ty) => {
        #[inline(always)]
        fn $name(out: &mut [$t], src: &[$t], op: Op) {
            match op {
                Op::Sum | Op::Avg => zip(out, src, |a, b| a.wrapping_add(b)),
                Op::Product => zip(out, src, |a, b| a.wrapping_mul(b)),
                Op::Max => zip(out, src, |a, b| a.max(b)),
                Op::Min => zip(out, src, |a, b| a.min(b)),
                Op::BAnd => zip(out, src, |a, b| a & b),
                Op::BOr => zip(out, src, |a, b| a | b),
                Op::BXor => zip(out, src, |a, b| a ^ b),
            }
        }
    };
}
int_kernel!(k_i8, i8);
int_kernel!(k_i16, i16);
int_kernel!(k_i32, i32);
int_kernel!(k_i64, i64);
int_kernel!(k_u8, u8);

#[inline(always)]
fn boolean(out: &mut [u8], src: &[u8], op: Op) {
    match op {
        Op::Sum | Op::Max | Op::BOr => zip(out, src, |a, b| ((a | b) != 0) as u8),
        Op::Product | Op::Min | Op::BAnd => zip(out, src, |a, b| (a != 0 && b != 0) as u8),
        Op::BXor => zip(out, src, |a, b| ((a != 0) ^ (b != 0)) as u8),
        Op::Avg => unreachable!("refused by check_op"),
    }
}

fn check_op(dtype: DType, op: Op) -> Result<()> {
    if dtype == DType::Bool && op == Op::Avg {
        return Err(Error::invalid(
            "reduce op avg is not defined for bool tensors",
        ));
    }
    if op.is_bitwise() && dtype.is_float() {
        return Err(Error::invalid(format!(
            "reduce op {} is not defined for {} tensors (integers and bool only)",
            op.name(),
            dtype.name()
        )));
    }
    Ok(())
}

fn check_ptr(p: usize, dtype: DType, what: &str) -> Result<()> {
    if p == 0 {
        return Err(Error::invalid(format!("{what} is NULL")));
    }
    if !p.is_multiple_of(dtype.size()) {
        return Err(Error::invalid(format!(
            "{what} ({p:#x}) is not aligned to the {}-byte elements of {}",
            dtype.size(),
            dtype.name()
        )));
    }
    Ok(())
}

/// `out[i] = op(out[i], src[i])` for `i < count`, elements of `dtype`
/// (for [`Op::Avg`] this is the sum; [`finish`] divides at the end).
/// `out == src` is allowed (each element combined with itself); any other
/// overlap is refused, as are NULL or misaligned pointers when `count > 0`
/// and avg of bool.
///
/// # Safety
/// `out` must be valid for reads and writes and `src` for reads of
/// `count` elements of `dtype`, and nothing else may write them meanwhile.
pub unsafe fn combine(
    dtype: DType,
    op: Op,
    out: *mut u8,
    src: *const u8,
    count: usize,
) -> Result<()> {
    check_op(dtype, op)?;
    if count == 0 {
        return Ok(());
    }
    check_ptr(out as usize, dtype, "the output pointer")?;
    check_ptr(src as usize, dtype, "the source pointer")?;
    let bytes = count
        .checked_mul(dtype.size())
        .ok_or_else(|| Error::invalid(format!("{count} elements overflow the address space")))?;
    let (o, s) = (out as usize, src as usize);
    if o == s {
        // Each element with itself: a copy of `out` is the source.
        let own: Vec<u8> = std::slice::from_raw_parts(src, bytes).to_vec();
        return combine(dtype, op, out, own.as_ptr(), count);
    }
    if o < s.saturating_add(bytes) && s < o.saturating_add(bytes) {
        return Err(Error::invalid(
            "the output and source ranges overlap (only out == src is allowed)",
        ));
    }
    combine_unchecked(dtype, op, out, src, count);
    Ok(())
}

/// [`combine`] without its checks (the reduce loop checked them once).
///
/// # Safety
/// As for [`combine`], plus: non-NULL, aligned, not overlapping, and
/// passed by `check_op` (not avg of bool, no bitwise op on floats).
pub(crate) unsafe fn combine_unchecked(
    dtype: DType,
    op: Op,
    out: *mut u8,
    src: *const u8,
    count: usize,
) {
    // Not float min/max: their NaN-propagating compare measured 3x slower
    // in cache with AVX2 than with the baseline's SSE2.
    let float_minmax = dtype.is_float() && matches!(op, Op::Min | Op::Max);
    #[cfg(target_arch = "x86_64")]
    if !float_minmax && std::arch::is_x86_feature_detected!("avx2") {
        return combine_avx2(dtype, op, out, src, count);
    }
    combine_loops(dtype, op, out, src, count)
}

/// The same loops compiled for AVX2 (twice the vector width of the
/// baseline's SSE2), picked at run time. Elementwise, so the bits are the
/// same.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn combine_avx2(dtype: DType, op: Op, out: *mut u8, src: *const u8, count: usize) {
    combine_loops(dtype, op, out, src, count)
}

#[inline(always)]
unsafe fn combine_loops(dtype: DType, op: Op, out: *mut u8, src: *const u8, count: usize) {
    use std::slice::{from_raw_parts as sl, from_raw_parts_mut as sm};
    match dtype {
        DType::F32 => float(sm(out as *mut f32, count), sl(src as *const f32, count), op),
        DType::F64 => float(sm(out as *mut f64, count), sl(src as *const f64, count), op),
        DType::F16 => half::<F16>(sm(out as *mut u16, count), sl(src as *const u16, count), op),
        DType::BF16 => half::<BF16>(sm(out as *mut u16, count), sl(src as *const u16, count), op),
        DType::I8 => k_i8(sm(out as *mut i8, count), sl(src as *const i8, count), op),
        DType::I16 => k_i16(sm(out as *mut i16, count), sl(src as *const i16, count), op),
        DType::I32 => k_i32(sm(out as *mut i32, count), sl(src as *const i32, count), op),
        DType::I64 => k_i64(sm(out as *mut i64, count), sl(src as *const i64, count), op),
        DType::U8 => k_u8(sm(out, count), sl(src, count), op),
        DType::Bool => boolean(sm(out, count), sl(src, count), op),
    }
}

macro_rules! int_divide {
    ($out:expr, $count:expr, $t:ty, $n:expr) => {{
        let s = std::slice::from_raw_parts_mut($out as *mut $t, $count);
        let n = $n as i64;
        for x in s {
            *x = (*x as i64 / n) as $t;
        }
    }};
}

/// The last step of a reduce over `members` members: for [`Op::Avg`],
/// divide each of the `count` elements at `out` by `members` (floats
/// exactly as `x / n`, f16/bf16 through f32, integers truncating, like
/// `torch.div(x, n, rounding_mode="trunc")`); nothing for the other ops.
///
/// # Safety
/// `out` must be valid for reads and writes of `count` elements of `dtype`.
pub unsafe fn finish(dtype: DType, op: Op, out: *mut u8, count: usize, members: u32) -> Result<()> {
    check_op(dtype, op)?;
    if op != Op::Avg || count == 0 {
        return Ok(());
    }
    if members == 0 {
        return Err(Error::invalid("an average over 0 members"));
    }
    check_ptr(out as usize, dtype, "the output pointer")?;
    let n = members;
    match dtype {
        DType::F32 => {
            let d = n as f32;
            std::slice::from_raw_parts_mut(out as *mut f32, count)
                .iter_mut()
                .for_each(|x| *x /= d)
        }
        DType::F64 => {
            let d = n as f64;
            std::slice::from_raw_parts_mut(out as *mut f64, count)
                .iter_mut()
                .for_each(|x| *x /= d)
        }
        DType::F16 => half_divide::<F16>(std::slice::from_raw_parts_mut(out as *mut u16, count), n),
        DType::BF16 => {
            half_divide::<BF16>(std::slice::from_raw_parts_mut(out as *mut u16, count), n)
        }
        DType::I8 => int_divide!(out, count, i8, n),
        DType::I16 => int_divide!(out, count, i16, n),
        DType::I32 => int_divide!(out, count, i32, n),
        DType::I64 => int_divide!(out, count, i64, n),
        DType::U8 => int_divide!(out, count, u8, n),
        DType::Bool => unreachable!("refused by check_op"),
    }
    Ok(())
}
