//! Combine kernels against memcpy, in cache (a block of the reduce loop)
//! and from memory (64 MiB): `cargo bench -p monarch-tensor --bench
//! combine`. A kernel LLVM vectorised runs near memcpy speed in memory
//! and several elements per cycle in cache.

use std::time::Instant;

use monarch_tensor::{combine, DType, Op};

fn best(reps: usize, mut f: impl FnMut()) -> f64 {
    (0..reps)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64()
        })
        .fold(f64::MAX, f64::min)
}

fn main() {
    for (label, bytes, reps) in [
        ("in cache, 64 KiB", 64 << 10, 2000),
        ("in memory, 64 MiB", 64 << 20, 10),
    ] {
        let a = vec![1u8; bytes];
        let mut b = vec![2u8; bytes];
        let copy = best(reps, || {
            b.copy_from_slice(&a);
            std::hint::black_box(&b);
        });
        println!("{label}: memcpy {:.1} GB/s", bytes as f64 / copy / 1e9);
        for (dtype, op) in [
            (DType::F32, Op::Sum),
            (DType::F32, Op::Max),
            (DType::F64, Op::Sum),
            (DType::F16, Op::Sum),
            (DType::BF16, Op::Sum),
            (DType::I32, Op::Sum),
            (DType::I8, Op::Max),
        ] {
            let n = bytes / dtype.size();
            let t = best(reps, || unsafe {
                combine(dtype, op, b.as_mut_ptr(), a.as_ptr(), n).unwrap();
                std::hint::black_box(&b);
            });
            println!(
                "  {:>8} {:<4} {:6.1} GB/s of output ({:.2}x memcpy)",
                dtype.name(),
                op.name(),
                bytes as f64 / t / 1e9,
                copy / t
            );
        }
    }
}
