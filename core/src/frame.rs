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
/// Largest total payload of one frame.
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
    /// The parts add up to more than the reader accepts.
    #[error("frame payload too large or too many parts")]
    PayloadTooLarge,
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

/// Read one frame. `Closed` means a clean end of stream at a frame boundary.
#[cfg(test)]
pub(crate) fn read_frame<R: io::Read>(r: &mut R) -> Result<Frame, FrameError> {
    use std::io::Read;
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Err(FrameError::Closed),
        Err(e) => return Err(e.into()),
    }
    let header_len = u32::from_le_bytes(len) as usize;
    if header_len > MAX_HEADER_LEN {
        return Err(FrameError::HeaderTooLarge(header_len));
    }
    let mut header = vec![0u8; header_len];
    r.read_exact(&mut header)?;
    let envelope = Envelope::decode(&header)?;
    if envelope.part_sizes.len() > MAX_PARTS {
        return Err(FrameError::PayloadTooLarge);
    }
    let mut total: u64 = 0;
    for s in &envelope.part_sizes {
        total = total.saturating_add(*s);
    }
    if total > MAX_PAYLOAD_LEN {
        return Err(FrameError::PayloadTooLarge);
    }
    let mut parts = Vec::with_capacity(envelope.part_sizes.len());
    for &s in &envelope.part_sizes {
        // Reserve up to a cap and grow past it only as bytes really arrive,
        // so a lying size costs at most the cap.
        let mut p = Vec::with_capacity(s.min(1 << 28) as usize);
        let got = r.by_ref().take(s).read_to_end(&mut p)?;
        if (got as u64) != s {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
        }
        parts.push(p);
    }
    Ok(Frame { envelope, parts })
}

#[cfg(test)]
mod fuzz_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Kind;
    use flatbuffers::FlatBufferBuilder;
    use std::io::Cursor;

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
        let mut c = Cursor::new(bytes);
        let f = read_frame(&mut c).unwrap();
        assert_eq!(f.envelope.actor, "a");
        assert_eq!(f.parts, vec![b"hello".to_vec(), vec![], b"world!".to_vec()]);
        let f = read_frame(&mut c).unwrap();
        assert!(f.parts.is_empty());
        assert!(matches!(read_frame(&mut c), Err(FrameError::Closed)));
    }

    #[test]
    fn truncated_and_hostile_frames_are_errors() {
        let bytes = frame_bytes(&[b"hello"]);
        for cut in 1..bytes.len() {
            let r = read_frame(&mut Cursor::new(&bytes[..cut]));
            assert!(r.is_err(), "cut at {cut} accepted");
        }
        let huge = (u32::MAX).to_le_bytes().to_vec();
        assert!(matches!(
            read_frame(&mut Cursor::new(huge)),
            Err(FrameError::HeaderTooLarge(_))
        ));
        let mut junk = 8u32.to_le_bytes().to_vec();
        junk.extend([0xffu8; 8]);
        assert!(matches!(
            read_frame(&mut Cursor::new(junk)),
            Err(FrameError::Decode(_))
        ));
    }
}
