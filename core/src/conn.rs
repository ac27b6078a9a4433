//! One connection to a peer proc: a non-blocking Unix socket with a writer
//! side (frames written by the sending thread itself) and an incremental
//! reader that any thread may drive.
//!
//! Why any thread: a background thread parked in `poll` takes a cross-CPU
//! wake-up (tens of microseconds on a small VM) before it can read a reply.
//! A thread that is already spinning while it waits for that reply can read
//! the socket itself and skip that wake-up. Frames are decoded and
//! dispatched while the reader lock is held, so they are handled in order.
//!
//! A TCP stream inside TLS (`Stream::Tls`) takes the same paths, with its
//! bytes encrypted and decrypted by `crate::tls` where the plain paths call
//! `sendmsg` and `recv` (buffered frames are plaintext until flushed).

use parking_lot::Mutex;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::frame::{write_frame_after, Frame, FrameError, MAX_HEADER_LEN};
use crate::limits::max_frame_payload;
use crate::limits::MAX_PARTS;
use crate::socket::{send_vectored, wait_fd};
use crate::transport::Stream;
use crate::wire::Envelope;

/// Parts at least this large are read straight into their own buffer.
const DIRECT_READ_MIN: usize = 64 * 1024;
const READ_CHUNK: usize = 64 * 1024;
/// A part's buffer holds at most this much before any of it arrived, and
/// grows by at least this much (see [`grow_part`]).
const PART_GROW_MIN: usize = 1 << 20;

/// Frames up to this size may wait in the write buffer (see [`Defer`]).
const DEFER_MAX_FRAME: usize = 16 * 1024;
/// The write buffer is sent once it holds this much.
const DEFER_MAX_BYTES: usize = 128 * 1024;
/// Whether a frame may wait in the connection's write buffer, to go out
/// with later frames in one system call (batching under load).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Defer {
    /// Write now.
    Never,
    /// Buffer it: more frames follow soon, and the caller sees to a flush.
    Yes,
}

struct Writer {
    stream: Stream,
    /// Encoded frames not yet written (all small; see `Defer`).
    pending: Vec<u8>,
    /// When the oldest pending frame was buffered.
    pending_since: Option<Instant>,
}

impl Writer {
    fn send(&mut self, header: &[u8], parts: &[&[u8]]) -> io::Result<()> {
        let r = if let Stream::Tls(t) = &self.stream {
            write_frame_after(&mut TlsWriter(t), &self.pending, header, parts)
        } else {
            let mut blocking = BlockingWriter {
                s: &mut self.stream,
            };
            write_frame_after(&mut blocking, &self.pending, header, parts)
        };
        self.pending.clear();
        self.pending_since = None;
        r
    }
}

/// Refuse a frame the reading side would take for a hostile peer and
/// drop the connection over: a header over the fixed limit, a payload over
/// [`max_frame_payload`] (the job's processes share their settings).
fn check_frame(header: &[u8], parts: &[&[u8]]) -> io::Result<()> {
    let refused = if header.len() > MAX_HEADER_LEN {
        FrameError::HeaderTooLarge(header.len())
    } else if parts.len() > MAX_PARTS {
        FrameError::TooManyParts(parts.len())
    } else {
        let declared = parts.iter().map(|p| p.len() as u64).sum::<u64>();
        let limit = max_frame_payload();
        if declared <= limit {
            return Ok(());
        }
        FrameError::PayloadTooLarge { declared, limit }
    };
    Err(io::Error::new(io::ErrorKind::InvalidInput, refused))
}

pub(crate) struct Conn {
    pub peer: String,
    fd: RawFd,
    writer: Mutex<Writer>,
    pub reader: Mutex<FrameReader>,
    closed: AtomicBool,
}

impl Conn {
    /// Wrap a connected stream; `buffered` are bytes already read from it.
    pub fn new(peer: String, stream: impl Into<Stream>, buffered: Vec<u8>) -> io::Result<Conn> {
        Conn::new_or_give_back(peer, stream.into(), buffered).map_err(|(e, _)| e)
    }

