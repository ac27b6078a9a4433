//! Seeded fuzzing of `read_frame` over in-memory streams: random bytes and
//! mutations of valid frames (bit flips, truncation, splices, lying length
//! fields) are Ok or Err, never a panic, and a declared huge size is
//! refused or read only as far as bytes arrive.
//!
//! `MONARCH_FUZZ_CASES=N` multiplies the case count; `MONARCH_FUZZ_SEED=S`
//! replays a run (a failure prints its seed, case and bytes).

use std::io::Cursor;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use flatbuffers::FlatBufferBuilder;

use super::{read_frame, write_frame, FrameError, MAX_HEADER_LEN};
use crate::wire::{Envelope, Kind};

/// splitmix64: small, fast, and replayable from one seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn seed() -> u64 {
    std::env::var("MONARCH_FUZZ_SEED")
        .map(|s| s.parse().expect("MONARCH_FUZZ_SEED is a u64"))
        .unwrap_or(0x6d6f_6e61_7263_6821)
}

fn cases(base: usize) -> usize {
    let m: usize = std::env::var("MONARCH_FUZZ_CASES")
        .map(|s| s.parse().expect("MONARCH_FUZZ_CASES is a count multiplier"))
        .unwrap_or(1);
    base * m
}

fn frame(kind: Kind, parts: &[&[u8]]) -> Vec<u8> {
    let mut e = Envelope::new(kind);
    e.actor = "a".into();
    e.method = "m".into();
    e.part_sizes = parts.iter().map(|p| p.len() as u64).collect();
    let mut fbb = FlatBufferBuilder::new();
    let h = e.encode(&mut fbb).to_vec();
    let mut out = Vec::new();
    write_frame(&mut out, &h, parts).unwrap();
    out
}

fn mutate(rng: &mut Rng, valid: &[Vec<u8>]) -> Vec<u8> {
    if rng.below(8) == 0 {
        let n = rng.below(256);
        return (0..n).map(|_| rng.next() as u8).collect();
    }
    let mut b = valid[rng.below(valid.len())].clone();
    for _ in 0..1 + rng.below(4) {
        match rng.below(5) {
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
                // A lying length: the frame's header length, or any u32/u64
                // in the header (a part size), set to an edge value.
                let i = if rng.below(2) == 0 {
                    0
                } else {
                    rng.below(b.len() - 7)
                };
                let v: u64 = match rng.below(4) {
                    0 => u64::MAX,
                    1 => 1 << 35,
                    2 => u32::MAX as u64,
                    _ => rng.next(),
                };
                let w = if rng.below(2) == 0 { 4 } else { 8 };
                b[i..i + w].copy_from_slice(&v.to_le_bytes()[..w]);
            }
            _ => {
                let i = rng.below(b.len() + 1);
                b.insert(i, rng.next() as u8);
            }
        }
    }
    b
}

#[test]
fn read_frame_answers_ok_or_err_on_hostile_streams() {
    let seed = seed();
    let mut rng = Rng(seed);
    let valid = vec![
        frame(Kind::Message, &[b"hello", b"", b"world!"]),
        frame(Kind::Reply, &[]),
        frame(Kind::Heartbeat, &[&[7u8; 40]]),
    ];
    let n = cases(200_000);
    let start = Instant::now();
    for case in 0..n {
        let input = mutate(&mut rng, &valid);
        let t = Instant::now();
        let r = catch_unwind(AssertUnwindSafe(|| {
            let mut c = Cursor::new(&input[..]);
            // Read frames until the stream ends or fails.
            for _ in 0..input.len() + 1 {
                if read_frame(&mut c).is_err() {
                    break;
                }
            }
        }));
        assert!(
            r.is_ok(),
            "read_frame panicked: MONARCH_FUZZ_SEED={seed} case {case} input {input:02x?}"
        );
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "read_frame was slow: MONARCH_FUZZ_SEED={seed} case {case} input {input:02x?}"
        );
    }
    eprintln!(
        "read_frame: {n} cases in {:?} (MONARCH_FUZZ_SEED={seed})",
        start.elapsed()
    );
}

#[test]
fn declared_huge_sizes_are_refused_or_read_only_as_bytes_arrive() {
    // A header length past the limit is refused before any allocation.
    let mut b = ((MAX_HEADER_LEN + 1) as u32).to_le_bytes().to_vec();
    b.extend([0u8; 16]);
    assert!(matches!(
        read_frame(&mut Cursor::new(b)),
        Err(FrameError::HeaderTooLarge(_))
    ));
    // A part that claims 16 GiB but brings 3 bytes ends in an error without
    // reserving the claimed size (the reservation is capped).
    let mut e = Envelope::new(Kind::Message);
    e.actor = "a".into();
    e.part_sizes = vec![1 << 34];
    let mut fbb = FlatBufferBuilder::new();
    let h = e.encode(&mut fbb).to_vec();
    let mut f = (h.len() as u32).to_le_bytes().to_vec();
    f.extend(&h);
    f.extend(b"abc");
    let t = Instant::now();
    assert!(read_frame(&mut Cursor::new(f)).is_err());
    assert!(t.elapsed() < Duration::from_secs(2));
}
