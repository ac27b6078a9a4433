//! Proc output streamed back to the controller.
//!
//! Host agents capture the stdout and stderr of every proc they start and
//! send them to the controller (the lines of one read in one report),
//! which prints each line to its own stdout or stderr with the proc's
//! rank as prefix (`[rank 3] text`). Local procs' output is captured the same way (pipes
//! read by the controller) unless `MONARCH_PROC_OUTPUT=inherit`, which
//! lets them write to the controller's stdout/stderr directly. With an
//! aggregation window, lines arriving within the window that differ only in
//! numbers (decimal or hex, e.g. steps, losses, ids) are printed once, as
//! the first of them with their count and ranks:
//! `[8 similar lines, ranks 0-7] step 12 loss 0.53`.
//! Options are per process (one runtime per process).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::io::Write;
use std::sync::OnceLock;
use std::time::Duration;

/// A group of similar lines: (from stderr, the text with its numbers
/// taken out).
type Key = (bool, Vec<u8>);

/// Lines of one group seen in the current window.
struct Group {
    stderr: bool,
    /// The first line of the group, as printed.
    first: Vec<u8>,
    count: usize,
    /// Ranks that printed a line of the group (sorted, no duplicates).
    ranks: Vec<u64>,
}

struct State {
    stream: bool,
    window: Option<Duration>,
    /// Groups waiting for the end of the window, in arrival order.
    pending: Vec<Group>,
    index: HashMap<Key, usize>,
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

/// `line` without its ANSI escape sequences (log files keep none).
pub use crate::logfiles::strip_colour;

/// Whether this process's stdout / stderr is a terminal (asked once).
fn is_terminal(stderr: bool) -> bool {
    use std::io::IsTerminal;
    static TTY: OnceLock<(bool, bool)> = OnceLock::new();
    let (out, err) = *TTY.get_or_init(|| {
        (
            std::io::stdout().is_terminal(),
            std::io::stderr().is_terminal(),
        )
    });
    if stderr {
        err
    } else {
        out
    }
}

/// Print `prefix line` for each line, with one write: the prefix dimmed
/// and the line as the proc wrote it on a terminal, both without colour
/// codes otherwise.
fn print(stderr: bool, prefix: &str, lines: &[&[u8]]) {
    let tty = is_terminal(stderr);
    crate::progress::clear_line();
    let head = if tty {
        format!("\x1b[2m{prefix}\x1b[0m ")
    } else {
        format!("{prefix} ")
    };
    let size: usize = lines.iter().map(|l| head.len() + l.len() + 1).sum();
    let mut buf = Vec::with_capacity(size);
    for line in lines {
        let line = if tty {
            std::borrow::Cow::Borrowed(*line)
        } else {
            strip_colour(line)
        };
        buf.extend_from_slice(head.as_bytes());
        buf.extend_from_slice(&line);
        buf.push(b'\n');
    }
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

/// The group of `line`: the line with every number (a run of decimal
/// digits, with its fraction, or a `0x` hex number) and every hex id of 8
/// or more digits replaced by `#`.
pub fn template(line: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(line.len());
    let mut i = 0;
    let is_hex = |c: u8| c.is_ascii_hexdigit();
    while i < line.len() {
        let c = line[i];
        let word_start = i == 0 || !line[i - 1].is_ascii_alphanumeric();
        // A hex id: 8+ hex digits standing alone as a word.
        if word_start && is_hex(c) {
            let mut j = i;
            while j < line.len() && is_hex(line[j]) {
                j += 1;
            }
            let word_end = j == line.len() || !line[j].is_ascii_alphanumeric();
            if j - i >= 8 && word_end && line[i..j].iter().any(|b| b.is_ascii_digit()) {
                out.push(b'#');
                i = j;
                continue;
            }
        }
        if c == b'0'
            && line.get(i + 1) == Some(&b'x')
            && line.get(i + 2).is_some_and(|&b| is_hex(b))
        {
            i += 2;
            while i < line.len() && is_hex(line[i]) {
                i += 1;
            }
            out.push(b'#');
            continue;
        }
        if c.is_ascii_digit() {
            while i < line.len() && line[i].is_ascii_digit() {
                i += 1;
            }
            if line.get(i) == Some(&b'.') && line.get(i + 1).is_some_and(|b| b.is_ascii_digit()) {
                i += 1;
                while i < line.len() && line[i].is_ascii_digit() {
                    i += 1;
                }
            }
            out.push(b'#');
            continue;
        }
        out.push(c);
        i += 1;
    }
    out
}

/// `0-3,5,7-8` of sorted, distinct ranks.
pub fn rank_ranges(ranks: &[u64]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j] + 1 {
            j += 1;
        }
        parts.push(if j > i {
            format!("{}-{}", ranks[i], ranks[j])
        } else {
            ranks[i].to_string()
        });
        i = j + 1;
    }
    parts.join(",")
}

