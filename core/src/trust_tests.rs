//! A peer that completes the real handshake over TCP, then sends forged
//! frames: each is refused, and the runtime keeps running with its state
//! unchanged (see `runtime::trust`). The legitimate frame of each kind
//! still works. At the crate's top: it drives meshes and the runtime.

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use flatbuffers::FlatBufferBuilder;

use crate::geometry::Shape;
use crate::mesh::{ActorMesh, CallMode, ProcMesh};
use crate::runtime::{EventKind, Runtime};
use crate::supervision::{FailureCause, SupervisionEvent};
use crate::wire::{Envelope, Kind};

const SECRET: &str = "trust-test-secret-0123456789abcdef";
const WAIT: Duration = Duration::from_secs(10);
/// The identity the forging peer claims (nothing listens there).
const FORGER: &str = "tcp:127.0.0.1:1";

fn runtime() -> Runtime {
    Runtime::listen_tcp(
        "tcp:127.0.0.1:0",
        std::net::IpAddr::from([127, 0, 0, 1]),
        SECRET.to_string(),
    )
    .expect("listen on 127.0.0.1")
}

/// A raw TCP peer of `rt` that has passed the real handshake.
struct Forger {
    s: TcpStream,
    fbb: FlatBufferBuilder<'static>,
}

impl Forger {
    fn connect(rt: &Runtime) -> Forger {
        let addr = rt.addr().strip_prefix("tcp:").expect("a TCP runtime");
        let mut s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(WAIT)).unwrap();
        s.set_write_timeout(Some(WAIT)).unwrap();
        crate::auth::connect_handshake(&mut s, SECRET.as_bytes(), FORGER).expect("handshake");
        Forger {
            s,
            fbb: FlatBufferBuilder::new(),
        }
    }

    fn send(&mut self, env: &Envelope, parts: &[&[u8]]) {
        let mut env = env.clone();
        env.part_sizes = parts.iter().map(|p| p.len() as u64).collect();
        let header = env.encode(&mut self.fbb).to_vec();
        crate::frame::write_frame(&mut self.s, &header, parts).expect("write a frame");
        self.s.flush().unwrap();
    }

    /// Send a Supervise frame carrying `ev`.
    fn supervise(&mut self, ev: &SupervisionEvent) {
        let mut env = Envelope::new(Kind::Supervise);
        env.sender = FORGER.into();
        env.actor = ev.actor.clone();
        self.send(&env, &[&ev.encode()]);
    }

    /// Send a legitimate value to a port of `rt` and wait until `rt` has
    /// it: frames of one connection are handled in order, so every frame
    /// sent before has been handled too.
    fn sync(&mut self, rt: &Runtime) {
        let port = rt.open_port(true);
        let mut env = Envelope::new(Kind::Reply);
        env.reply_port = port.id();
        self.send(&env, &[b"sync"]);
        let fut = port.recv();
        assert!(
            fut.wait(Some(WAIT)),
            "the runtime stopped reading this peer"
        );
        assert_eq!(
            fut.take().unwrap().unwrap().values[0].parts(),
            [b"sync".to_vec()]
        );
    }
}

/// A one-point shape.
fn one() -> Shape {
    Shape::dense(vec!["x".into()], vec![1]).unwrap()
}

/// Spawn actor mesh "m" from `owner` on the runtime `host` (whose side is
/// served here: the spawn is answered OK); returns the mesh.
fn spawn_on(owner: &Runtime, host: &Runtime) -> ActorMesh {
    let procs = ProcMesh::from_parts(owner, vec![host.addr().to_string()], one());
    let (mesh, ready) = procs.spawn_actors("m", "T", &[]).expect("spawn");
    let mut ev = host.next_event(Some(WAIT)).expect("the spawn arrives");
    assert_eq!(ev.kind, EventKind::Spawn);
    ev.reply(Ok(&[])).expect("answer the spawn");
    assert!(ready.wait(Some(WAIT)), "spawn answered");
    mesh
}

fn no_event(rt: &Runtime, what: &str) {
    if let Ok(ev) = rt.next_event(Some(Duration::ZERO)) {
        panic!("{what} became an event: {:?} for {}", ev.kind, ev.actor);
    }
}

