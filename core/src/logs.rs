//! Proc output streamed back to the controller.
//!
//! Host agents capture the stdout and stderr of every proc they start and
//! send them, line by line, to the controller, which prints each line to
//! its own stdout or stderr with the proc's rank as prefix
//! (`[rank 3] text`). Local procs' output is captured the same way (pipes
//! read by the controller) unless `MONARCH_PROC_OUTPUT=inherit`, which
//! lets them write to the controller's stdout/stderr directly. With an aggregation window, identical lines arriving
//! within the window are printed once: `[8 similar lines] text`.
//! Options are per process (one runtime per process).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::io::Write;
use std::sync::OnceLock;
use std::time::Duration;

/// A line of output: (from stderr, text).
type Line = (bool, Vec<u8>);

struct State {
    stream: bool,
    window: Option<Duration>,
    /// Lines waiting for the end of the window, in arrival order:
    /// (stderr, text) -> (count, first rank).
    pending: Vec<(Line, (usize, Option<u64>))>,
    index: HashMap<Line, usize>,
    flusher: bool,
}

fn state() -> &'static Mutex<State> {
    static S: OnceLock<Mutex<State>> = OnceLock::new();
    S.get_or_init(|| {
        Mutex::new(State {
            stream: true,
            window: None,
            pending: Vec::new(),
            index: HashMap::new(),
            flusher: false,
        })
    })
}

/// Whether remote proc output is printed here, and the aggregation window
/// (None or zero: print every line as it comes).
pub fn set_options(stream_to_client: bool, aggregate_window: Option<Duration>) {
    flush();
    let mut s = state().lock();
    s.stream = stream_to_client;
    s.window = aggregate_window.filter(|w| !w.is_zero());
}

fn print(stderr: bool, prefix: &str, line: &[u8]) {
    let mut buf = Vec::with_capacity(prefix.len() + line.len() + 2);
    buf.extend_from_slice(prefix.as_bytes());
    buf.push(b' ');
    buf.extend_from_slice(line);
    buf.push(b'\n');
    if stderr {
        let _ = std::io::stderr().lock().write_all(&buf);
    } else {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(&buf);
        let _ = out.flush();
    }
}

fn prefix(rank: Option<u64>) -> String {
    match rank {
        Some(r) => format!("[rank {r}]"),
        None => "[proc]".to_string(),
    }
}

/// One line of output of the proc at `rank` (without its newline).
pub(crate) fn emit(rank: Option<u64>, stderr: bool, line: &[u8]) {
    let mut s = state().lock();
    if !s.stream {
        return;
    }
    let Some(window) = s.window else {
        drop(s);
        print(stderr, &prefix(rank), line);
        return;
    };
    let key = (stderr, line.to_vec());
    match s.index.get(&key) {
        Some(&i) => s.pending[i].1 .0 += 1,
        None => {
            let i = s.pending.len();
            s.index.insert(key.clone(), i);
            s.pending.push((key, (1, rank)));
        }
    }
    if !s.flusher {
        s.flusher = true;
        let _ = std::thread::Builder::new()
            .name("monarch-logs".into())
            .spawn(move || {
                std::thread::sleep(window);
                state().lock().flusher = false;
                flush();
            });
    }
}

/// Print every line held for aggregation now.
pub fn flush() {
    let pending = {
        let mut s = state().lock();
        s.index.clear();
        std::mem::take(&mut s.pending)
    };
    for ((stderr, line), (count, rank)) in pending {
        if count > 1 {
            print(stderr, &format!("[{count} similar lines]"), &line);
        } else {
            print(stderr, &prefix(rank), &line);
        }
    }
}

/// Whether local procs' output is piped through [`emit`] (the default) or
/// inherited (`MONARCH_PROC_OUTPUT=inherit`).
pub(crate) fn capture_local() -> bool {
    std::env::var("MONARCH_PROC_OUTPUT").map_or(true, |v| v != "inherit")
}

/// Read a local proc's stdout and stderr line by line into [`emit`].
pub(crate) fn forward_local(
    out: std::process::ChildStdout,
    err: std::process::ChildStderr,
    rank: u64,
) {
    fn pump(pipe: impl std::io::Read + Send + 'static, rank: u64, stderr: bool) {
        let _ = std::thread::Builder::new()
            .name("monarch-output".into())
            .spawn(move || {
                use std::io::BufRead;
                let mut r = std::io::BufReader::new(pipe);
                let mut line = Vec::new();
                loop {
                    line.clear();
                    match r.read_until(b'\n', &mut line) {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {
                            if line.last() == Some(&b'\n') {
                                line.pop();
                            }
                            emit(Some(rank), stderr, &line);
                        }
                    }
                }
            });
    }
    pump(out, rank, false);
    pump(err, rank, true);
}
