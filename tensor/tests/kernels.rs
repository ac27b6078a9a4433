//! The combine kernels against a scalar reference, per type and op, and
//! their argument checks.

use monarch_core::ErrorKind;
use monarch_tensor::half::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};
use monarch_tensor::{combine, finish, DType, Op};

/// The ops every type takes (the bitwise ones have their own test).
const OPS: [Op; 5] = [Op::Sum, Op::Avg, Op::Min, Op::Max, Op::Product];

fn run<T: Copy>(dtype: DType, op: Op, out: &mut [T], src: &[T]) {
    unsafe {
        combine(
            dtype,
            op,
            out.as_mut_ptr() as *mut u8,
            src.as_ptr() as *const u8,
            out.len(),
        )
    }
    .unwrap();
}

#[test]
fn f32_and_f64_match_the_scalar_ops() {
    let a: Vec<f32> = (0..1003).map(|i| (i as f32 * 0.37).sin() * 100.0).collect();
    let b: Vec<f32> = (0..1003).map(|i| (i as f32 * 0.11).cos() * 100.0).collect();
    for op in OPS {
        let mut out = a.clone();
        run(DType::F32, op, &mut out, &b);
        let mut out64: Vec<f64> = a.iter().map(|&x| x as f64).collect();
        let b64: Vec<f64> = b.iter().map(|&x| x as f64).collect();
        run(DType::F64, op, &mut out64, &b64);
        for i in 0..a.len() {
            let want = match op {
                Op::Sum | Op::Avg => a[i] + b[i],
                Op::Product => a[i] * b[i],
                Op::Min => a[i].min(b[i]),
                Op::Max => a[i].max(b[i]),
                Op::BAnd | Op::BOr | Op::BXor => unreachable!("not in OPS"),
            };
            assert_eq!(out[i].to_bits(), want.to_bits(), "{op:?} at {i}");
            let (x, y) = (a[i] as f64, b[i] as f64);
            let want = match op {
                Op::Sum | Op::Avg => x + y,
                Op::Product => x * y,
                Op::Min => x.min(y),
                Op::Max => x.max(y),
                Op::BAnd | Op::BOr | Op::BXor => unreachable!("not in OPS"),
            };
            assert_eq!(out64[i], want, "{op:?} f64 at {i}");
        }
    }
}

#[test]
fn min_and_max_propagate_nan_like_torch() {
    let a = [f32::NAN, 1.0, f32::NAN, -3.0];
    let b = [2.0, f32::NAN, f32::NAN, -4.0];
    for op in [Op::Min, Op::Max] {
        let mut out = a;
        run(DType::F32, op, &mut out, &b);
        assert!(
            out[0].is_nan() && out[1].is_nan() && out[2].is_nan(),
            "{op:?}: {out:?}"
        );
        assert_eq!(out[3], if op == Op::Min { -4.0 } else { -3.0 });
        let mut h: Vec<u16> = a.iter().map(|&x| f32_to_f16(x)).collect();
        let hb: Vec<u16> = b.iter().map(|&x| f32_to_f16(x)).collect();
        run(DType::F16, op, &mut h, &hb);
        assert!(h[..3].iter().all(|&x| f16_to_f32(x).is_nan()), "{op:?} f16");
        assert_eq!(f16_to_f32(h[3]), if op == Op::Min { -4.0 } else { -3.0 });
        let mut bf: Vec<u16> = a.iter().map(|&x| f32_to_bf16(x)).collect();
        let bb: Vec<u16> = b.iter().map(|&x| f32_to_bf16(x)).collect();
        run(DType::BF16, op, &mut bf, &bb);
        assert!(
            bf[..3].iter().all(|&x| bf16_to_f32(x).is_nan()),
            "{op:?} bf16"
        );
    }
}

