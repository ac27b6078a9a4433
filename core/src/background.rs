//! The process's tokio thread, for work that waits on many descriptors and
//! is off the latency path: reading procs' output pipes (in a controller
//! and in a host agent) and srun's output (the SLURM allocator).
//!
//! One current-thread runtime on one thread, `monarch-tokio`, started on
//! first use and kept for the life of the process: a pipe costs a task,
//! not a thread (a thread per pipe cost two per proc; A/B in
//! docs/architecture.md, "tokio"). Nothing that a caller waits on runs
//! here: the latency path never hands off to this thread.

use std::future::Future;
use std::os::fd::OwnedFd;
use std::sync::OnceLock;

use tokio::io::AsyncReadExt;
use tokio::runtime::Handle;

use crate::error::{Error, ErrorKind, Result};

fn handle() -> Result<&'static Handle> {
    static H: OnceLock<std::result::Result<Handle, String>> = OnceLock::new();
    H.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .map_err(|e| format!("cannot build the tokio runtime: {e}"))?;
        let handle = rt.handle().clone();
        std::thread::Builder::new()
            .name("monarch-tokio".into())
            .spawn(move || rt.block_on(std::future::pending::<()>()))
            .map_err(|e| format!("cannot start the monarch-tokio thread: {e}"))?;
        Ok(handle)
    })
    .as_ref()
    .map_err(|msg| Error::new(ErrorKind::Internal, msg.clone()))
}

/// Run `fut` on the tokio thread.
pub fn spawn(fut: impl Future<Output = ()> + Send + 'static) -> Result<()> {
    handle()?.spawn(fut);
    Ok(())
}

/// Read the pipe `fd` on the tokio thread and hand its lines on in
/// batches: `on_lines` gets every complete line of one read (up to
/// [`MAX_BATCH`]), each without its newline (the last line of the pipe
/// also when it has none); then `on_end` runs once, at end of file or on a
/// read error. Batches let a consumer write many lines with one system
/// call. `on_lines` runs on the tokio thread: while it blocks, no other
/// pipe is read (a consumer that may block uses [`for_each_line_into`]).
pub fn for_each_line(
    fd: OwnedFd,
    mut on_lines: impl FnMut(&[&[u8]]) + Send + 'static,
    on_end: impl FnOnce() + Send + 'static,
) -> Result<()> {
    spawn(async move {
        read_lines(fd, |lines| {
            on_lines(lines);
            std::future::ready(())
        })
        .await;
        on_end();
    })
}

/// Like [`for_each_line`], but each batch is made into an item by `batch`
/// and queued on `sink`, whose own thread consumes it: a consumer that
/// blocks (a peer that stopped reading) holds up only the pipes that feed
/// its sink. While the sink is full, those pipes are not read, so their
/// writers wait (nothing is dropped).
pub fn for_each_line_into<T: Send + 'static>(
    fd: OwnedFd,
    sink: Sink<T>,
    mut batch: impl FnMut(&[&[u8]]) -> T + Send + 'static,
) -> Result<()> {
    spawn(async move {
        read_lines(fd, |lines| {
            let (item, sink) = (batch(lines), sink.clone());
            async move { sink.send(item).await }
        })
        .await;
    })
}

/// Read `fd` to its end, handing on lines as [`for_each_line`] says and
/// awaiting what `on_lines` returns before reading on.
async fn read_lines<F: Future<Output = ()>>(fd: OwnedFd, mut on_lines: impl FnMut(&[&[u8]]) -> F) {
    // Registered with the reactor from inside the runtime.
    let mut pipe = match tokio::net::unix::pipe::Receiver::from_owned_fd(fd) {
        Ok(pipe) => pipe,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch an output pipe");
            return;
        }
    };
    // Bytes read and not handed on yet: the start of a line.
    let mut buf: Vec<u8> = Vec::with_capacity(READ_SIZE);
    loop {
        buf.reserve(READ_SIZE);
        let had = buf.len();
        match pipe.read_buf(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        // Only the new bytes can end a line.
        let Some(end) = buf[had..].iter().rposition(|&b| b == b'\n') else {
            continue;
        };
        let end = had + end;
        let mut pending = Vec::new();
        {
            let mut lines: Vec<&[u8]> = Vec::new();
            for line in buf[..end].split(|&b| b == b'\n') {
                lines.push(line);
                if lines.len() == MAX_BATCH {
                    pending.push(on_lines(&lines));
                    lines.clear();
                }
            }
            if !lines.is_empty() {
                pending.push(on_lines(&lines));
            }
        }
        for f in pending {
            f.await;
        }
        buf.drain(..=end);
    }
    if !buf.is_empty() {
        on_lines(&[&buf]).await;
    }
}

