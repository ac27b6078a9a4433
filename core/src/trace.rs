//! Traces: where this process's `tracing` records go (the log on stderr,
//! filtered by `MONARCH_LOG`) and the Chrome trace exporter that
//! `MONARCH_TRACE=PATH` turns on (docs/tracing.md).
//!
//! With `MONARCH_TRACE` set, every proc of the job (children inherit the
//! variable) appends its spans, one Chrome trace event per line, to
//! `PATH.procs/<pid>.jsonl`; the controller merges those files into one
//! Chrome/Perfetto trace at `PATH` when its runtime shuts down
//! ([`merge`], also `monarch trace merge`). Timestamps are wall-clock
//! microseconds, so the procs of one host share a time line.
//!
//! The runtime's spans are at INFO level: with tracing off and the default
//! log filter, a span site costs the level check `tracing` makes (one
//! atomic load and a branch) and its fields are never evaluated.

use std::cell::Cell;
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::Subscriber;
use tracing_subscriber::filter::{EnvFilter, Targets};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

/// The variable naming the merged trace file; unset: no trace.
pub const ENV_TRACE: &str = "MONARCH_TRACE";

/// Spans that may end on another thread than the one that opened them, or
/// overlap their siblings on it: written as Chrome async events (`b`/`e`).
const ASYNC_SPANS: &[&str] = &["spawn", "handle"];

/// Install this process's `tracing` subscriber once: the stderr log
/// (`MONARCH_LOG`, default `warn`), when `MONARCH_TRACE` is set the
/// Chrome trace exporter and, built with the feature `otel` and a
/// collector named by `OTEL_EXPORTER_OTLP_ENDPOINT`, the OpenTelemetry
/// exporter. Later calls do nothing.
pub fn install_subscriber() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let filter = std::env::var("MONARCH_LOG").unwrap_or_else(|_| "warn".into());
        let log = tracing_subscriber::fmt::layer()
            .with_writer(io::stderr)
            .with_filter(EnvFilter::new(filter));
        let chrome = chrome_layer().map(|l| l.with_filter(runtime_spans()));
        #[cfg(feature = "otel")]
        let otel = crate::otel::layer(process_label()).map(|l| l.with_filter(runtime_spans()));
        #[cfg(not(feature = "otel"))]
        let otel: Option<tracing_subscriber::layer::Identity> = None;
        let _ = tracing_subscriber::registry()
            .with(log)
            .with(chrome)
            .with(otel)
            .try_init();
    });
}

/// What the exporters take: the runtime's spans, and nothing of the
/// libraries an exporter itself uses (which would feed back into it).
fn runtime_spans() -> Targets {
    Targets::new()
        .with_target("monarch_core", tracing::Level::INFO)
        .with_target("monarch_rdma", tracing::Level::INFO)
}

/// The merged trace's path, when tracing is on.
pub fn trace_path() -> Option<PathBuf> {
    std::env::var_os(ENV_TRACE)
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
}

/// The directory every proc writes its own part of the trace `path` into.
pub fn parts_dir(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".procs");
    PathBuf::from(s)
}

/// This process's open part file, once the exporter is installed.
static PART: OnceLock<Mutex<BufWriter<File>>> = OnceLock::new();

fn chrome_layer() -> Option<ChromeLayer> {
    let path = trace_path()?;
    let dir = parts_dir(&path);
    let pid = std::process::id();
    let file = std::fs::create_dir_all(&dir).and_then(|_| {
        OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(dir.join(format!("{pid}.jsonl")))
    });
    let file = match file {
        Ok(f) => f,
        Err(e) => {
            eprintln!("monarch: {ENV_TRACE}: cannot write {}: {e}", dir.display());
            return None;
        }
    };
    let part = PART.get_or_init(|| Mutex::new(BufWriter::with_capacity(1 << 16, file)));
    let mut line = String::new();
    let _ = write!(
        line,
        r#"{{"name":"process_name","ph":"M","pid":{pid},"tid":0,"args":{{"name":"#
    );
    json_str(&mut line, &process_label());
    line.push_str("}}\n");
    let _ = part.lock().write_all(line.as_bytes());
    Some(ChromeLayer { pid })
}

/// How this process is named in the timeline.
fn process_label() -> String {
    let pid = std::process::id();
    match (
        std::env::var("MONARCH_PROC_ADDR"),
        std::env::var("MONARCH_PROC_RANK"),
    ) {
        (Ok(_), Ok(rank)) => format!("proc rank {rank} (pid {pid})"),
        (Ok(_), Err(_)) => format!("proc (pid {pid})"),
        _ => format!("controller (pid {pid})"),
    }
}