#[test]
fn a_forged_undeliverable_notice_is_refused() {
    let ctl = runtime();
    let proc_ = runtime();
    let mut forger = Forger::connect(&ctl);
    // Aimed at a mesh the controller never sent to, and at one it did
    // send one-way messages to (on another proc than the forger).
    let mesh = ActorMesh::from_ref(
        &ctl,
        &crate::wire::ActorMeshRef {
            name: "gone".into(),
            key: "gone.1".into(),
            procs: vec![proc_.addr().to_string()],
            shape: one(),
        }
        .encode(),
    )
    .unwrap();
    for key in ["trainer.1", "gone.1"] {
        forger.supervise(&SupervisionEvent {
            mesh_key: key.into(),
            actor: key.into(),
            proc: proc_.addr().into(),
            cause: FailureCause::Undeliverable,
            report: "forged".into(),
            ..Default::default()
        });
    }
    forger.sync(&ctl);
    assert!(
        !ctl.has_supervision_event(),
        "a forged undeliverable notice reached the controller's fault handler: {:?}",
        ctl.next_supervision_event(Some(Duration::ZERO))
    );
    ctl.check_running().expect("the controller runs");
    // The real notice, from the proc the message was sent to, arrives.
    mesh.call("m", &[], CallMode::Broadcast).expect("send");
    let ev = ctl
        .next_supervision_event(Some(WAIT))
        .expect("the real undeliverable notice");
    assert_eq!(ev.cause, FailureCause::Undeliverable);
    assert_eq!(ev.proc, proc_.addr());
    proc_.shutdown();
    ctl.shutdown();
}

#[test]
fn a_reply_to_a_port_never_sent_is_refused() {
    let ctl = runtime();
    let proc_ = runtime();
    let mut forger = Forger::connect(&ctl);
    let (port, fut) = ctl.open_gather(one(), vec![proc_.addr().to_string()], None);
    // The forger knows one port id of the controller (one it was sent)
    // and guesses others: small ones, and those near the one it knows.
    let known = ctl.open_port(true);
    let mut guesses: Vec<u64> = (1..=256).collect();
    guesses.extend((1..=256).map(|d| known.id().wrapping_add(d)));
    guesses.extend((1..=256).map(|d| known.id().wrapping_sub(d)));
    assert!(!guesses.contains(&port), "port ids are predictable");
    for p in guesses {
        send_reply(&mut forger, p);
    }
    forger.sync(&ctl);
    assert!(!fut.is_ready(), "a forged reply filled a call's slot");
    // The real reply fills it.
    let mut env = Envelope::new(Kind::Reply);
    env.reply_port = port;
    proc_.send(ctl.addr(), &env, &[b"real"]).expect("reply");
    assert!(fut.wait(Some(WAIT)));
    assert_eq!(
        fut.take().unwrap().unwrap().values[0].parts(),
        [b"real".to_vec()]
    );
    ctl.check_running().expect("the controller runs");
    proc_.shutdown();
    ctl.shutdown();
}

fn send_reply(forger: &mut Forger, port: u64) {
    let mut env = Envelope::new(Kind::Reply);
    env.reply_port = port;
    forger.send(&env, &[b"forged"]);
}

#[test]
fn a_failure_report_about_another_procs_actor_is_refused() {
    let ctl = runtime();
    let proc_ = runtime();
    let mesh = spawn_on(&ctl, &proc_);
    let key = mesh.to_ref();
    let key = crate::wire::ActorMeshRef::decode(&key).unwrap().key;
    let mut forger = Forger::connect(&ctl);
    for cause in [FailureCause::EndpointError, FailureCause::SupervisorFailed] {
        forger.supervise(&SupervisionEvent {
            mesh_key: key.clone(),
            actor: key.clone(),
            proc: proc_.addr().into(),
            ranks: vec![0],
            cause,
            report: "forged failure".into(),
            ..Default::default()
        });
    }
    forger.sync(&ctl);
    assert!(
        !ctl.has_supervision_event(),
        "a forged failure report was routed: {:?}",
        ctl.next_supervision_event(Some(Duration::ZERO))
    );
    // Calls to the mesh still go through: nothing was marked failed.
    let fut = mesh.call("ping", &[], CallMode::All).unwrap().unwrap();
    let mut ev = proc_.next_event(Some(WAIT)).expect("the call arrives");
    ev.reply(Ok(&[b"pong"])).unwrap();
    assert!(fut.wait(Some(WAIT)));
    assert!(!fut.take().unwrap().unwrap().values[0].is_err());
    // The actor's own proc still reports a real failure.
    mesh.call("boom", &[], CallMode::Broadcast).unwrap();
    let mut ev = proc_.next_event(Some(WAIT)).expect("the message arrives");
    ev.reply(Err(("real failure", &[]))).unwrap();
    let got = ctl
        .next_supervision_event(Some(WAIT))
        .expect("the real failure report");
    assert_eq!(got.proc, proc_.addr());
    assert!(got.report.contains("real failure"), "{}", got.report);
    proc_.shutdown();
    ctl.shutdown();
}

