//! Seeded, bounded fuzzing of what a peer can send: the flatbuffer
//! decoders, the handshake, and a real runtime's TCP listener.
//!
//! Every input is random bytes or a mutation (bit flips, truncation,
//! splices, overwritten length fields) of a valid encoding. The decoders
//! must answer Ok or Err without panicking or making an allocation out of
//! proportion to their input; the handshake must refuse; the runtime must
//! survive and still serve a well-behaved peer.
//!
//! `MONARCH_FUZZ_CASES=N` multiplies the case counts (default 1);
//! `MONARCH_FUZZ_SEED=S` replays a run (a failure prints its seed and case).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use flatbuffers::FlatBufferBuilder;
use monarch_core::auth::{accept_handshake, connect_handshake, MAGIC, PAKE_MSG};
use monarch_core::geometry::Shape;
use monarch_core::wire::{ActorMeshRef, Envelope, Kind};
use monarch_core::{FailureCause, PortRef, Runtime, SupervisionEvent};

mod fuzz_support;
use fuzz_support::{cases, mutate, seed, Rng};

/// The system allocator, remembering the largest single request per thread.
struct PeakTracking;

thread_local! {
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    let _ = PEAK.try_with(|p| {
        if size > p.get() {
            p.set(size)
        }
    });
}