    /// `new`, giving the stream back with the error when it fails (the
    /// caller can then record why before the peer sees it close).
    pub fn new_or_give_back(
        peer: String,
        stream: Stream,
        buffered: Vec<u8>,
    ) -> Result<Conn, (io::Error, Stream)> {
        if let Err(e) = stream.set_nonblocking(true) {
            return Err((e, stream));
        }
        let reader = match stream.try_clone() {
            Ok(r) => r,
            Err(e) => return Err((e, stream)),
        };
        Ok(Conn {
            peer,
            fd: stream.as_raw_fd(),
            writer: Mutex::new(Writer {
                stream,
                pending: Vec::new(),
                pending_since: None,
            }),
            reader: Mutex::new(FrameReader {
                stream: reader,
                buf: buffered,
                pos: 0,
                pending: None,
                last_shape: None,
                max_payload: max_frame_payload(),
            }),
            closed: AtomicBool::new(false),
        })
    }

    pub fn fd(&self) -> RawFd {
        self.fd
    }

    /// Whether bytes of the peer's are already here, read before this
    /// connection was set up (by its handshake), which no `poll` on the
    /// socket will report: they must be read without waiting for one.
    pub(crate) fn holds_data(&self) -> bool {
        let r = self.reader.lock();
        if r.pos < r.buf.len() {
            return true;
        }
        match &r.stream {
            Stream::Tls(t) => t.holds_data(),
            _ => false,
        }
    }

    /// Write one frame (after any buffered ones, so order is kept),
    /// waiting for socket space as needed; or, as `defer` allows, buffer it.
    /// Returns whether it was buffered: the caller must then see to a
    /// [`Conn::flush`].
    /// A frame larger than the peer accepts (header or payload) fails this
    /// write alone (`InvalidInput`), before anything is sent or buffered.
    pub fn write(&self, header: &[u8], parts: &[&[u8]], defer: Defer) -> io::Result<bool> {
        check_frame(header, parts)?;
        let mut w = self.writer.lock();
        let size = 4 + header.len() + parts.iter().map(|p| p.len()).sum::<usize>();
        if defer == Defer::Yes
            && size <= DEFER_MAX_FRAME
            && w.pending.len() + size <= DEFER_MAX_BYTES
        {
            w.pending
                .extend_from_slice(&(header.len() as u32).to_le_bytes());
            w.pending.extend_from_slice(header);
            for p in parts {
                w.pending.extend_from_slice(p);
            }
            w.pending_since.get_or_insert_with(Instant::now);
            return Ok(true);
        }
        w.send(header, parts).map(|()| false)
    }

    /// Buffer a small frame (heartbeats) without ever waiting: when another
    /// thread holds the writer or the buffer is full, the frame is dropped
    /// (returns None). Some(()) means buffered; the caller sees to a flush.
    pub fn try_buffer(&self, header: &[u8], parts: &[&[u8]]) -> Option<()> {
        check_frame(header, parts).ok()?;
        let mut w = self.writer.try_lock()?;
        let size = 4 + header.len() + parts.iter().map(|p| p.len()).sum::<usize>();
        if w.pending.len() + size > DEFER_MAX_BYTES {
            return None;
        }
        w.pending
            .extend_from_slice(&(header.len() as u32).to_le_bytes());
        w.pending.extend_from_slice(header);
        for p in parts {
            w.pending.extend_from_slice(p);
        }
        w.pending_since.get_or_insert_with(Instant::now);
        Some(())
    }