#[test]
fn a_stop_from_a_peer_that_does_not_own_the_target_is_refused() {
    let ctl = runtime();
    let proc_ = runtime();
    let mesh = spawn_on(&ctl, &proc_);
    let key = crate::wire::ActorMeshRef::decode(&mesh.to_ref())
        .unwrap()
        .key;
    // The whole controller (it has no controller of its own).
    let mut at_ctl = Forger::connect(&ctl);
    let mut stop = Envelope::new(Kind::StopProc);
    stop.sender = FORGER.into();
    at_ctl.send(&stop, &[]);
    at_ctl.sync(&ctl);
    no_event(&ctl, "a forged StopProc");
    ctl.check_running().expect("the controller runs");
    // An actor the forger did not spawn, claiming to be itself, or the
    // spawner without being on the spawner's connection.
    let mut at_proc = Forger::connect(&proc_);
    for sender in [FORGER, ctl.addr()] {
        let mut env = Envelope::new(Kind::StopActor);
        env.sender = sender.into();
        env.actor = key.clone();
        at_proc.send(&env, &[]);
    }
    at_proc.send(&stop, &[]);
    // A spawn over the actor's key is refused, and does not make the
    // forger its spawner (who may stop it).
    let mut spawn = Envelope::new(Kind::SpawnActor);
    spawn.sender = FORGER.into();
    spawn.actor = key.clone();
    spawn.type_name = "T".into();
    at_proc.send(&spawn, &[]);
    at_proc.sync(&proc_);
    no_event(&proc_, "a forged stop or spawn");
    // The actor is still there, and its spawner can stop it.
    let stopped = mesh.stop().unwrap();
    let mut ev = proc_.next_event(Some(WAIT)).expect("the real stop");
    assert_eq!(ev.kind, EventKind::StopActor);
    ev.reply(Ok(&[])).unwrap();
    assert!(stopped.wait(Some(WAIT)));
    assert!(!stopped.take().unwrap().unwrap().values[0].is_err());
    proc_.shutdown();
    ctl.shutdown();
}

#[test]
fn a_return_address_that_is_not_the_senders_own_is_refused() {
    let ctl = runtime();
    let proc_ = runtime();
    let mesh = spawn_on(&ctl, &proc_);
    let key = crate::wire::ActorMeshRef::decode(&mesh.to_ref())
        .unwrap()
        .key;
    let mut forger = Forger::connect(&proc_);
    // A call whose answer would go to the controller, and a cast frame
    // naming the receiving proc itself as its sender.
    let mut call = Envelope::new(Kind::Message);
    call.sender = ctl.addr().into();
    call.actor = key.clone();
    call.method = "m".into();
    call.reply_port = 1;
    forger.send(&call, &[]);
    let mut cast = call.clone();
    cast.sender = proc_.addr().into();
    cast.cast_ranks = vec![0];
    cast.cast_slots = vec![0];
    forger.send(&cast, &[]);
    forger.sync(&proc_);
    no_event(&proc_, "a message with another proc's return address");
    // The same call from the forger itself is delivered.
    call.sender = FORGER.into();
    forger.send(&call, &[]);
    let ev = proc_.next_event(Some(WAIT)).expect("the forger's own call");
    assert_eq!(ev.kind, EventKind::Message);
    assert_eq!(ev.sender(), Some(FORGER));
    drop(ev);
    proc_.shutdown();
    ctl.shutdown();
}