#[test]
fn half_types_compute_in_f32_and_round_once() {
    // 2048 + 1 is not an f16: rounds to even (2048); 2048 + 3 -> 2052.
    let mut out = vec![f32_to_f16(2048.0); 2];
    run(
        DType::F16,
        Op::Sum,
        &mut out,
        &[f32_to_f16(1.0), f32_to_f16(3.0)],
    );
    assert_eq!([f16_to_f32(out[0]), f16_to_f32(out[1])], [2048.0, 2052.0]);
    let mut out = vec![f32_to_bf16(1.5); 1];
    run(DType::BF16, Op::Product, &mut out, &[f32_to_bf16(-2.0)]);
    assert_eq!(bf16_to_f32(out[0]), -3.0);
}

#[test]
fn integers_wrap_and_average_truncating() {
    let mut out: Vec<i8> = vec![120, -7, 5, -128];
    run(DType::I8, Op::Sum, &mut out, &[10, 0, -9, -1]);
    assert_eq!(out, [-126, -7, -4, 127]);
    let mut out: Vec<i32> = vec![-7, 7, 9, i32::MIN];
    run(DType::I32, Op::Avg, &mut out, &[0, 0, 0, 0]);
    unsafe { finish(DType::I32, Op::Avg, out.as_mut_ptr() as *mut u8, 4, 2) }.unwrap();
    assert_eq!(out, [-3, 3, 4, i32::MIN / 2]);
    let mut out: Vec<i64> = vec![3, -9, 4];
    run(DType::I64, Op::Max, &mut out, &[5, -10, 4]);
    assert_eq!(out, [5, -9, 4]);
    let mut out: Vec<i16> = vec![300, -2];
    run(DType::I16, Op::Product, &mut out, &[300, 5]);
    assert_eq!(out, [300i16.wrapping_mul(300), -10]);
    let mut out: Vec<u8> = vec![250, 0, 7];
    run(DType::U8, Op::Min, &mut out, &[251, 1, 3]);
    assert_eq!(out, [250, 0, 3]);
    let mut out: Vec<u8> = vec![200];
    unsafe { finish(DType::U8, Op::Avg, out.as_mut_ptr(), 1, 3) }.unwrap();
    assert_eq!(out, [66]);
}

#[test]
fn bool_is_or_for_sum_and_max_and_for_min_and_product() {
    for (op, want) in [
        (Op::Sum, [0, 1, 1, 1]),
        (Op::Max, [0, 1, 1, 1]),
        (Op::Min, [0, 0, 0, 1]),
        (Op::Product, [0, 0, 0, 1]),
    ] {
        let mut out: Vec<u8> = vec![0, 1, 0, 1];
        run(DType::Bool, op, &mut out, &[0, 0, 1, 1]);
        assert_eq!(out, want, "{op:?}");
    }
    let mut out = [1u8];
    let e =
        unsafe { combine(DType::Bool, Op::Avg, out.as_mut_ptr(), [1u8].as_ptr(), 1) }.unwrap_err();
    assert!(e.message.contains("avg"), "{e:?}");
}