    /// Write frames buffered for at least `min_age` (all if None), as far
    /// as the socket takes them **without blocking**; the rest stays
    /// buffered. Returns whether frames remain buffered. A writer lock
    /// held by another thread means "skip", and false: that thread sees to
    /// the buffered frames (a write sends them before its own; a thread
    /// buffering a frame, or another flush that leaves some, marks them for
    /// the I/O thread once it lets go of the lock).
    ///
    /// Never blocking here matters: the threads that flush (a thread about
    /// to wait, the I/O thread) may be the ones that must read next, so the
    /// peer, itself stuck writing to us, can make progress; and the lock's
    /// holder may be stuck on a peer that stopped reading.
    pub fn flush(&self, min_age: Option<Duration>) -> io::Result<bool> {
        let Some(mut w) = self.writer.try_lock() else {
            return Ok(false);
        };
        let Some(since) = w.pending_since else {
            return Ok(false);
        };
        if min_age.is_some_and(|a| since.elapsed() < a) {
            return Ok(true);
        }
        if let Stream::Tls(t) = &w.stream {
            // Buffered frames are encrypted once earlier ciphertext is out.
            let (taken, more) = t.flush_tls(&w.pending)?;
            if taken {
                w.pending.clear();
            }
            if !more {
                w.pending_since = None;
            }
            return Ok(more);
        }
        let fd = w.stream.as_raw_fd();
        let mut sent = 0;
        let result = loop {
            if sent == w.pending.len() {
                break Ok(());
            }
            match send_vectored(fd, &[io::IoSlice::new(&w.pending[sent..])]) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        w.pending.drain(..sent);
        if w.pending.is_empty() {
            w.pending_since = None;
        }
        result.map(|()| !w.pending.is_empty())
    }

    /// Mark closed; returns true for the first caller (who cleans up).
    pub fn mark_closed(&self) -> bool {
        !self.closed.swap(true, Ordering::SeqCst)
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Shut the socket down in both directions (wakes a thread in poll).
    pub fn shutdown(&self) {
        // SAFETY: shutting down a socket this connection owns.
        unsafe { libc::shutdown(self.fd, libc::SHUT_RDWR) };
    }
}

/// Adapts a non-blocking socket to blocking writes by polling for space.
struct BlockingWriter<'a> {
    s: &'a mut Stream,
}

impl io::Write for BlockingWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[io::IoSlice::new(buf)])
    }
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        loop {
            match send_vectored(self.s.as_raw_fd(), bufs) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    wait_fd(self.s.as_raw_fd(), libc::POLLOUT)?;
                }
                other => return other,
            }
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Blocking writes of plaintext into a TLS session on a non-blocking
/// socket (waits for socket space with the session unlocked).
struct TlsWriter<'a>(&'a crate::tls::TlsStream);

impl io::Write for TlsWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.send_plain(&[io::IoSlice::new(buf)], true)
    }
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.0.send_plain(bufs, true)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

struct Pending {
    envelope: Envelope,
    parts: Vec<Vec<u8>>,
    cur: Vec<u8>,
}

/// Incremental frame decoder over a non-blocking socket.
pub(crate) struct FrameReader {
    stream: Stream,
    buf: Vec<u8>,
    pos: usize,
    pending: Option<Pending>,
    /// The last nested shape decoded on this connection (see
    /// `Envelope::decode_cached`).
    last_shape: Option<Arc<[u8]>>,
    /// The largest payload of one frame accepted from the peer; a header
    /// declaring more fails the connection before any part is read.
    max_payload: u64,
}

impl FrameReader {
    /// Read what is available without blocking and hand every complete
    /// frame to `on_frame`, in order. Returns the number of frames, or an
    /// error when the stream ended or was malformed.
    pub fn drain(&mut self, on_frame: &mut dyn FnMut(Frame)) -> Result<usize, FrameError> {
        let mut frames = self.parse(on_frame)?;
        loop {
            let (n, more) = self.read_some()?;
            if n == 0 {
                return Ok(frames);
            }
            frames += self.parse(on_frame)?;
            // A short read took everything the socket had: skip the read
            // that would only say EAGAIN (one syscall per wake-up saved).
            // Anything arriving later makes the socket readable again.
            if !more {
                return Ok(frames);
            }
        }
    }

