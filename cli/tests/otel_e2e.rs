//! OpenTelemetry export end to end (feature `otel`): a controller (this
//! test process) and two real `monarch worker` procs, with
//! `OTEL_EXPORTER_OTLP_ENDPOINT` naming an OTLP/HTTP receiver in this test
//! (a `TcpListener` that answers each POST 200 and decodes its protobuf
//! body). The receiver must get the runtime's spans from every process:
//! the controller's `call` holding its `send`s, each worker's `handle` of
//! that call's message id, with its `reply` inside.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use monarch_core::{ProcMesh, Runtime, Shape};

mod common;
use common::{call, wait, worker_argv};

const PROCS: usize = 2;

/// Upper bound for any single wait; only there to turn a hang into a failure.
const HANG: Duration = Duration::from_secs(60);

// ------------------------------------------------------------ protobuf
// Just enough of the protobuf wire format to walk an
// ExportTraceServiceRequest (opentelemetry-proto, trace/v1).

/// One field: its number and, for length-delimited fields, the bytes; for
/// varint and fixed fields, the value.
enum Field<'a> {
    Int(u64),
    Bytes(&'a [u8]),
}

fn varint(buf: &[u8], pos: &mut usize) -> u64 {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = buf[*pos];
        *pos += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return v;
        }
    }
    panic!("varint too long");
}

fn fields(buf: &[u8]) -> Vec<(u64, Field<'_>)> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < buf.len() {
        let key = varint(buf, &mut pos);
        let field = match key & 7 {
            0 => Field::Int(varint(buf, &mut pos)),
            1 => {
                pos += 8;
                Field::Int(u64::from_le_bytes(buf[pos - 8..pos].try_into().unwrap()))
            }
            2 => {
                let len = varint(buf, &mut pos) as usize;
                pos += len;
                Field::Bytes(&buf[pos - len..pos])
            }
            5 => {
                pos += 4;
                Field::Int(u64::from(u32::from_le_bytes(
                    buf[pos - 4..pos].try_into().unwrap(),
                )))
            }
            t => panic!("unexpected wire type {t}"),
        };
        out.push((key >> 3, field));
    }
    out
}

fn bytes_of(buf: &[u8], number: u64) -> Vec<&[u8]> {
    fields(buf)
        .into_iter()
        .filter_map(|(n, f)| match f {
            Field::Bytes(b) if n == number => Some(b),
            _ => None,
        })
        .collect()
}

/// An attribute value as text (AnyValue: string 1, bool 2, int 3).
fn any_value(buf: &[u8]) -> String {
    for (n, f) in fields(buf) {
        match (n, f) {
            (1, Field::Bytes(b)) => return String::from_utf8(b.to_vec()).unwrap(),
            (2, Field::Int(v)) => return (v != 0).to_string(),
            (3, Field::Int(v)) => return (v as i64).to_string(),
            _ => {}
        }
    }
    String::new()
}

/// KeyValue list (key 1, value 2) as a map.
fn attributes(kvs: Vec<&[u8]>) -> HashMap<String, String> {
    kvs.into_iter()
        .map(|kv| {
            let key = bytes_of(kv, 1).first().copied().unwrap_or_default();
            let value = bytes_of(kv, 2).first().map(|v| any_value(v));
            (
                String::from_utf8(key.to_vec()).unwrap(),
                value.unwrap_or_default(),
            )
        })
        .collect()
}

#[derive(Debug, Clone)]
struct Span {
    /// The `process.pid` resource attribute of the process that sent it.
    pid: String,
    /// The `monarch.process` resource attribute.
    process: String,
    name: String,
    span_id: Vec<u8>,
    parent_id: Vec<u8>,
    attrs: HashMap<String, String>,
}

impl Span {
    /// Whether this is a span `name` of a call to `echo`.
    fn of_echo(&self, name: &str) -> bool {
        self.name == name && self.attrs.get("method").map(String::as_str) == Some("echo")
    }

    fn attr(&self, key: &str) -> &str {
        self.attrs
            .get(key)
            .unwrap_or_else(|| panic!("{key} missing in {self:?}"))
    }
}

/// ExportTraceServiceRequest: resource_spans 1 { resource 1 { attributes 1 },
/// scope_spans 2 { spans 2 { span_id 2, parent_span_id 4, name 5, attributes 9 } } }.
fn decode_request(body: &[u8]) -> Vec<Span> {
    let mut out = Vec::new();
    for rs in bytes_of(body, 1) {
        let resource = bytes_of(rs, 1)
            .first()
            .map(|r| attributes(bytes_of(r, 1)))
            .unwrap_or_default();
        for ss in bytes_of(rs, 2) {
            for span in bytes_of(ss, 2) {
                let text = |n| {
                    bytes_of(span, n)
                        .first()
                        .map(|b| String::from_utf8(b.to_vec()).unwrap())
                        .unwrap_or_default()
                };
                let raw = |n| {
                    bytes_of(span, n)
                        .first()
                        .map(|b| b.to_vec())
                        .unwrap_or_default()
                };
                out.push(Span {
                    pid: resource.get("process.pid").cloned().unwrap_or_default(),
                    process: resource.get("monarch.process").cloned().unwrap_or_default(),
                    name: text(5),
                    span_id: raw(2),
                    parent_id: raw(4),
                    attrs: attributes(bytes_of(span, 9)),
                });
            }
        }
    }
    out
}

