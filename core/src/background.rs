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

use tokio::io::AsyncBufReadExt;
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

/// Read the pipe `fd` line by line on the tokio thread: `on_line` gets each
/// line without its newline (the last one also when it has none), then
/// `on_end` runs once at end of file or on a read error.
pub fn for_each_line(
    fd: OwnedFd,
    mut on_line: impl FnMut(&[u8]) + Send + 'static,
    on_end: impl FnOnce() + Send + 'static,
) -> Result<()> {
    spawn(async move {
        // Registered with the reactor from inside the runtime.
        match tokio::net::unix::pipe::Receiver::from_owned_fd(fd) {
            Ok(pipe) => {
                let mut r = tokio::io::BufReader::with_capacity(64 * 1024, pipe);
                let mut line = Vec::new();
                loop {
                    line.clear();
                    match r.read_until(b'\n', &mut line).await {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {
                            if line.last() == Some(&b'\n') {
                                line.pop();
                            }
                            on_line(&line);
                        }
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot watch an output pipe"),
        }
        on_end();
    })
}

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
                move |l| {
                    let name = std::thread::current().name().map(str::to_string);
                    tx.send((i, Some(l.to_vec()), name)).unwrap()
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
}