    /// One non-blocking read of at most `room` bytes; returns (bytes read,
    /// whether more may be ready at once). Zero bytes means nothing
    /// available now.
    fn read_some(&mut self) -> Result<(usize, bool), FrameError> {
        // A large part with nothing buffered: read straight into it.
        if let Some(p) = &mut self.pending {
            let need = p.envelope.part_sizes[p.parts.len()] as usize - p.cur.len();
            if self.pos == self.buf.len() && need >= DIRECT_READ_MIN {
                grow_part(&mut p.cur, need);
                let room = (p.cur.capacity() - p.cur.len()).min(need);
                return recv_some(&self.stream, &mut p.cur, room);
            }
        }
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        } else if self.pos > 0 && self.pos >= self.buf.len() / 2 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        if self.buf.capacity() - self.buf.len() < READ_CHUNK / 2 {
            self.buf.reserve(READ_CHUNK);
        }
        let room = self.buf.capacity() - self.buf.len();
        recv_some(&self.stream, &mut self.buf, room)
    }

    fn parse(&mut self, on_frame: &mut dyn FnMut(Frame)) -> Result<usize, FrameError> {
        let mut frames = 0;
        loop {
            if self.pending.is_none() {
                let avail = &self.buf[self.pos..];
                if avail.len() < 4 {
                    return Ok(frames);
                }
                let hlen = u32::from_le_bytes([avail[0], avail[1], avail[2], avail[3]]) as usize;
                if hlen > MAX_HEADER_LEN {
                    return Err(FrameError::HeaderTooLarge(hlen));
                }
                if avail.len() < 4 + hlen {
                    return Ok(frames);
                }
                let envelope = Envelope::decode_cached(&avail[4..4 + hlen], &mut self.last_shape)?;
                self.pos += 4 + hlen;
                if envelope.part_sizes.len() > MAX_PARTS {
                    return Err(FrameError::TooManyParts(envelope.part_sizes.len()));
                }
                let declared = envelope
                    .part_sizes
                    .iter()
                    .fold(0u64, |a, s| a.saturating_add(*s));
                if declared > self.max_payload {
                    return Err(FrameError::PayloadTooLarge {
                        declared,
                        limit: self.max_payload,
                    });
                }
                let first = envelope.part_sizes.first().copied().unwrap_or(0) as usize;
                self.pending = Some(Pending {
                    parts: Vec::with_capacity(envelope.part_sizes.len()),
                    cur: Vec::with_capacity(first.min(PART_GROW_MIN)),
                    envelope,
                });
            }
            let p = self.pending.as_mut().expect("set above");
            while p.parts.len() < p.envelope.part_sizes.len() {
                let size = p.envelope.part_sizes[p.parts.len()] as usize;
                let take = (size - p.cur.len()).min(self.buf.len() - self.pos);
                p.cur
                    .extend_from_slice(&self.buf[self.pos..self.pos + take]);
                self.pos += take;
                if p.cur.len() < size {
                    return Ok(frames);
                }
                let next = p
                    .envelope
                    .part_sizes
                    .get(p.parts.len() + 1)
                    .copied()
                    .unwrap_or(0) as usize;
                let done =
                    std::mem::replace(&mut p.cur, Vec::with_capacity(next.min(PART_GROW_MIN)));
                p.parts.push(done);
            }
            let p = self.pending.take().expect("set above");
            on_frame(Frame {
                envelope: p.envelope,
                parts: p.parts,
            });
            frames += 1;
        }
    }
}

/// Make room in `cur`, a part with `need` bytes still to come, for the next
/// read straight into it. It grows by what is still to come, but by no more
/// than 3 times what has arrived (at least [`PART_GROW_MIN`]), so its
/// capacity stays within 4 times the bytes the peer really sent (plus
/// 1 MiB), whatever size the header declared; a large part is reallocated
/// a few times on the way (4x steps), not once per read.
fn grow_part(cur: &mut Vec<u8>, need: usize) {
    if cur.capacity() - cur.len() >= need.min(DIRECT_READ_MIN) {
        return;
    }
    cur.reserve_exact(need.min((3 * cur.len()).max(PART_GROW_MIN)));
}

/// Non-blocking read of up to `room` bytes (plaintext) into `v`'s spare
/// capacity; returns (bytes, whether more may be ready at once).
#[inline]
fn recv_some(s: &Stream, v: &mut Vec<u8>, room: usize) -> Result<(usize, bool), FrameError> {
    match s {
        Stream::Tls(t) => t.recv_plain(v, room),
        _ => recv_into(s, v, room).map(|n| (n, n >= room)),
    }
}