/// Write out what this process's exporter holds (a no-op when tracing is
/// off). Called when a runtime shuts down.
pub fn flush() {
    if let Some(p) = PART.get() {
        let _ = p.lock().flush();
    }
    #[cfg(feature = "otel")]
    crate::otel::flush();
}

/// Whether this process is a controller that merges the trace.
static MERGES: AtomicBool = AtomicBool::new(false);

/// A controller starts a job: part files left by an earlier run with the
/// same `MONARCH_TRACE` are removed (this process's own is kept), and its
/// shutdown will merge the parts ([`job_finished`]).
pub fn job_started() {
    let (Some(path), Some(_)) = (trace_path(), PART.get()) else {
        return;
    };
    MERGES.store(true, Ordering::Relaxed);
    let own = format!("{}.jsonl", std::process::id());
    if let Ok(entries) = std::fs::read_dir(parts_dir(&path)) {
        for e in entries.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name.ends_with(".jsonl") && name != own {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// A controller's job ended (its procs have exited): merge every proc's
/// part into the trace file and say where it is.
pub fn job_finished() {
    let (Some(path), Some(_)) = (trace_path(), PART.get()) else {
        return;
    };
    if !MERGES.load(Ordering::Relaxed) {
        return;
    }
    flush();
    match merge(&parts_dir(&path), &path) {
        Ok(m) => eprintln!(
            "monarch: trace of {} procs ({} events) written to {}",
            m.files,
            m.events,
            path.display()
        ),
        Err(e) => eprintln!("monarch: could not write the trace {}: {e}", path.display()),
    }
}

/// What [`merge`] put together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Merged {
    /// Part files read (one per proc).
    pub files: usize,
    /// Trace events written.
    pub events: usize,
}

/// Merge every `*.jsonl` part in `dir` into one Chrome trace JSON file at
/// `out`. Lines that are not whole events (a proc killed mid-write) are
/// skipped.
pub fn merge(dir: &Path, out: &Path) -> io::Result<Merged> {
    let mut parts: Vec<PathBuf> = std::fs::read_dir(dir)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    parts.sort();
    merge_files(&parts, out)
}

/// Merge the given part files into one Chrome trace JSON file at `out`.
pub fn merge_files(parts: &[PathBuf], out: &Path) -> io::Result<Merged> {
    let tmp = out.with_extension("json.tmp");
    let merged = write_merged(parts, &tmp).and_then(|m| std::fs::rename(&tmp, out).map(|_| m));
    if merged.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    merged
}

fn write_merged(parts: &[PathBuf], tmp: &Path) -> io::Result<Merged> {
    let mut w = BufWriter::new(File::create(tmp)?);
    w.write_all(b"{\"traceEvents\":[\n")?;
    let mut m = Merged {
        files: 0,
        events: 0,
    };
    for p in parts {
        let r = BufReader::new(File::open(p)?);
        m.files += 1;
        for line in r.lines() {
            let line = line?;
            let line = line.trim();
            if !(line.starts_with('{') && line.ends_with('}')) {
                continue;
            }
            if m.events > 0 {
                w.write_all(b",\n")?;
            }
            w.write_all(line.as_bytes())?;
            m.events += 1;
        }
    }
    w.write_all(b"\n],\"displayTimeUnit\":\"ms\"}\n")?;
    w.flush()?;
    Ok(m)
}

/// The exporter: one Chrome trace event per closed span (`X`), or a
/// `b`/`e` pair for [`ASYNC_SPANS`].
struct ChromeLayer {
    pid: u32,
}

/// What is kept of an open span.
struct SpanData {
    seq: u64,
    start_us: f64,
    tid: u64,
    /// Its fields as JSON members (no braces).
    args: String,
    is_async: bool,
}

/// Sequence numbers of spans: unique in the process (a span's `tracing`
/// id is reused once it closes).
static NEXT_SEQ: AtomicU64 = AtomicU64::new(1);

fn now_us() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1e6)
        .unwrap_or(0.0)
}

thread_local! {
    /// This thread's kernel id, once named in the trace.
    static TID: Cell<u64> = const { Cell::new(0) };
}

/// The calling thread's id, naming the thread in the trace the first time.
fn thread_id(pid: u32) -> u64 {
    TID.with(|t| {
        if t.get() != 0 {
            return t.get();
        }
        // SAFETY: gettid takes no argument and cannot fail.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) } as u64;
        t.set(tid);
        let name = std::thread::current()
            .name()
            .map(str::to_string)
            .unwrap_or_else(|| format!("thread {tid}"));
        let mut line = String::new();
        let _ = write!(
            line,
            r#"{{"name":"thread_name","ph":"M","pid":{pid},"tid":{tid},"args":{{"name":"#
        );
        json_str(&mut line, &name);
        line.push_str("}}\n");
        write_line(&line);
        tid
    })
}

