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
use crate::limits::MAX_PARTS;

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
