//! Length-prefixed multipart frames.
//!
//! A frame is `[u32 little-endian header length][header][part 0][part 1]...`
//! where the header is an `Envelope` flatbuffer listing the part sizes.
//! Parts are written straight from the caller's buffers with `writev`, so a
//! large payload is never copied into an intermediate frame buffer.

use std::io::{self, IoSlice, Write};

use crate::wire::{DecodeError, Envelope};

/// Largest header we accept; headers are small, so anything bigger is a
/// malformed or hostile peer.
pub(crate) const MAX_HEADER_LEN: usize = 1 << 20;
/// Largest total payload of one frame the wire format allows; a runtime's
/// own limit is `limits::max_frame_payload` (at most this).
pub(crate) const MAX_PAYLOAD_LEN: u64 = 1 << 36;
/// Most parts in one frame.
pub(crate) const MAX_PARTS: usize = 1 << 16;

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The peer closed the connection.
    #[error("connection closed")]
    Closed,
    /// The socket failed.
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
    /// The header is larger than the reader accepts.
    #[error("frame header of {0} bytes exceeds the limit of {MAX_HEADER_LEN}")]
    HeaderTooLarge(usize),
    /// The frame has more parts than the reader accepts.
    #[error("a frame of {0} parts exceeds the limit of {MAX_PARTS}")]
    TooManyParts(usize),
    /// The parts add up to more than the reader accepts.
    #[error(
        "a frame of {declared} payload bytes exceeds the limit of {limit} \
         (set {} to raise it)",
        crate::limits::MAX_FRAME_PAYLOAD_VAR
    )]
    PayloadTooLarge {
        /// What the header declares (saturated at u64::MAX).
        declared: u64,
        /// The reader's limit.
        limit: u64,
    },
    /// The header is not a valid Envelope.
    #[error(transparent)]
    Decode(#[from] DecodeError),
}

/// One decoded frame.
#[derive(Debug)]
pub struct Frame {
    /// The decoded header.
    pub envelope: Envelope,
    /// The payload parts, in order.
    pub parts: Vec<Vec<u8>>,
}

/// Write one frame: `header` is an encoded envelope whose part sizes match
/// `parts`. Uses vectored writes and retries partial writes.
pub fn write_frame<W: Write>(w: &mut W, header: &[u8], parts: &[&[u8]]) -> io::Result<()> {
    write_frame_after(w, &[], header, parts)
}

/// Write `prefix` (bytes of earlier, already encoded frames) and then one
/// frame, in as few vectored writes as the kernel allows.
pub(crate) fn write_frame_after<W: Write>(
    w: &mut W,
    prefix: &[u8],
    header: &[u8],
    parts: &[&[u8]],
) -> io::Result<()> {
    let len = (header.len() as u32).to_le_bytes();
    let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(3 + parts.len());
    if !prefix.is_empty() {
        slices.push(IoSlice::new(prefix));
    }
    slices.push(IoSlice::new(&len));
    slices.push(IoSlice::new(header));
    for p in parts {
        if !p.is_empty() {
            slices.push(IoSlice::new(p));
        }
    }
    let mut bufs: &mut [IoSlice<'_>] = &mut slices;
    while !bufs.is_empty() {
        match w.write_vectored(bufs) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod fuzz_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conn::read_stream;
    use crate::wire::Kind;
    use flatbuffers::FlatBufferBuilder;

    fn frame_bytes(parts: &[&[u8]]) -> Vec<u8> {
        let mut e = Envelope::new(Kind::Message);
        e.actor = "a".into();
        e.part_sizes = parts.iter().map(|p| p.len() as u64).collect();
        let mut fbb = FlatBufferBuilder::new();
        let h = e.encode(&mut fbb).to_vec();
        let mut out = Vec::new();
        write_frame(&mut out, &h, parts).unwrap();
        out
    }

    #[test]
    fn multipart_round_trip_and_back_to_back() {
        let mut bytes = frame_bytes(&[b"hello", b"", b"world!"]);
        bytes.extend(frame_bytes(&[]));
        let (frames, end) = read_stream(&bytes, MAX_PAYLOAD_LEN);
        assert!(matches!(end, FrameError::Closed), "{end}");
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[0].envelope.actor, "a");
        assert_eq!(
            frames[0].parts,
            vec![b"hello".to_vec(), vec![], b"world!".to_vec()]
        );
        assert!(frames[1].parts.is_empty());
    }

    #[test]
    fn truncated_and_hostile_frames_are_errors() {
        let bytes = frame_bytes(&[b"hello"]);
        for cut in 1..bytes.len() {
            let (frames, _) = read_stream(&bytes[..cut], MAX_PAYLOAD_LEN);
            assert!(frames.is_empty(), "cut at {cut} accepted");
        }
        let huge = (u32::MAX).to_le_bytes().to_vec();
        assert!(matches!(
            read_stream(&huge, MAX_PAYLOAD_LEN).1,
            FrameError::HeaderTooLarge(_)
        ));
        let mut junk = 8u32.to_le_bytes().to_vec();
        junk.extend([0xffu8; 8]);
        assert!(matches!(
            read_stream(&junk, MAX_PAYLOAD_LEN).1,
            FrameError::Decode(_)
        ));
    }

    #[test]
    fn a_payload_over_the_limit_is_refused_with_its_size_and_the_setting() {
        let bytes = frame_bytes(&[b"hello", b"world"]);
        let (frames, end) = read_stream(&bytes, 9);
        assert!(frames.is_empty());
        assert!(
            matches!(
                end,
                FrameError::PayloadTooLarge {
                    declared: 10,
                    limit: 9
                }
            ),
            "{end}"
        );
        let text = end.to_string();
        assert!(
            text.contains(crate::limits::MAX_FRAME_PAYLOAD_VAR),
            "{text}"
        );
        assert_eq!(read_stream(&bytes, 10).0.len(), 1);
    }
}