fn write_line(line: &str) {
    if let Some(p) = PART.get() {
        let _ = p.lock().write_all(line.as_bytes());
    }
}

/// Append `s` as a JSON string.
fn json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Records a span's fields as JSON members.
struct JsonFields<'a>(&'a mut String);

impl JsonFields<'_> {
    fn key(&mut self, field: &Field) {
        if !self.0.is_empty() {
            self.0.push(',');
        }
        json_str(self.0, field.name());
        self.0.push(':');
    }
}

impl Visit for JsonFields<'_> {
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.key(field);
        let _ = write!(self.0, "{value}");
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.key(field);
        let _ = write!(self.0, "{value}");
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.key(field);
        let _ = write!(self.0, "{value}");
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.key(field);
        json_str(self.0, value);
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.key(field);
        json_str(self.0, &format!("{value:?}"));
    }
}

impl<S> Layer<S> for ChromeLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let seq = NEXT_SEQ.fetch_add(1, Ordering::Relaxed);
        let parent = span
            .parent()
            .and_then(|p| p.extensions().get::<SpanData>().map(|d| d.seq))
            .unwrap_or(0);
        let mut args = String::new();
        attrs.record(&mut JsonFields(&mut args));
        if !args.is_empty() {
            args.push(',');
        }
        let _ = write!(args, r#""span":{seq},"parent":{parent}"#);
        let data = SpanData {
            seq,
            start_us: now_us(),
            tid: thread_id(self.pid),
            args,
            is_async: ASYNC_SPANS.contains(&attrs.metadata().name()),
        };
        if data.is_async {
            let mut line = String::new();
            let _ = write!(
                line,
                r#"{{"name":"{}","cat":"monarch","ph":"b","id":"{}.{}","ts":{:.3},"pid":{},"tid":{},"args":{{{}}}}}"#,
                attrs.metadata().name(),
                self.pid,
                seq,
                data.start_us,
                self.pid,
                data.tid,
                data.args
            );
            line.push('\n');
            write_line(&line);
        }
        span.extensions_mut().insert(data);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut ext = span.extensions_mut();
        if let Some(d) = ext.get_mut::<SpanData>() {
            values.record(&mut JsonFields(&mut d.args));
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let ext = span.extensions();
        let Some(d) = ext.get::<SpanData>() else {
            return;
        };
        let end = now_us();
        let name = span.metadata().name();
        let mut line = String::new();
        if d.is_async {
            let _ = write!(
                line,
                r#"{{"name":"{name}","cat":"monarch","ph":"e","id":"{}.{}","ts":{:.3},"pid":{},"tid":{},"args":{{{}}}}}"#,
                self.pid,
                d.seq,
                end,
                self.pid,
                thread_id(self.pid),
                d.args
            );
        } else {
            let _ = write!(
                line,
                r#"{{"name":"{name}","cat":"monarch","ph":"X","ts":{:.3},"dur":{:.3},"pid":{},"tid":{},"args":{{{}}}}}"#,
                d.start_us,
                (end - d.start_us).max(0.0),
                self.pid,
                d.tid,
                d.args
            );
        }
        line.push('\n');
        write_line(&line);
        if d.is_async {
            // Once per handled event or started proc: what a proc did up to
            // its last message is kept even if it is killed or crashes.
            flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_are_escaped() {
        let mut s = String::new();
        json_str(&mut s, "a\"b\\c\nd\u{1}");
        assert_eq!(s, r#""a\"b\\c\nd\u0001""#);
    }

    #[test]
    fn merging_skips_cut_lines_and_wraps_events() {
        let dir = std::env::temp_dir().join(format!("monarch-trace-merge-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("1.jsonl"), "{\"ph\":\"X\"}\n{\"ph\":\"b\"}\n").unwrap();
        std::fs::write(dir.join("2.jsonl"), "{\"ph\":\"X\"}\n{\"ph\":\"X\",\"na").unwrap();
        std::fs::write(dir.join("notes.txt"), "ignored").unwrap();
        let out = dir.join("trace.json");
        let m = merge(&dir, &out).unwrap();
        assert_eq!(
            m,
            Merged {
                files: 2,
                events: 3
            }
        );
        let text = std::fs::read_to_string(&out).unwrap();
        assert!(text.starts_with("{\"traceEvents\":[\n{\"ph\":\"X\"},\n"));
        assert!(text.ends_with("],\"displayTimeUnit\":\"ms\"}\n"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
