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

#[path = "../../tests/fuzz_support/mod.rs"]
mod fuzz_support;
use fuzz_support::{cases, mutate, seed, Rng};

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
        let input = mutate(&mut rng, &valid, 256);
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
