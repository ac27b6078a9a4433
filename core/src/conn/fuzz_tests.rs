//! Seeded fuzzing of the runtime's frame reader (`conn::FrameReader`, fed
//! through a real socket pair): random bytes and mutations of valid frames
//! (bit flips, truncation, splices, lying length fields) end in frames and
//! an error, never a panic, and a declared huge size is refused or read
//! only as far as bytes arrive.
//!
//! `MONARCH_FUZZ_CASES=N` multiplies the case count; `MONARCH_FUZZ_SEED=S`
//! replays a run (a failure prints its seed, case and bytes).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use flatbuffers::FlatBufferBuilder;

use super::{frame_bytes as frame, read_stream};
use crate::frame::{FrameError, MAX_HEADER_LEN};
use crate::limits::DEFAULT_MAX_FRAME_PAYLOAD;
use crate::limits::MAX_PAYLOAD_LEN;
use crate::wire::{Envelope, Kind};

#[path = "../../tests/fuzz_support/mod.rs"]
mod fuzz_support;
use fuzz_support::{cases, mutate, seed, Rng};

#[test]
fn the_frame_reader_answers_frames_or_an_error_on_hostile_streams() {
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
        // Frames until the stream ends or fails (read_stream returns then).
        let r = catch_unwind(AssertUnwindSafe(|| {
            read_stream(&input, DEFAULT_MAX_FRAME_PAYLOAD)
        }));
        assert!(
            r.is_ok(),
            "the frame reader panicked: MONARCH_FUZZ_SEED={seed} case {case} input {input:02x?}"
        );
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "the frame reader was slow: MONARCH_FUZZ_SEED={seed} case {case} input {input:02x?}"
        );
    }
    eprintln!(
        "frame reader: {n} cases in {:?} (MONARCH_FUZZ_SEED={seed})",
        start.elapsed()
    );
}

#[test]
fn declared_huge_sizes_are_refused_or_read_only_as_bytes_arrive() {
    // A header length past the limit is refused before any allocation.
    let mut b = ((MAX_HEADER_LEN + 1) as u32).to_le_bytes().to_vec();
    b.extend([0u8; 16]);
    assert!(matches!(
        read_stream(&b, DEFAULT_MAX_FRAME_PAYLOAD).1,
        FrameError::HeaderTooLarge(_)
    ));
    let huge_part = |size: u64| {
        let mut e = Envelope::new(Kind::Message);
        e.actor = "a".into();
        e.part_sizes = vec![size];
        let mut fbb = FlatBufferBuilder::new();
        let h = e.encode(&mut fbb).to_vec();
        let mut f = (h.len() as u32).to_le_bytes().to_vec();
        f.extend(&h);
        f.extend(b"abc");
        f
    };
    // A part over the reader's limit is refused at its header.
    let (frames, end) = read_stream(&huge_part(1 << 34), DEFAULT_MAX_FRAME_PAYLOAD);
    assert!(frames.is_empty());
    assert!(
        matches!(end, FrameError::PayloadTooLarge { declared, .. } if declared == 1 << 34),
        "{end}"
    );
    // One under it (the wire format's own limit) that brings 3 bytes ends
    // with the stream, without reserving the claimed size.
    let t = Instant::now();
    let (frames, end) = read_stream(&huge_part(MAX_PAYLOAD_LEN), MAX_PAYLOAD_LEN);
    assert!(frames.is_empty());
    assert!(matches!(end, FrameError::Closed), "{end}");
    assert!(t.elapsed() < Duration::from_secs(2));
}