/// Non-blocking read of up to `room` bytes into `v`'s spare capacity.
/// Ok(0) means would-block; end of stream is `FrameError::Closed`.
fn recv_into(s: &Stream, v: &mut Vec<u8>, room: usize) -> Result<usize, FrameError> {
    let room = room.min(v.capacity() - v.len());
    if room == 0 {
        return Ok(0);
    }
    loop {
        // SAFETY: reads at most `room` bytes into the vector's spare
        // capacity, then extends its length by exactly what was read.
        let n = unsafe {
            let dst = v.as_mut_ptr().add(v.len());
            libc::recv(
                s.as_raw_fd(),
                dst as *mut libc::c_void,
                room,
                libc::MSG_DONTWAIT,
            )
        };
        if n > 0 {
            // SAFETY: the kernel initialized n bytes past the old length.
            unsafe { v.set_len(v.len() + n as usize) };
            return Ok(n as usize);
        }
        if n == 0 {
            return Err(FrameError::Closed);
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock => return Ok(0),
            io::ErrorKind::Interrupted => continue,
            _ => return Err(e.into()),
        }
    }
}

/// A whole frame of `kind` for actor "a", method "m", with `parts`, as a
/// peer writes it. For the frame tests and the frame fuzz target.
#[cfg(test)]
pub(crate) fn frame_bytes(kind: crate::wire::Kind, parts: &[&[u8]]) -> Vec<u8> {
    let mut e = Envelope::new(kind);
    e.actor = "a".into();
    e.method = "m".into();
    e.part_sizes = parts.iter().map(|p| p.len() as u64).collect();
    let mut fbb = flatbuffers::FlatBufferBuilder::new();
    let h = e.encode(&mut fbb).to_vec();
    let mut out = Vec::new();
    crate::frame::write_frame(&mut out, &h, parts).expect("frame");
    out
}

/// Every frame the runtime's reader ([`FrameReader`], over a real socket
/// pair, with a payload limit of `max_payload`) makes of `bytes` followed by
/// the end of the stream, and the error it ended with (`Closed` for a clean
/// end). For the frame tests and the frame fuzz target.
#[cfg(test)]
pub(crate) fn read_stream(bytes: &[u8], max_payload: u64) -> (Vec<Frame>, FrameError) {
    use std::io::Write;
    use std::os::unix::net::UnixStream;
    let (mut a, b) = UnixStream::pair().expect("socketpair");
    let conn = Conn::new("peer".into(), b, Vec::new()).expect("conn");
    conn.reader.lock().max_payload = max_payload;
    // Small inputs fit in the socket buffer; larger ones need a writer.
    let writer = if bytes.len() <= 64 * 1024 {
        a.write_all(bytes).expect("write");
        let _ = a.shutdown(std::net::Shutdown::Write);
        None
    } else {
        let bytes = bytes.to_vec();
        Some(std::thread::spawn(move || {
            let _ = a.write_all(&bytes);
            let _ = a.shutdown(std::net::Shutdown::Write);
        }))
    };
    let mut frames = Vec::new();
    let end = loop {
        match conn.reader.lock().drain(&mut |f| frames.push(f)) {
            Ok(_) => {
                wait_fd(conn.fd(), libc::POLLIN).expect("poll");
            }
            Err(e) => break e,
        }
    };
    drop(conn);
    if let Some(w) = writer {
        w.join().expect("writer");
    }
    (frames, end)
}