unsafe impl GlobalAlloc for PeakTracking {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        note(l.size());
        System.alloc(l)
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        note(l.size());
        System.alloc_zeroed(l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        note(new);
        System.realloc(p, l, new)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
}

#[global_allocator]
static ALLOC: PeakTracking = PeakTracking;

/// Run `decode` on `input` under `catch_unwind`; fail with the replay data
/// on a panic or an allocation far larger than the input.
fn must_not_panic<T, E>(
    what: &str,
    seed: u64,
    case: usize,
    input: &[u8],
    decode: impl Fn(&[u8]) -> Result<T, E>,
) -> bool {
    PEAK.with(|p| p.set(0));
    let r = catch_unwind(AssertUnwindSafe(|| decode(input).is_ok()));
    let peak = PEAK.with(|p| p.get());
    assert!(
        r.is_ok(),
        "{what} panicked: MONARCH_FUZZ_SEED={seed} case {case} input {input:02x?}"
    );
    let bound = 64 * input.len() + (1 << 20);
    assert!(
        peak <= bound,
        "{what} allocated {peak} bytes at once for {} input bytes: \
         MONARCH_FUZZ_SEED={seed} case {case} input {input:02x?}",
        input.len()
    );
    r.unwrap_or(false)
}

fn valid_envelopes() -> Vec<Vec<u8>> {
    let shape = Shape::dense(vec!["hosts".into(), "gpus".into()], vec![2, 3]).unwrap();
    let mut e = Envelope::new(Kind::Message);
    e.sender = "tcp:127.0.0.1:1".into();
    e.actor = "trainer".into();
    e.method = "step".into();
    e.reply_port = 7;
    e.reply_slot = 3;
    e.message_rank = 4;
    e.shape = Some(monarch_core::wire::encode_shape(&shape).into());
    e.part_sizes = vec![5, 0, 1 << 20];
    e.cast_ranks = vec![0, 2, 4];
    e.cast_addrs = vec!["unix:/a".into(), "unix:/b".into()];
    e.cast_slots = vec![1, 2];
    e.cast_fanout = 4;
    e.reply_to = "unix:/c".into();
    e.cast_relay = true;
    let mut r = Envelope::new(Kind::Reply);
    r.is_error = true;
    r.error = "boom".into();
    r.reply_port = 9;
    let mut fbb = FlatBufferBuilder::new();
    vec![
        e.encode(&mut fbb).to_vec(),
        r.encode(&mut fbb).to_vec(),
        Envelope::new(Kind::Heartbeat).encode(&mut fbb).to_vec(),
    ]
}

fn valid_mesh_refs() -> Vec<Vec<u8>> {
    let shape = Shape::dense(vec!["hosts".into(), "gpus".into()], vec![2, 2]).unwrap();
    let m = ActorMeshRef {
        name: "mesh".into(),
        key: "k1".into(),
        procs: (0..4).map(|i| format!("unix:/p{i}")).collect(),
        shape,
    };
    vec![m.encode()]
}

fn valid_events() -> Vec<Vec<u8>> {
    let inner = SupervisionEvent {
        id: 42,
        mesh: "m".into(),
        mesh_key: "k".into(),
        ranks: vec![0, 3],
        proc: "unix:/p".into(),
        actor: "a".into(),
        owner: String::new(),
        cause: FailureCause::Signal,
        code: 9,
        report: "killed".into(),
        caused_by: None,
        payload: vec![1, 2, 3],
    };
    let mut outer = inner.clone();
    outer.cause = FailureCause::SupervisorFailed;
    outer.caused_by = Some(Box::new(inner.clone()));
    vec![inner.encode(), outer.encode()]
}

fn valid_port_refs() -> Vec<Vec<u8>> {
    let p = PortRef {
        addr: "tcp:10.0.0.1:4000".into(),
        port: 12,
        slot: 1,
    };
    vec![p.encode()]
}

#[test]
fn decoders_answer_ok_or_err_on_hostile_bytes() {
    let seed = seed();
    let mut rng = Rng(seed);
    let targets: [(&str, Vec<Vec<u8>>); 4] = [
        ("Envelope::decode", valid_envelopes()),
        ("ActorMeshRef::decode", valid_mesh_refs()),
        ("SupervisionEvent::decode", valid_events()),
        ("PortRef::decode", valid_port_refs()),
    ];
    // The valid encodings themselves decode.
    for (what, valid) in &targets {
        for v in valid {
            let ok = match *what {
                "Envelope::decode" => Envelope::decode(v).is_ok(),
                "ActorMeshRef::decode" => ActorMeshRef::decode(v).is_ok(),
                "SupervisionEvent::decode" => SupervisionEvent::decode(v).is_ok(),
                _ => PortRef::decode(v).is_ok(),
            };
            assert!(ok, "{what} refused a valid encoding");
        }
    }
    let n = cases(200_000);
    let start = Instant::now();
    let mut accepted = 0;
    for case in 0..n {
        let (what, valid) = &targets[case % targets.len()];
        let input = mutate(&mut rng, valid, 512);
        accepted += match *what {
            "Envelope::decode" => must_not_panic(what, seed, case, &input, Envelope::decode),
            "ActorMeshRef::decode" => {
                must_not_panic(what, seed, case, &input, ActorMeshRef::decode)
            }
            "SupervisionEvent::decode" => {
                must_not_panic(what, seed, case, &input, SupervisionEvent::decode)
            }
            _ => must_not_panic(what, seed, case, &input, PortRef::decode),
        } as usize;
    }
    eprintln!(
        "decoders: {n} cases ({accepted} decoded Ok) in {:?} (MONARCH_FUZZ_SEED={seed})",
        start.elapsed()
    );
}

/// What a real connector sends in one session: its hello and its proof.
fn client_bytes(secret: &[u8]) -> Vec<Vec<u8>> {
    // Record what a real connector writes by running a real handshake.
    struct Tee {
        s: UnixStream,
        sent: Vec<u8>,
    }
    impl Read for Tee {
        fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
            self.s.read(b)
        }
    }
    impl Write for Tee {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.sent.extend_from_slice(b);
            self.s.write(b)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            self.s.flush()
        }
    }
    let (mut a, c) = UnixStream::pair().unwrap();
    let key = secret.to_vec();
    let t = std::thread::spawn(move || accept_handshake(&mut a, &key, "unix:/acceptor"));
    let mut tee = Tee {
        s: c,
        sent: Vec::new(),
    };
    connect_handshake(&mut tee, secret, "tcp:127.0.0.1:9").expect("real handshake");
    t.join().unwrap().expect("real handshake accepted");
    vec![tee.sent]
}

/// Feed `input` to the acceptor over a socket pair, then hang up.
fn accept_from(input: &[u8], secret: &[u8]) -> Result<String, String> {
    let (mut a, mut c) = UnixStream::pair().unwrap();
    a.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    a.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(input).unwrap();
    c.shutdown(std::net::Shutdown::Write).unwrap();
    let r = catch_unwind(AssertUnwindSafe(|| {
        accept_handshake(&mut a, secret, "unix:/a")
    }));
    drop(c);
    match r {
        Ok(Ok(id)) => Ok(id),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("panic".into()),
    }
}