/// A queue of items for one consumer that runs on a thread of its own
/// (e.g. the reports for one controller, written to its socket). Items
/// sent with [`Sink::send`] (from the tokio thread) wait while `capacity`
/// of them are queued; [`Sink::send_now`] never waits (for rare items that
/// must not be held up, such as a proc's exit). The thread ends once every
/// `Sink` (clone) of it is dropped and the queue is empty.
pub struct Sink<T> {
    inner: std::sync::Arc<SinkInner<T>>,
}

struct SinkInner<T> {
    tx: std::sync::mpsc::Sender<(T, bool)>,
    /// Room for items sent with `send`; the consumer gives it back.
    room: std::sync::Arc<tokio::sync::Semaphore>,
}

impl<T> Clone for Sink<T> {
    fn clone(&self) -> Self {
        Sink {
            inner: self.inner.clone(),
        }
    }
}

/// A [`Sink`] that does not keep its thread alive (see [`Sink::downgrade`]).
pub struct WeakSink<T> {
    inner: std::sync::Weak<SinkInner<T>>,
}

impl<T: Send + 'static> Sink<T> {
    /// A sink whose items `consume` gets, in order, on a new thread named
    /// `name`; up to `capacity` items sent with `send` wait in the queue.
    pub fn new(
        name: &str,
        capacity: usize,
        mut consume: impl FnMut(T) + Send + 'static,
    ) -> Result<Sink<T>> {
        let (tx, rx) = std::sync::mpsc::channel::<(T, bool)>();
        let room = std::sync::Arc::new(tokio::sync::Semaphore::new(capacity.max(1)));
        let given_back = room.clone();
        std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                while let Ok((item, counted)) = rx.recv() {
                    consume(item);
                    if counted {
                        given_back.add_permits(1);
                    }
                }
            })
            .map_err(|e| Error::io("cannot start a sink thread", e))?;
        Ok(Sink {
            inner: std::sync::Arc::new(SinkInner { tx, room }),
        })
    }

    /// Queue `item`, waiting while the queue is full.
    pub async fn send(&self, item: T) {
        // The semaphore is never closed.
        if let Ok(permit) = self.inner.room.acquire().await {
            permit.forget();
        }
        // Err: the consumer thread is gone (it panicked); nowhere to go.
        let _ = self.inner.tx.send((item, true));
    }

    /// Queue `item` at once, whatever the queue holds.
    pub fn send_now(&self, item: T) {
        let _ = self.inner.tx.send((item, false));
    }

    /// A handle that gives this sink back while any `Sink` of it lives.
    pub fn downgrade(&self) -> WeakSink<T> {
        WeakSink {
            inner: std::sync::Arc::downgrade(&self.inner),
        }
    }
}

impl<T> WeakSink<T> {
    /// The sink, unless its last `Sink` is gone (its thread then ends).
    pub fn upgrade(&self) -> Option<Sink<T>> {
        self.inner.upgrade().map(|inner| Sink { inner })
    }
}

/// How much is read from a pipe at once.
const READ_SIZE: usize = 64 * 1024;