// ------------------------------------------------------------ receiver

#[derive(Default)]
struct Received {
    spans: Vec<Span>,
    /// A request the receiver could not take (wrong path, type, framing).
    bad: Vec<String>,
}

type Shared = Arc<(Mutex<Received>, Condvar)>;

/// Serve one connection's requests (HTTP/1.1 keep-alive) until it closes.
fn serve(stream: TcpStream, shared: Shared) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut stream = stream;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let mut headers = HashMap::new();
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
            }
        }
        let mut problem = None;
        if !request_line.starts_with("POST /v1/traces ") {
            problem = Some(format!("request {request_line:?}"));
        } else if headers.get("content-type").map(String::as_str) != Some("application/x-protobuf")
        {
            problem = Some(format!("content-type {:?}", headers.get("content-type")));
        }
        let Some(len) = headers.get("content-length").and_then(|v| v.parse().ok()) else {
            let (m, cv) = &*shared;
            m.lock()
                .unwrap()
                .bad
                .push(format!("no content-length: {headers:?}"));
            cv.notify_all();
            return;
        };
        let mut body = vec![0u8; len];
        reader.read_exact(&mut body).unwrap();
        {
            let (m, cv) = &*shared;
            let mut r = m.lock().unwrap();
            match problem {
                Some(p) => r.bad.push(p),
                None => r.spans.extend(decode_request(&body)),
            }
            cv.notify_all();
        }
        let _ = stream.write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n",
        );
    }
}

fn start_receiver() -> (String, Shared) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let shared: Shared = Arc::default();
    let s = shared.clone();
    // Lives as long as the test process.
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let s = s.clone();
            std::thread::spawn(move || serve(stream, s));
        }
    });
    (endpoint, shared)
}

#[test]
fn spans_of_every_proc_reach_an_otlp_receiver() {
    let (endpoint, shared) = start_receiver();
    // SAFETY: set before any thread of the runtime starts; the procs
    // inherit both.
    unsafe {
        std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint);
        std::env::set_var("OTEL_SERVICE_NAME", "otel-e2e");
    }
    monarch_core::trace::install_subscriber();

    let rt = Runtime::new().expect("controller runtime");
    let pm = ProcMesh::spawn(
        &rt,
        Shape::new(&[("gpus", PROCS)]).unwrap(),
        &worker_argv(),
        &[],
    )
    .unwrap();
    let (am, ready) = pm.spawn_actors("echo", "echo", &[]).unwrap();
    assert!(wait(&ready).values.iter().all(|v| !v.is_err()));
    let vm = call(&am, "echo", &[b"hi"]);
    assert_eq!(vm.values.len(), PROCS);
    // A proc told to stop sends what it holds before it exits; the
    // controller's shutdown sends the rest.
    assert!(pm.stop().wait(Some(HANG)), "procs did not stop");
    rt.shutdown();

    let me = std::process::id().to_string();
    // The controller's `call` to `echo` and a `handle` of it from each
    // worker, whatever order the exports arrive in.
    let complete = |r: &Received| {
        let calls = r.spans.iter().any(|s| s.of_echo("call") && s.pid == me);
        let handlers: HashSet<&str> = r
            .spans
            .iter()
            .filter(|s| s.of_echo("handle") && s.pid != me)
            .map(|s| s.pid.as_str())
            .collect();
        calls && handlers.len() == PROCS
    };
    let (m, cv) = &*shared;
    let deadline = Instant::now() + HANG;
    let mut r = m.lock().unwrap();
    while !complete(&r) && r.bad.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "spans missing after {HANG:?}: {:?}",
            r.spans
        );
        r = cv.wait_timeout(r, left).unwrap().0;
    }
    assert!(r.bad.is_empty(), "bad requests: {:?}", r.bad);
    let spans = r.spans.clone();
    drop(r);

    // The controller's call to `echo`, and the sends inside it.
    let ctl: Vec<&Span> = spans.iter().filter(|s| s.pid == me).collect();
    assert!(ctl.iter().all(|s| s.process.starts_with("controller ")));
    let the_call = ctl
        .iter()
        .find(|s| s.of_echo("call"))
        .expect("the controller's call span");
    assert_eq!(the_call.attr("actor"), "echo");
    let sends: Vec<&&Span> = ctl
        .iter()
        .filter(|s| s.name == "send" && s.parent_id == the_call.span_id)
        .collect();
    assert!(!sends.is_empty(), "no send inside the call: {ctl:?}");
    let msg = sends[0].attr("msg").to_string();
    assert_ne!(msg, "0", "a call's send carries its message id");

    // Each worker handled that message, and replied inside its handle.
    let mut ranks = HashSet::new();
    for h in spans.iter().filter(|s| s.of_echo("handle") && s.pid != me) {
        assert!(h.process.starts_with("proc rank "), "{h:?}");
        assert_eq!(h.attr("msg"), msg, "handle of another message: {h:?}");
        ranks.insert(h.attr("rank").to_string());
        assert!(
            spans
                .iter()
                .any(|s| s.name == "reply" && s.pid == h.pid && s.parent_id == h.span_id),
            "no reply inside {h:?}"
        );
    }
    let want: HashSet<String> = (0..PROCS).map(|r| r.to_string()).collect();
    assert_eq!(ranks, want, "one handle per rank");
}