#[test]
fn handshake_refuses_random_and_mutated_clients() {
    let seed = seed();
    let mut rng = Rng(seed ^ 0x4841_4e44);
    let secret = b"0123456789abcdef0123456789abcdef";
    let valid = client_bytes(secret);
    let n = cases(10_000);
    let start = Instant::now();
    for case in 0..n {
        let input = mutate(&mut rng, &valid, 512);
        let t = Instant::now();
        let r = accept_from(&input, secret);
        assert!(
            t.elapsed() < Duration::from_secs(4),
            "handshake hung: MONARCH_FUZZ_SEED={seed} case {case} input {input:02x?}"
        );
        match r {
            Err(e) if e == "panic" => {
                panic!("accept_handshake panicked: MONARCH_FUZZ_SEED={seed} case {case} input {input:02x?}")
            }
            Err(_) => {}
            // Each session's key exchange is fresh: a replayed or mutated
            // connector message can never carry the right proof.
            Ok(id) => panic!(
                "accept_handshake accepted {id:?}: MONARCH_FUZZ_SEED={seed} case {case} input {input:02x?}"
            ),
        }
    }
    eprintln!(
        "handshake: {n} cases in {:?} (MONARCH_FUZZ_SEED={seed})",
        start.elapsed()
    );
}

/// How a live connector's messages are tampered with.
#[derive(Clone, Copy, Debug)]
enum Tamper {
    /// Replace message `n` (0: the hello, 1: the proof) by a mutation of
    /// it, then half-close (nothing more is sent).
    Mutate(usize),
    /// Flip one bit of the hello outside its identity length field and go
    /// on with the real proof (made for the untampered hello).
    FlipHello,
}

/// A real connector's socket with one of its writes tampered with.
struct Tampered<'a> {
    s: UnixStream,
    writes: usize,
    how: Tamper,
    rng: &'a mut Rng,
    /// Whether a message was tampered with (not merely followed by more).
    changed: bool,
}

impl Read for Tampered<'_> {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        self.s.read(b)
    }
}

impl Write for Tampered<'_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let n = self.writes;
        self.writes += 1;
        let (out, close) = match self.how {
            Tamper::Mutate(m) if m == n => (mutate(self.rng, &[b.to_vec()], 128), true),
            Tamper::FlipHello if n == 0 => {
                let id_len = MAGIC.len() + PAKE_MSG;
                let mut i = self.rng.below(b.len() - 2);
                if i >= id_len {
                    i += 2;
                }
                let mut out = b.to_vec();
                out[i] ^= 1 << self.rng.below(8);
                (out, false)
            }
            _ => (b.to_vec(), false),
        };
        // Bytes after an intact message are the next message's (or frames).
        self.changed |= !out.starts_with(b);
        self.s.write_all(&out)?;
        if close {
            self.s.shutdown(std::net::Shutdown::Write)?;
        }
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn handshake_refuses_a_live_connector_whose_messages_are_tampered_with() {
    let seed = seed();
    let mut rng = Rng(seed ^ 0x5441_4d50);
    let secret = b"0123456789abcdef0123456789abcdef";
    let n = cases(3_000);
    let start = Instant::now();
    for case in 0..n {
        let how = match rng.below(3) {
            0 => Tamper::Mutate(0),
            1 => Tamper::Mutate(1),
            _ => Tamper::FlipHello,
        };
        let (mut a, c) = UnixStream::pair().unwrap();
        for s in [&a, &c] {
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
        }
        let acceptor = std::thread::spawn(move || {
            let r = catch_unwind(AssertUnwindSafe(|| {
                accept_handshake(&mut a, secret, "unix:/a")
            }));
            drop(a);
            r
        });
        let t = Instant::now();
        let mut c = Tampered {
            s: c,
            writes: 0,
            how,
            rng: &mut rng,
            changed: false,
        };
        let rc = connect_handshake(&mut c, secret, "tcp:127.0.0.1:9");
        let changed = c.changed;
        drop(c);
        let ra = acceptor.join().unwrap();
        assert!(
            t.elapsed() < Duration::from_secs(4),
            "tampered handshake hung: MONARCH_FUZZ_SEED={seed} case {case} {how:?}"
        );
        let ra = ra.unwrap_or_else(|_| {
            panic!("accept_handshake panicked: MONARCH_FUZZ_SEED={seed} case {case} {how:?}")
        });
        if changed {
            assert!(
                ra.is_err() && rc.is_err(),
                "a tampered handshake succeeded: MONARCH_FUZZ_SEED={seed} case {case} {how:?}: \
                 acceptor {ra:?}, connector {rc:?}"
            );
        }
    }
    eprintln!(
        "tampered live handshakes: {n} cases in {:?} (MONARCH_FUZZ_SEED={seed})",
        start.elapsed()
    );
}