#[cfg(test)]
mod frame_tests;
#[cfg(test)]
mod fuzz_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::write_frame;
    use crate::wire::Kind;
    use flatbuffers::FlatBufferBuilder;
    use std::io::Write;
    use std::os::unix::net::UnixStream;

    fn header(parts: &[&[u8]], tag: &str) -> Vec<u8> {
        let mut e = Envelope::new(Kind::Message);
        e.actor = tag.into();
        e.part_sizes = parts.iter().map(|p| p.len() as u64).collect();
        let mut fbb = FlatBufferBuilder::new();
        e.encode(&mut fbb).to_vec()
    }

    #[test]
    fn frames_arrive_in_order_across_partial_reads() {
        let (a, b) = UnixStream::pair().unwrap();
        let conn = Conn::new("peer".into(), b, Vec::new()).unwrap();
        let big = vec![7u8; 300_000];
        let mut bytes = Vec::new();
        for i in 0..20 {
            let small = format!("m{i}");
            let parts: Vec<&[u8]> = if i % 5 == 0 {
                vec![small.as_bytes(), &big]
            } else {
                vec![small.as_bytes()]
            };
            write_frame(&mut bytes, &header(&parts, &small), &parts).unwrap();
        }
        let writer = std::thread::spawn(move || {
            let mut a = a;
            // Dribble the bytes in odd-sized pieces.
            for chunk in bytes.chunks(7777) {
                a.write_all(chunk).unwrap();
            }
        });
        let mut got = Vec::new();
        let mut r = conn.reader.lock();
        while got.len() < 20 {
            match r.drain(&mut |f: Frame| got.push(f)) {
                Ok(_) | Err(FrameError::Closed) => {}
                Err(e) => panic!("{e}"),
            }
            std::thread::yield_now();
        }
        writer.join().unwrap();
        assert_eq!(got.len(), 20);
        for (i, f) in got.iter().enumerate() {
            assert_eq!(f.envelope.actor, format!("m{i}"));
            assert_eq!(f.parts[0], format!("m{i}").as_bytes());
            if i % 5 == 0 {
                assert_eq!(f.parts[1], big);
            }
        }
        assert!(matches!(r.drain(&mut |_| {}), Err(FrameError::Closed)));
    }

    #[test]
    fn a_header_too_large_fails_that_write_and_keeps_the_connection() {
        let (a, b) = UnixStream::pair().unwrap();
        let sender = Conn::new("peer".into(), a, Vec::new()).unwrap();
        let receiver = Conn::new("peer".into(), b, Vec::new()).unwrap();
        let huge = vec![0u8; MAX_HEADER_LEN + 1];
        for defer in [Defer::Never, Defer::Yes] {
            let e = sender.write(&huge, &[], defer).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        }
        assert!(sender.try_buffer(&huge, &[]).is_none());
        let parts: [&[u8]; 1] = [b"after"];
        sender
            .write(&header(&parts, "ok"), &parts, Defer::Never)
            .unwrap();
        let mut got = Vec::new();
        let mut r = receiver.reader.lock();
        while got.is_empty() {
            r.drain(&mut |f: Frame| got.push(f)).unwrap();
            std::thread::yield_now();
        }
        assert_eq!(got[0].envelope.actor, "ok");
        assert_eq!(got[0].parts[0], b"after");
    }

    #[test]
    fn writing_to_a_closed_peer_is_an_error_not_a_signal() {
        // Restore SIGPIPE's default (the Rust test harness ignores it), as in
        // a C host program: a plain write would now kill the process.
        // SAFETY: changing this process's signal disposition in a test.
        let old = unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
        let (a, b) = UnixStream::pair().unwrap();
        let conn = Conn::new("peer".into(), b, Vec::new()).unwrap();
        drop(a);
        let r = conn.write(b"header", &[b"part"], Defer::Never);
        // SAFETY: restoring the previous disposition.
        unsafe { libc::signal(libc::SIGPIPE, old) };
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EPIPE));
    }

    #[test]
    fn batched_frames_wait_for_a_flush_and_keep_their_order() {
        let (a, b) = UnixStream::pair().unwrap();
        let sender = Conn::new("peer".into(), a, Vec::new()).unwrap();
        let receiver = Conn::new("peer".into(), b, Vec::new()).unwrap();
        let mut got: Vec<String> = Vec::new();
        let read = |got: &mut Vec<String>| {
            let _ = receiver
                .reader
                .lock()
                .drain(&mut |f: Frame| got.push(f.envelope.actor.clone()));
        };
        let send = |tag: &str, defer| sender.write(&header(&[], tag), &[], defer).unwrap();
        assert!(send("m0", Defer::Yes));
        assert!(send("m1", Defer::Yes));
        read(&mut got);
        assert!(got.is_empty(), "batched frames were sent early: {got:?}");
        // Too young for an aged flush; a full flush sends them, in order.
        assert!(sender.flush(Some(Duration::from_secs(60))).unwrap());
        assert!(!sender.flush(None).unwrap());
        read(&mut got);
        assert_eq!(got, ["m0", "m1"]);
        // A frame written at once goes after the batched ones.
        assert!(send("m2", Defer::Yes));
        assert!(!send("m3", Defer::Never));
        read(&mut got);
        assert_eq!(got, ["m0", "m1", "m2", "m3"]);
        // Large frames are never batched.
        let big = vec![0u8; DEFER_MAX_FRAME];
        assert!(!sender
            .write(&header(&[&big], "m4"), &[&big], Defer::Yes)
            .unwrap());
    }

    /// Both ends of a mutual-TLS TCP connection, authenticated as the
    /// runtime does it (job-secret handshake inside TLS), as Conns.
    fn tls_pair() -> (Conn, Conn) {
        use crate::tls::TlsConfig;
        use crate::transport::Stream;
        let (ca, leaves) = crate::tls::tests::test_pki(2);
        let cfg = |i: usize| {
            TlsConfig::from_pem(
                leaves[i].0.as_bytes(),
                leaves[i].1.as_bytes(),
                ca.as_bytes(),
            )
            .unwrap()
        };
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        let mut ss = Stream::tcp(s, Some(&cfg(0)), true).unwrap();
        let mut cs = Stream::tcp(c, Some(&cfg(1)), false).unwrap();
        for st in [&ss, &cs] {
            st.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        }
        let t = std::thread::spawn(move || {
            crate::auth::accept_handshake(&mut ss, b"k", "server").unwrap();
            ss
        });
        crate::auth::connect_handshake(&mut cs, b"k", "client").unwrap();
        let ss = t.join().unwrap();
        for st in [&ss, &cs] {
            st.set_read_timeout(None).unwrap();
        }
        (
            Conn::new("client".into(), ss, Vec::new()).unwrap(),
            Conn::new("server".into(), cs, Vec::new()).unwrap(),
        )
    }

    /// Read frames until `n` arrived, sleeping in poll between reads: a
    /// frame left decrypted-but-unread inside the TLS session would never
    /// make the socket readable again, and this fails instead of hanging.
    fn read_frames(conn: &Conn, n: usize) -> Vec<Frame> {
        let mut got = Vec::new();
        while got.len() < n {
            let r = conn.reader.lock().drain(&mut |f| got.push(f));
            r.unwrap_or_else(|e| panic!("after {} frames: {e}", got.len()));
            if got.len() == n {
                break;
            }
            let mut p = libc::pollfd {
                fd: conn.fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let r = unsafe { libc::poll(&mut p, 1, 20_000) };
            assert!(r > 0, "stuck after {} of {n} frames", got.len());
        }
        got
    }

    #[test]
    fn tls_frames_arrive_in_order_both_ways_batched_or_not() {
        let (a, b) = tls_pair();
        let (a, b) = (Arc::new(a), Arc::new(b));
        const N: usize = 60;
        let big = Arc::new(vec![5u8; 1 << 20]);
        // Both ends send at once (each also reads on another thread), so
        // one session is encrypting and decrypting concurrently, and
        // writers wait for socket space while the peer is busy writing.
        let send = |c: Arc<Conn>, big: Arc<Vec<u8>>| {
            std::thread::spawn(move || {
                for i in 0..N {
                    let tag = format!("m{i}");
                    let parts: Vec<&[u8]> = if i % 7 == 0 {
                        vec![tag.as_bytes(), &big[..]]
                    } else {
                        vec![tag.as_bytes()]
                    };
                    let defer = if i % 3 == 0 { Defer::Yes } else { Defer::Never };
                    c.write(&header(&parts, &tag), &parts, defer).unwrap();
                    if i % 10 == 9 {
                        while c.flush(None).unwrap() {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    }
                }
                while c.flush(None).unwrap() {
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
        };
        let ta = send(a.clone(), big.clone());
        let tb = send(b.clone(), big.clone());
        let rb = {
            let b = b.clone();
            std::thread::spawn(move || read_frames(&b, N))
        };
        let got_a = read_frames(&a, N);
        let got_b = rb.join().unwrap();
        ta.join().unwrap();
        tb.join().unwrap();
        for got in [got_a, got_b] {
            assert_eq!(got.len(), N);
            for (i, f) in got.iter().enumerate() {
                assert_eq!(f.envelope.actor, format!("m{i}"));
                if i % 7 == 0 {
                    assert!(f.parts[1] == *big);
                }
            }
        }
        // Closing one end is a clean end for the other.
        a.shutdown();
        let mut end = None;
        while end.is_none() {
            match b.reader.lock().drain(&mut |_| {}) {
                Ok(_) => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => end = Some(e),
            }
        }
        assert!(matches!(end, Some(FrameError::Closed)), "{end:?}");
    }

    #[test]
    fn a_part_takes_memory_as_its_bytes_arrive_not_as_declared() {
        // A part declared at 1 GiB (under the limit) of which 3 MiB come,
        // straight from the socket and through the read buffer.
        let (a, b) = UnixStream::pair().unwrap();
        let conn = Conn::new("peer".into(), b, Vec::new()).unwrap();
        let mut e = Envelope::new(Kind::Message);
        e.actor = "big".into();
        e.part_sizes = vec![1 << 30];
        let mut fbb = FlatBufferBuilder::new();
        let h = e.encode(&mut fbb).to_vec();
        const SENT: usize = 3 << 20;
        let writer = std::thread::spawn(move || {
            let mut a = a;
            a.write_all(&(h.len() as u32).to_le_bytes()).unwrap();
            a.write_all(&h).unwrap();
            for chunk in vec![1u8; SENT].chunks(100_000) {
                a.write_all(chunk).unwrap();
            }
            a
        });
        let mut r = conn.reader.lock();
        let mut most = 0;
        loop {
            r.drain(&mut |_| panic!("a frame from a part not yet complete"))
                .unwrap();
            if let Some(p) = &r.pending {
                most = most.max(p.cur.capacity());
                if p.cur.len() == SENT {
                    break;
                }
            }
            wait_fd(conn.fd(), libc::POLLIN).unwrap();
        }
        let _a = writer.join().unwrap();
        assert!(
            most <= 4 * SENT + PART_GROW_MIN,
            "{most} bytes held for {SENT} received"
        );
    }

    #[test]
    fn a_payload_over_the_limit_fails_that_write_and_keeps_the_connection() {
        let (a, b) = UnixStream::pair().unwrap();
        let sender = Conn::new("peer".into(), a, Vec::new()).unwrap();
        let receiver = Conn::new("peer".into(), b, Vec::new()).unwrap();
        let parts: Vec<&[u8]> = vec![&[]; MAX_PARTS + 1];
        let e = sender
            .write(&header(&parts, "many"), &parts, Defer::Never)
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        assert!(e.to_string().contains("parts"), "{e}");
        // A payload over the limit, as views of one 1 MiB buffer (the
        // check adds up the part lengths only).
        let limit = max_frame_payload() as usize;
        let big = vec![0u8; 1 << 20];
        let many: Vec<&[u8]> = vec![&big; limit / big.len() + 1];
        let e = sender
            .write(&header(&many, "big"), &many, Defer::Never)
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        assert!(
            e.to_string().contains(crate::limits::MAX_FRAME_PAYLOAD_VAR),
            "{e}"
        );
        let ok: [&[u8]; 1] = [b"after"];
        sender.write(&header(&ok, "ok"), &ok, Defer::Never).unwrap();
        let mut got = Vec::new();
        let mut r = receiver.reader.lock();
        loop {
            r.drain(&mut |f: Frame| got.push(f)).unwrap();
            if !got.is_empty() {
                break;
            }
            wait_fd(receiver.fd(), libc::POLLIN).unwrap();
        }
        assert_eq!(got[0].envelope.actor, "ok");
    }

    #[test]
    fn hostile_header_is_an_error() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let conn = Conn::new("peer".into(), b, Vec::new()).unwrap();
        a.write_all(&u32::MAX.to_le_bytes()).unwrap();
        let r = conn.reader.lock().drain(&mut |_| {});
        assert!(matches!(r, Err(FrameError::HeaderTooLarge(_))));
    }
}