/// Most lines handed on at once.
pub const MAX_BATCH: usize = 1024;

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::mpsc;

    #[test]
    fn lines_of_many_pipes_are_read_by_one_thread() {
        let (tx, rx) = mpsc::channel();
        let mut writers = Vec::new();
        for i in 0..50 {
            let (r, w) = std::io::pipe().unwrap();
            let (tx, done) = (tx.clone(), tx.clone());
            for_each_line(
                r.into(),
                move |lines| {
                    let name = std::thread::current().name().map(str::to_string);
                    for l in lines {
                        tx.send((i, Some(l.to_vec()), name.clone())).unwrap()
                    }
                },
                move || done.send((i, None, None)).unwrap(),
            )
            .unwrap();
            writers.push(w);
        }
        for (i, w) in writers.iter_mut().enumerate() {
            write!(w, "a{i}\nb{i}").unwrap();
        }
        drop(writers);
        let mut got: Vec<Vec<Vec<u8>>> = vec![Vec::new(); 50];
        let mut ended = 0;
        while ended < 50 {
            match rx.recv().unwrap() {
                (i, Some(line), name) => {
                    assert_eq!(name.as_deref(), Some("monarch-tokio"));
                    got[i].push(line);
                }
                (_, None, _) => ended += 1,
            }
        }
        for (i, lines) in got.iter().enumerate() {
            // In order, the last one without its newline.
            assert_eq!(
                lines,
                &[format!("a{i}").into_bytes(), format!("b{i}").into_bytes()]
            );
        }
    }

    #[test]
    fn long_runs_of_lines_come_in_order_in_bounded_batches() {
        let (tx, rx) = mpsc::channel();
        let (r, mut w) = std::io::pipe().unwrap();
        let done = tx.clone();
        for_each_line(
            r.into(),
            move |lines| {
                assert!(!lines.is_empty() && lines.len() <= MAX_BATCH);
                tx.send(Some(lines.iter().map(|l| l.to_vec()).collect::<Vec<_>>()))
                    .unwrap()
            },
            move || done.send(None).unwrap(),
        )
        .unwrap();
        let text: String = (0..3000).map(|i| format!("{i}\n")).collect();
        w.write_all(text.as_bytes()).unwrap();
        drop(w);
        let mut got = Vec::new();
        while let Some(batch) = rx.recv().unwrap() {
            got.extend(batch);
        }
        let want: Vec<Vec<u8>> = (0..3000).map(|i| i.to_string().into_bytes()).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_line_longer_than_a_read_comes_whole() {
        let (tx, rx) = mpsc::channel();
        let (r, mut w) = std::io::pipe().unwrap();
        let done = tx.clone();
        for_each_line(
            r.into(),
            move |lines| {
                for l in lines {
                    tx.send(Some(l.to_vec())).unwrap()
                }
            },
            move || done.send(None).unwrap(),
        )
        .unwrap();
        let long = vec![b'x'; 5 * READ_SIZE + 7];
        w.write_all(&long).unwrap();
        w.write_all(b"\nshort\n").unwrap();
        drop(w);
        let mut got = Vec::new();
        while let Some(line) = rx.recv().unwrap() {
            got.push(line);
        }
        assert_eq!(got, vec![long, b"short".to_vec()]);
    }

    #[test]
    fn a_blocked_sink_holds_up_only_the_pipes_that_feed_it() {
        // Sink A's consumer blocks until `release` says go; sink B's does not.
        let (release, gate) = mpsc::channel::<()>();
        let (got_a, rx_a) = mpsc::channel();
        let (got_b, rx_b) = mpsc::channel();
        let mut released = false;
        let a = Sink::new("test-sink-a", 2, move |lines: Vec<Vec<u8>>| {
            if !released {
                released = gate.recv().is_ok();
            }
            for l in lines {
                got_a.send(l).unwrap();
            }
        })
        .unwrap();
        let b = Sink::new("test-sink-b", 2, move |lines: Vec<Vec<u8>>| {
            for l in lines {
                got_b.send(l).unwrap();
            }
        })
        .unwrap();
        let weak = a.downgrade();
        let a_now = a.clone();
        let own = |lines: &[&[u8]]| lines.iter().map(|l| l.to_vec()).collect::<Vec<_>>();
        let (ra, mut wa) = std::io::pipe().unwrap();
        let (rb, mut wb) = std::io::pipe().unwrap();
        for_each_line_into(ra.into(), a, own).unwrap();
        for_each_line_into(rb.into(), b, own).unwrap();
        // A's writer fills its sink's queue and then its pipe, and blocks:
        // on a thread of its own.
        let writer = std::thread::spawn(move || {
            for i in 0..200_000 {
                writeln!(wa, "a{i}").unwrap();
            }
        });
        for i in 0..100 {
            writeln!(wb, "b{i}").unwrap();
            assert_eq!(rx_b.recv().unwrap(), format!("b{i}").into_bytes());
        }
        assert!(
            !writer.is_finished(),
            "A's writer should wait on its full pipe"
        );
        drop(wb);
        // An item sent now does not wait for the full queue.
        a_now.send_now(vec![b"now".to_vec()]);
        drop(a_now);
        // Released, every line of A arrives, in order.
        release.send(()).unwrap();
        writer.join().unwrap();
        let mut got: Vec<Vec<u8>> = (0..200_001).map(|_| rx_a.recv().unwrap()).collect();
        let now = got
            .iter()
            .position(|l| l == b"now")
            .expect("the item sent now arrives");
        got.remove(now);
        let want: Vec<Vec<u8>> = (0..200_000).map(|i| format!("a{i}").into_bytes()).collect();
        assert!(got == want, "A's lines arrive whole and in order");
        // Its pipe closed: nothing holds sink A now (its thread ends).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while weak.upgrade().is_some() {
            assert!(
                std::time::Instant::now() < deadline,
                "the sink outlived its pipes"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}
