//! The input generator shared by the fuzz tests (`core/tests/fuzz_wire.rs`
//! and `core/src/conn/fuzz_tests.rs`, which includes this file by path):
//! a seeded PRNG, the case-count and seed settings, and the mutator.

// Each test binary uses part of this module.
#![allow(dead_code)]

/// splitmix64: small, fast, and replayable from one seed.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    /// `n` random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// The run's seed: `MONARCH_FUZZ_SEED`, else a fixed one, so `make test`
/// gives the same result every run.
pub fn seed() -> u64 {
    match std::env::var("MONARCH_FUZZ_SEED") {
        Ok(s) => s.parse().expect("MONARCH_FUZZ_SEED is a u64"),
        Err(_) => 0x6d6f_6e61_7263_6821,
    }
}

/// `base` cases times the `MONARCH_FUZZ_CASES` multiplier.
pub fn cases(base: usize) -> usize {
    let m: usize = std::env::var("MONARCH_FUZZ_CASES")
        .ok()
        .map(|s| s.parse().expect("MONARCH_FUZZ_CASES is a count multiplier"))
        .unwrap_or(1);
    base * m
}

/// Random bytes (one time in eight, up to `max_random` of them), else a
/// valid input with one to four mutations: a bit flip, a truncation, a
/// splice from another valid input, a 32- or 64-bit field (at the start,
/// where frames keep their header length, or anywhere: offsets, lengths,
/// part sizes) set to an edge value, a byte overwritten, or a random tail.
pub fn mutate(rng: &mut Rng, valid: &[Vec<u8>], max_random: usize) -> Vec<u8> {
    if rng.below(8) == 0 {
        let n = rng.below(max_random);
        return rng.bytes(n);
    }
    let mut b = valid[rng.below(valid.len())].clone();
    for _ in 0..1 + rng.below(4) {
        match rng.below(6) {
            0 if !b.is_empty() => {
                let i = rng.below(b.len());
                b[i] ^= 1 << rng.below(8);
            }
            1 if !b.is_empty() => {
                let n = rng.below(b.len());
                b.truncate(n);
            }
            2 => {
                let other = &valid[rng.below(valid.len())];
                let from = rng.below(other.len());
                let to = from + rng.below(other.len() - from + 1);
                let at = rng.below(b.len() + 1);
                b.splice(at..at, other[from..to].iter().copied());
            }
            3 if b.len() >= 8 => {
                let w = if rng.below(2) == 0 { 4 } else { 8 };
                let i = if rng.below(4) == 0 {
                    0
                } else {
                    rng.below(b.len() - w + 1)
                };
                let v: u64 = match rng.below(6) {
                    0 => 0,
                    1 => u64::MAX,
                    2 => u32::MAX as u64,
                    3 => 0x7fff_ffff,
                    4 => b.len() as u64 + rng.below(16) as u64,
                    _ => rng.next(),
                };
                b[i..i + w].copy_from_slice(&v.to_le_bytes()[..w]);
            }
            4 if !b.is_empty() => {
                let i = rng.below(b.len());
                b[i] = rng.next() as u8;
            }
            _ => {
                let n = rng.below(16);
                let tail = rng.bytes(n);
                b.extend(tail);
            }
        }
    }
    b
}