#[test]
fn bitwise_ops_take_integers_and_bool_only() {
    let mut out: Vec<i32> = vec![0b1100, -1, 7, i32::MIN];
    run(DType::I32, Op::BAnd, &mut out, &[0b1010, 5, 0, -1]);
    assert_eq!(out, [0b1000, 5, 0, i32::MIN]);
    let mut out: Vec<u8> = vec![0b1100, 0xF0];
    run(DType::U8, Op::BOr, &mut out, &[0b1010, 0x0F]);
    assert_eq!(out, [0b1110, 0xFF]);
    let mut out: Vec<i64> = vec![0b1100, -1];
    run(DType::I64, Op::BXor, &mut out, &[0b1010, 1]);
    assert_eq!(out, [0b0110, -2]);
    let mut out: Vec<i8> = (-64..64).collect();
    let src: Vec<i8> = (-64..64).map(|x: i8| x.wrapping_mul(37)).collect();
    let want: Vec<i8> = out.iter().zip(&src).map(|(a, b)| a ^ b).collect();
    run(DType::I8, Op::BXor, &mut out, &src);
    assert_eq!(out, want);
    let mut out: Vec<i16> = vec![0x7F00];
    run(DType::I16, Op::BAnd, &mut out, &[0x0FF0]);
    assert_eq!(out, [0x0F00]);
    for (op, want) in [
        (Op::BAnd, [0, 0, 0, 1]),
        (Op::BOr, [0, 1, 1, 1]),
        (Op::BXor, [0, 1, 1, 0]),
    ] {
        let mut out: Vec<u8> = vec![0, 1, 0, 1];
        run(DType::Bool, op, &mut out, &[0, 0, 1, 1]);
        assert_eq!(out, want, "{op:?}");
    }
    // Finishing a bitwise reduce changes nothing.
    let mut out = vec![6i32];
    unsafe { finish(DType::I32, Op::BOr, out.as_mut_ptr() as *mut u8, 1, 4) }.unwrap();
    assert_eq!(out, [6]);
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        for op in [Op::BAnd, Op::BOr, Op::BXor] {
            let mut v = [0u64; 2];
            let p = v.as_mut_ptr() as *mut u8;
            let e = unsafe { combine(dtype, op, p, p.add(8), 1) }.unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidArgument);
            assert!(
                e.message.contains(op.name()) && e.message.contains(dtype.name()),
                "{e:?}"
            );
            assert!(unsafe { finish(dtype, op, p, 1, 2) }.is_err());
        }
    }
}

#[test]
fn average_of_floats_divides_at_the_end() {
    let mut out = vec![1.0f32, 2.0, 3.0];
    run(DType::F32, Op::Avg, &mut out, &[2.0, 2.0, 2.0]);
    run(DType::F32, Op::Avg, &mut out, &[0.0, 2.0, 4.0]);
    unsafe { finish(DType::F32, Op::Avg, out.as_mut_ptr() as *mut u8, 3, 3) }.unwrap();
    assert_eq!(out, [1.0, 2.0, 3.0]);
    let mut h = vec![f32_to_f16(3.0)];
    unsafe { finish(DType::F16, Op::Avg, h.as_mut_ptr() as *mut u8, 1, 2) }.unwrap();
    assert_eq!(f16_to_f32(h[0]), 1.5);
    // Not avg: nothing to finish.
    let mut s = vec![6.0f64];
    unsafe { finish(DType::F64, Op::Sum, s.as_mut_ptr() as *mut u8, 1, 4) }.unwrap();
    assert_eq!(s, [6.0]);
}

#[test]
fn out_equal_to_src_combines_each_element_with_itself() {
    let mut v = vec![1.5f32, -2.0, 3.0];
    let p = v.as_mut_ptr() as *mut u8;
    unsafe { combine(DType::F32, Op::Sum, p, p, 3) }.unwrap();
    assert_eq!(v, [3.0, -4.0, 6.0]);
}

#[test]
fn bad_arguments_are_errors() {
    let mut v = vec![0f32; 8];
    let p = v.as_mut_ptr() as *mut u8;
    let bad = |r: monarch_core::Result<()>, what: &str| {
        let e = r.unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
        assert!(e.message.contains(what), "{what}: {}", e.message);
    };
    unsafe {
        bad(
            combine(DType::F32, Op::Sum, std::ptr::null_mut(), p, 1),
            "NULL",
        );
        bad(combine(DType::F32, Op::Sum, p, std::ptr::null(), 1), "NULL");
        bad(
            combine(DType::F32, Op::Sum, p.add(1), p.add(16), 2),
            "aligned",
        );
        bad(combine(DType::F32, Op::Sum, p, p.add(4), 4), "overlap");
        // Nothing to do: no pointer is read.
        combine(
            DType::F32,
            Op::Sum,
            std::ptr::null_mut(),
            std::ptr::null(),
            0,
        )
        .unwrap();
    }
    assert!(DType::from_code(0).is_err() && DType::from_code(11).is_err());
    assert!(Op::from_code(0).is_err() && Op::from_code(9).is_err());
    assert_eq!(Op::from_code(8).unwrap(), Op::BXor);
    assert_eq!(DType::from_code(4).unwrap(), DType::BF16);
}