/// Lines of output of the proc at `rank` (without their newlines), in
/// order, whose log file is named after `proc`: written to the file and
/// printed (when not aggregated) with one system call each.
pub(crate) fn emit_lines(proc: &str, rank: Option<u64>, stderr: bool, lines: &[&[u8]]) {
    crate::logfiles::keep(proc, stderr, lines);
    let mut s = state().lock();
    if !s.stream {
        return;
    }
    let Some(window) = s.window else {
        drop(s);
        print(stderr, &prefix(rank), lines);
        return;
    };
    for line in lines {
        aggregate(&mut s, rank, stderr, line);
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

/// Count `line` in its group of the current window.
fn aggregate(s: &mut State, rank: Option<u64>, stderr: bool, line: &[u8]) {
    let key = (stderr, template(line));
    match s.index.get(&key) {
        Some(&i) => {
            let g = &mut s.pending[i];
            g.count += 1;
            if let Some(r) = rank {
                if let Err(at) = g.ranks.binary_search(&r) {
                    g.ranks.insert(at, r);
                }
            }
        }
        None => {
            let i = s.pending.len();
            s.index.insert(key, i);
            s.pending.push(Group {
                stderr,
                first: line.to_vec(),
                count: 1,
                ranks: rank.into_iter().collect(),
            });
        }
    }
}

/// Print every line held for aggregation now.
pub fn flush() {
    let pending = {
        let mut s = state().lock();
        s.index.clear();
        std::mem::take(&mut s.pending)
    };
    for g in pending {
        if g.count > 1 {
            let who = match g.ranks.len() {
                0 => String::new(),
                1 => format!(", rank {}", g.ranks[0]),
                _ => format!(", ranks {}", rank_ranges(&g.ranks)),
            };
            print(
                g.stderr,
                &format!("[{} similar lines{who}]", g.count),
                &[&g.first],
            );
        } else {
            print(g.stderr, &prefix(g.ranks.first().copied()), &[&g.first]);
        }
    }
}

/// Whether local procs' output is piped through [`emit_lines`] (the default) or
/// inherited (`MONARCH_PROC_OUTPUT=inherit`).
pub(crate) fn capture_local() -> bool {
    std::env::var("MONARCH_PROC_OUTPUT").map_or(true, |v| v != "inherit")
}

/// Read the stdout and stderr of the local proc at `addr` line by line
/// into [`emit_lines`], on the tokio thread ([`crate::background`]).
pub(crate) fn forward_local(
    out: std::process::ChildStdout,
    err: std::process::ChildStderr,
    rank: u64,
    addr: &str,
) {
    let name = crate::logfiles::local_name(addr);
    fn pump(pipe: std::os::fd::OwnedFd, rank: u64, stderr: bool, name: String) {
        // Counted from here; dropped with the closure if it never runs.
        let running = PumpRunning::start();
        let r = crate::background::for_each_line(
            pipe,
            move |lines| emit_lines(&name, Some(rank), stderr, lines),
            move || drop(running),
        );
        if let Err(e) = r {
            tracing::warn!(error = %e, "proc output is not forwarded");
        }
    }
    pump(out.into(), rank, false, name.clone());
    pump(err.into(), rank, true, name);
}

/// How many local procs' output pipes are being read, and the condition
/// signalled when one ends.
fn pumps() -> &'static (Mutex<usize>, parking_lot::Condvar) {
    static P: OnceLock<(Mutex<usize>, parking_lot::Condvar)> = OnceLock::new();
    P.get_or_init(|| (Mutex::new(0), parking_lot::Condvar::new()))
}

/// Held while a proc's output pipe is read: its end is counted.
struct PumpRunning;

impl PumpRunning {
    fn start() -> PumpRunning {
        *pumps().0.lock() += 1;
        PumpRunning
    }
}

impl Drop for PumpRunning {
    fn drop(&mut self) {
        let (count, ended) = pumps();
        *count.lock() -= 1;
        ended.notify_all();
    }
}

/// Wait (at most `max`) until every local proc's output has been read to
/// its end, so that lines written just before a proc exited are not lost
/// when the runtime shuts down.
pub(crate) fn wait_local_output(max: Duration) {
    let (count, ended) = pumps();
    let deadline = std::time::Instant::now() + max;
    let mut n = count.lock();
    while *n > 0 {
        if ended.wait_until(&mut n, deadline).timed_out() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_differing_only_in_numbers_share_a_template() {
        let t = |s: &str| String::from_utf8(template(s.as_bytes())).unwrap();
        assert_eq!(t("step 12 loss 0.53"), "step # loss #");
        assert_eq!(t("step 12 loss 0.53"), t("step 7 loss 1.25"));
        assert_eq!(
            t("worker w3 at 0x7ffd12 id 9f3a2b1c0d"),
            "worker w# at # id #"
        );
        assert_ne!(t("step 1 done"), t("step 1 failed"));
        // Words with letters and digits keep their letters.
        assert_eq!(t("gpu0 cuda:1"), "gpu# cuda:#");
        assert_eq!(t("deadbeef is a word"), "deadbeef is a word");
    }

    #[test]
    fn colour_codes_are_stripped() {
        assert_eq!(&*strip_colour(b"\x1b[31mred\x1b[0m plain"), b"red plain");
        assert_eq!(&*strip_colour(b"\x1b[1;32mok"), b"ok");
        assert_eq!(&*strip_colour(b"no codes"), b"no codes");
    }

    #[test]
    fn rank_sets_print_as_ranges() {
        assert_eq!(rank_ranges(&[0, 1, 2, 3, 5, 7, 8]), "0-3,5,7-8");
        assert_eq!(rank_ranges(&[4]), "4");
        assert_eq!(rank_ranges(&[]), "");
    }
}