fn agent(secret: &str) -> Runtime {
    Runtime::listen_tcp(
        "tcp:127.0.0.1:0",
        std::net::IpAddr::from([127, 0, 0, 1]),
        secret.to_string(),
    )
    .expect("listen on 127.0.0.1")
}

/// Frames an authenticated peer may send without asking the runtime to
/// do something drastic on purpose (stopping the proc is its right).
fn harmless(frame: &[u8]) -> bool {
    if frame.len() < 4 {
        return true;
    }
    let hlen = u32::from_le_bytes(frame[..4].try_into().unwrap()) as usize;
    let Some(header) = frame.get(4..4 + hlen) else {
        return true;
    };
    match Envelope::decode(header) {
        Ok(e) => matches!(
            e.kind,
            Kind::Message | Kind::Reply | Kind::Heartbeat | Kind::HeartbeatAck
        ),
        Err(_) => true,
    }
}

fn valid_frames() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut fbb = FlatBufferBuilder::new();
    for (kind, actor) in [(Kind::Message, "nobody"), (Kind::Reply, "")] {
        let mut e = Envelope::new(kind);
        e.actor = actor.into();
        e.method = "m".into();
        e.reply_port = 1 << 40;
        e.part_sizes = vec![3, 4];
        let mut f = Vec::new();
        monarch_core::frame::write_frame(&mut f, e.encode(&mut fbb), &[b"abc", b"defg"]).unwrap();
        out.push(f);
    }
    out
}

/// A well-behaved peer still gets through: `peer` sends to a port of `rt`.
fn exchange_works(rt: &Runtime, secret: &str) {
    let peer = agent(secret);
    let port = rt.open_port(true);
    peer.port_send(&port.port_ref(), Ok(&[b"still here"]))
        .expect("send to the fuzzed runtime");
    let fut = port.recv();
    assert!(
        fut.wait(Some(Duration::from_secs(10))),
        "the fuzzed runtime no longer takes a well-behaved peer's message"
    );
    let vm = fut.take().expect("ready").expect("a value mesh");
    assert_eq!(vm.values[0].parts(), [b"still here".to_vec()]);
    peer.shutdown();
}

#[test]
fn runtime_survives_hostile_tcp_peers() {
    let seed = seed();
    let mut rng = Rng(seed ^ 0x5443_5000);
    let secret = &monarch_core::secret::generate().unwrap();
    let rt = agent(secret);
    let addr = rt.addr().strip_prefix("tcp:").unwrap().to_string();
    let handshakes = client_bytes(secret.as_bytes());
    let frames = valid_frames();
    let n = cases(1_000);
    let start = Instant::now();
    for case in 0..n {
        let mut s = TcpStream::connect(&addr).expect("the runtime still listens");
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
        if case % 2 == 0 {
            // Garbage or a mutated (replayed) handshake: refused.
            let input = mutate(&mut rng, &handshakes, 512);
            let _ = s.write_all(&input);
        } else {
            // Authenticate, then send garbage frames.
            let id = format!("tcp:127.0.0.1:{}", 1 + case);
            connect_handshake(&mut s, secret.as_bytes(), &id)
                .unwrap_or_else(|e| panic!("a well-behaved handshake failed at case {case}: {e}"));
            for _ in 0..1 + rng.below(3) {
                let f = mutate(&mut rng, &frames, 512);
                if harmless(&f) && s.write_all(&f).is_err() {
                    break;
                }
            }
        }
        drop(s);
    }
    eprintln!(
        "runtime: {n} hostile connections in {:?} (MONARCH_FUZZ_SEED={seed})",
        start.elapsed()
    );
    rt.check_running()
        .expect("the fuzzed runtime is still running");
    exchange_works(&rt, secret);
    rt.shutdown();
}
