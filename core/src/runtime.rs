//! The per-process runtime: this process's proc (its listening socket, its
//! connections to peers, its hosted actors and reply ports) and the local
//! child processes it started.
//!
//! Threads: one accept thread, one reader thread per connection, one reaper
//! thread per child. Sends are written by the calling thread itself (no hop
//! through an executor), and replies complete futures directly from the
//! reader thread; waiters spin briefly before parking (see `completion`).

use parking_lot::Mutex;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

/// The runtime's maps are looked up on every message; SipHash (std's
/// default) showed up in profiles, foldhash is several times cheaper.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

use flatbuffers::FlatBufferBuilder;

pub(crate) mod cast;
mod heartbeat;
mod io;
mod ports;
pub use ports::PortReceiver;
pub(crate) mod remote;
pub use remote::{AGENT_ACTOR, CONTROL_ACTOR};
#[cfg(test)]
mod connect_tests;
#[cfg(test)]
mod spin_hint_tests;
mod supervise;

use io::{new_eventfd, signal_eventfd, Io, Parking};

use crate::completion::{Completion, Notifier, Pump, SpinPolicy};
use crate::conn::{Conn, Defer};
use crate::error::{Error, ErrorKind, Result};
use crate::frame::Frame;
use crate::geometry::Shape;
use crate::port::{PortRef, StreamPort};
use crate::process::{Child, ExitInfo, SocketDir};
use crate::transport::{Listener, Stream};
use crate::value::{PointValue, ValueMesh};
use crate::wire::{Envelope, Kind};

pub use crate::future::{Answer, Future};

/// Environment variables a worker proc reads at start-up.
pub const ENV_CONTROLLER: &str = "MONARCH_CONTROLLER";
pub const ENV_PROC_ADDR: &str = "MONARCH_PROC_ADDR";
pub const ENV_JOB_TOKEN: &str = "MONARCH_JOB_TOKEN";
pub const ENV_PROC_RANK: &str = "MONARCH_PROC_RANK";
/// Set by a host agent: the descriptor of the proc's listening TCP socket.
pub const ENV_LISTEN_FD: &str = "MONARCH_LISTEN_FD";

/// How long a newly started proc may take to report Ready.
fn spawn_timeout() -> Duration {
    let secs = std::env::var("MONARCH_SPAWN_TIMEOUT_S")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(120);
    Duration::from_secs(secs)
}

/// What a hosted actor's binding is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum EventKind {
    /// Construct actor `actor` of `type_name` from the argument parts.
    Spawn = 1,
    /// Run endpoint `method` of `actor` on the parts.
    Message = 2,
    /// Stop actor `actor`.
    StopActor = 3,
    /// The proc is stopping: the binding should leave its event loop.
    StopProc = 4,
    /// A mesh owned by actor `actor` failed: part 0 is a
    /// `SupervisionEvent` flatbuffer. Answer OK if the actor handled it,
    /// with an error to escalate (the actor then fails and is reported to
    /// its own owner). Freed unanswered = not handled.
    Supervise = 5,
}

struct ReplyTo {
    peer: String,
    port: u64,
    slot: u64,
}

/// One unit of work for the binding that hosts this proc's actors.
pub struct Event {
    pub kind: EventKind,
    pub actor: String,
    pub method: String,
    pub type_name: String,
    pub parts: Vec<Vec<u8>>,
    /// Rank of this actor in the mesh the message was sent to (for Spawn:
    /// its rank in the mesh it is spawned into).
    pub message_rank: u64,
    /// Encoded Shape of that mesh.
    pub shape: Option<Arc<[u8]>>,
    reply: Option<ReplyTo>,
    answered: bool,
    rt: Weak<Inner>,
}

impl Event {
    /// The proc is stopping: tells the binding to leave its event loop
    /// (nothing to answer).
    fn stop_proc() -> Event {
        Event {
            kind: EventKind::StopProc,
            actor: String::new(),
            method: String::new(),
            type_name: String::new(),
            parts: Vec::new(),
            message_rank: 0,
            shape: None,
            reply: None,
            answered: true,
            rt: Weak::new(),
        }
    }

    /// Answer: `Ok(parts)` or `Err((message, parts))`. Answering a Spawn
    /// marks the actor alive or failed; answering a StopActor removes it.
    pub fn reply(&mut self, result: Answer<'_>) -> Result<()> {
        let rt = self
            .rt
            .upgrade()
            .ok_or_else(|| Error::new(ErrorKind::Stopped, "runtime was shut down"))?;
        rt.answer(self, result)
    }

    /// The proc that sent this message, when it waits for an answer.
    pub fn sender(&self) -> Option<&str> {
        self.reply.as_ref().map(|r| r.peer.as_str())
    }

    /// Whether the sender waits for an answer.
    pub fn wants_reply(&self) -> bool {
        (self.reply.is_some() || self.kind == EventKind::Supervise) && !self.answered
    }

    /// Take over answering: the reply port the sender waits on, as a
    /// reference that may be answered later, from any thread or proc
    /// ([`Runtime::port_send`]). The event then counts as answered (None
    /// when nobody waits).
    pub fn take_reply_port(&mut self) -> Option<PortRef> {
        if self.answered {
            return None;
        }
        self.answered = true;
        self.reply.as_ref().map(|r| PortRef {
            addr: r.peer.clone(),
            port: r.port,
            slot: r.slot,
        })
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // A binding that drops a message without answering must not leave
        // the caller waiting forever.
        if !self.answered
            && matches!(
                self.kind,
                EventKind::Spawn | EventKind::Message | EventKind::StopActor | EventKind::Supervise
            )
        {
            if let Some(rt) = self.rt.upgrade() {
                let msg = if self.kind == EventKind::Supervise {
                    format!("actor '{}' did not handle a supervision event", self.actor)
                } else {
                    format!(
                        "actor '{}' dropped the message for '{}' without replying",
                        self.actor, self.method
                    )
                };
                let _ = rt.answer(self, Err((&msg, &[])));
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum ActorState {
    Starting,
    Alive,
    Failed(String),
}

/// A reply port that gathers one value per slot.
struct Gather {
    shape: Shape,
    peers: Vec<String>,
    /// Which slots' paths went through a (lost) multicast forwarder.
    relays: Option<Arc<crate::multicast::LazyRelays>>,
    state: Mutex<GatherState>,
    done: Future,
}

struct GatherState {
    values: Vec<Option<PointValue>>,
    remaining: usize,
}

struct EventQueue {
    q: Mutex<VecDeque<Event>>,
    len: AtomicUsize,
}

pub(crate) struct Inner {
    addr: String,
    token: String,
    controller: Option<String>,
    dir: Mutex<Option<SocketDir>>,
    notifier: Arc<Notifier>,
    listener: Listener,
    /// A TCP listener opened when this runtime first needs to be reached
    /// from other hosts (a controller attaching host agents): its port.
    tcp_listener: OnceLock<(Arc<Listener>, u16)>,
    /// A proc started by a host agent also listens on a Unix socket in the
    /// agent's directory, for procs of the same host (path, listener).
    unix_alias: OnceLock<(std::path::PathBuf, Arc<Listener>)>,
    /// Procs started by host agents on other hosts.
    remote: remote::RemoteProcs,
    conns: Mutex<HashMap<String, Arc<Conn>>>,
    /// One lock per address being connected to, so threads that need the
    /// same new peer at once make one connection, not one each (a spare
    /// connection would be closed, and its peer would see that as a loss).
    connecting: Mutex<HashMap<String, Arc<Mutex<()>>>>,
    ports: Mutex<HashMap<u64, Arc<Gather>>>,
    /// Stream ports (see `port`): channels and `stream()` casts.
    streams: Mutex<HashMap<u64, Arc<StreamPort>>>,
    /// Multicast relays: replies of a cast's subtree collected here.
    cast_relays: cast::Relays,
    /// Ourselves (for paths that only have `&self`).
    me: Weak<Inner>,
    /// Procs whose connection was lost (multicast routes around them).
    lost: Mutex<std::collections::HashSet<String>>,
    any_lost: AtomicBool,
    actors: Mutex<HashMap<String, ActorState>>,
    events: EventQueue,
    parking: Parking,
    children: Mutex<HashMap<String, Arc<Child>>>,
    ready: Mutex<HashMap<String, Completion<Result<()>>>>,
    next_id: AtomicU64,
    shutting_down: AtomicBool,
    stopped: AtomicBool,
    /// Lets waiters read our sockets while they spin.
    pump: Arc<dyn Pump>,
    /// Spin policy of `next_event`.
    event_spin: SpinPolicy,
    io: Io,
    /// Some connection may hold batched frames not yet written.
    deferred: AtomicBool,
    /// Owners, failed procs and actors, top-level supervision events.
    sup: supervise::Supervision,
    hb: heartbeat::Heartbeat,
}

struct WeakPump {
    rt: Weak<Inner>,
    policy: SpinPolicy,
}

impl Pump for WeakPump {
    fn wait_until(&self, deadline: Option<Instant>, ready: &dyn Fn() -> bool) -> bool {
        match self.rt.upgrade() {
            Some(rt) => rt.wait_until(&self.policy, deadline, ready),
            None => ready(),
        }
    }

    fn wake(&self) {
        if let Some(rt) = self.rt.upgrade() {
            rt.wake_parked();
        }
    }
}

/// The runtime of one process. Cheap to clone.
#[derive(Clone)]
pub struct Runtime {
    pub(crate) inner: Arc<Inner>,
}

/// How long a proc stopping its own children (before itself) waits for
/// them; shorter than a parent's grace so the whole tree stops in time.
const STOP_CHILDREN_GRACE: Duration = Duration::from_secs(3);

/// Sends to one proc in a row after which a thread's next ones are batched.
const BURST_MIN: u32 = 1;

thread_local! {
    /// This thread's current burst: (hash of the proc address, sends to it
    /// since this thread last waited).
    static BURST: std::cell::Cell<(u64, u32)> = const { std::cell::Cell::new((0, 0)) };
    static FBB: RefCell<FlatBufferBuilder<'static>> = RefCell::new(FlatBufferBuilder::with_capacity(512));
}

/// 128 random bits as hex (job secrets, socket directory names).
fn random_hex() -> Result<String> {
    crate::random::hex128().map_err(|e| Error::io("no random bytes from the kernel", e))
}

fn unix_path(addr: &str) -> Result<&str> {
    addr.strip_prefix("unix:")
        .ok_or_else(|| Error::invalid(format!("not a Unix socket address: '{addr}'")))
}

/// Where a new runtime listens.
enum Listen {
    /// Bind this address (its actual address becomes our identity).
    Bind(String),
    /// Adopt an inherited listening TCP socket; `String` is our identity.
    Fd(i32, String),
    /// Bind this TCP address but be known as `tcp:<advertise>:<port>`.
    Advertise(String, std::net::IpAddr),
}

impl Runtime {
    /// Create this process's runtime. In a proc started by a controller
    /// (the bootstrap environment is set) it connects back and reports
    /// Ready; otherwise it is a controller listening on a private socket.
    pub fn new() -> Result<Runtime> {
        match std::env::var(ENV_CONTROLLER) {
            Ok(controller) => {
                let addr = std::env::var(ENV_PROC_ADDR)
                    .map_err(|_| Error::invalid(format!("{ENV_PROC_ADDR} is not set")))?;
                let token = std::env::var(ENV_JOB_TOKEN)
                    .map_err(|_| Error::invalid(format!("{ENV_JOB_TOKEN} is not set")))?;
                let listen = match std::env::var(ENV_LISTEN_FD) {
                    Ok(fd) => Listen::Fd(
                        fd.parse()
                            .map_err(|_| Error::invalid(format!("bad {ENV_LISTEN_FD} '{fd}'")))?,
                        addr,
                    ),
                    Err(_) => Listen::Bind(addr),
                };
                Runtime::start(listen, token, Some(controller), None)
            }
            Err(_) => {
                let dir = SocketDir::create(&random_hex()?[..8])?;
                let addr = format!("unix:{}/controller.sock", dir.path.display());
                // A controller that works with host agents shares the job
                // secret with them; otherwise every run gets a fresh one.
                let token = match std::env::var(ENV_JOB_TOKEN) {
                    Ok(t) if !t.is_empty() => t,
                    _ => random_hex()?,
                };
                Runtime::start(Listen::Bind(addr), token, None, Some(dir))
            }
        }
    }

    /// A runtime reachable over TCP at `bind` (e.g. `tcp:0.0.0.0:0`),
    /// known to others as `tcp:<advertise>:<port>`, authenticating peers
    /// with `secret`. Used by the host agent (`monarch host`).
    pub fn listen_tcp(bind: &str, advertise: std::net::IpAddr, secret: String) -> Result<Runtime> {
        if secret.is_empty() {
            return Err(Error::invalid("the job secret must not be empty"));
        }
        Runtime::start(
            Listen::Advertise(bind.to_string(), advertise),
            secret,
            None,
            None,
        )
    }

    fn start(
        listen: Listen,
        token: String,
        controller: Option<String>,
        dir: Option<SocketDir>,
    ) -> Result<Runtime> {
        // A bad TLS configuration fails here, not at the first connection.
        crate::tls::global()?;
        let (listener, addr) = match listen {
            Listen::Bind(addr) => Listener::bind(&addr)?,
            // SAFETY: the agent that started us handed this descriptor over
            // for exactly this purpose; nothing else in the process owns it.
            Listen::Fd(fd, addr) => (unsafe { Listener::from_tcp_fd(fd) }, addr),
            Listen::Advertise(bind, ip) => {
                let (l, actual) = Listener::bind(&bind)?;
                let port = actual.rsplit(':').next().unwrap_or("0").to_string();
                let ip = match ip {
                    std::net::IpAddr::V6(v6) => format!("[{v6}]"),
                    v4 => v4.to_string(),
                };
                (l, format!("tcp:{ip}:{port}"))
            }
        };
        let notifier = Arc::new(Notifier::new().map_err(|e| Error::io("eventfd", e))?);
        let kick_fd = new_eventfd().map_err(|e| Error::io("eventfd", e))?;
        let inner = Arc::new_cyclic(|weak: &Weak<Inner>| Inner {
            addr,
            token,
            controller: controller.clone(),
            dir: Mutex::new(dir),
            notifier,
            listener,
            tcp_listener: OnceLock::new(),
            unix_alias: OnceLock::new(),
            remote: Default::default(),
            conns: Mutex::new(HashMap::default()),
            connecting: Mutex::new(HashMap::default()),
            ports: Mutex::new(HashMap::default()),
            streams: Mutex::new(HashMap::default()),
            actors: Mutex::new(HashMap::default()),
            cast_relays: Default::default(),
            me: weak.clone(),
            lost: Mutex::new(std::collections::HashSet::new()),
            any_lost: AtomicBool::new(false),
            events: EventQueue {
                q: Mutex::new(VecDeque::new()),
                len: AtomicUsize::new(0),
            },
            parking: Parking {
                fds: Mutex::new(Vec::new()),
                count: AtomicUsize::new(0),
            },
            children: Mutex::new(HashMap::default()),
            ready: Mutex::new(HashMap::default()),
            next_id: AtomicU64::new(1),
            shutting_down: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            pump: Arc::new(WeakPump {
                rt: weak.clone(),
                policy: SpinPolicy::new(),
            }),
            event_spin: SpinPolicy::new(),
            deferred: AtomicBool::new(false),
            sup: Default::default(),
            hb: Default::default(),
            io: Io {
                kick: kick_fd,
                active: AtomicUsize::new(0),
                last_active_ns: AtomicU64::new(0),
                polling: AtomicBool::new(false),
                deep: AtomicBool::new(false),
                epoch: Instant::now(),
                gather_missing: AtomicUsize::new(usize::MAX),
            },
        });
        let acc = inner.clone();
        std::thread::Builder::new()
            .name("monarch-accept".into())
            .spawn(move || acc.accept_loop(&acc.listener))
            .map_err(|e| Error::io("cannot start accept thread", e))?;
        let io = inner.clone();
        std::thread::Builder::new()
            .name("monarch-io".into())
            .spawn(move || io.io_loop())
            .map_err(|e| Error::io("cannot start I/O thread", e))?;
        if let Some(path) = crate::transport::same_host_path(&inner.addr, &inner.addr) {
            // Ours alone while we hold the TCP port: a file left by an
            // earlier proc on this port is stale.
            let _ = std::fs::remove_file(&path);
            match Listener::bind(&format!("unix:{}", path.display())) {
                Ok((l, _)) => {
                    let l = Arc::new(l);
                    let _ = inner.unix_alias.set((path, l.clone()));
                    let acc = inner.clone();
                    std::thread::Builder::new()
                        .name("monarch-accept-unix".into())
                        .spawn(move || acc.accept_loop(&l))
                        .map_err(|e| Error::io("cannot start accept thread", e))?;
                }
                Err(e) => tracing::warn!(error = %e, "no same-host Unix socket; peers use TCP"),
            }
        }
        let rt = Runtime { inner };
        if let Some(c) = controller {
            let conn = rt.inner.connect(&c)?;
            let mut env = Envelope::new(Kind::Ready);
            env.sender = rt.inner.addr.clone();
            rt.inner.write(&conn, &env, &[], Defer::Never)?;
            tracing::debug!(addr = %rt.inner.addr, "worker ready");
        }
        Ok(rt)
    }

    /// This proc's address.
    pub fn addr(&self) -> &str {
        &self.inner.addr
    }

    /// The job token (the data plane authenticates its connections with it).
    pub(crate) fn token(&self) -> &str {
        &self.inner.token
    }

    /// Whether this runtime was started by a controller.
    pub fn is_worker(&self) -> bool {
        self.inner.controller.is_some()
    }

    /// The descriptor that becomes readable on any completion or event.
    pub fn notify_fd(&self) -> i32 {
        self.inner.notifier.fd()
    }

    pub fn clear_notify_fd(&self) {
        self.inner.notifier.clear()
    }

    pub(crate) fn new_future(&self) -> Future {
        Completion::with_pump(
            Some(self.inner.notifier.clone()),
            Some(self.inner.pump.clone()),
        )
    }

    pub(crate) fn next_id(&self) -> u64 {
        self.inner.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Start `n` child processes running `argv` with `env` and the
    /// bootstrap environment added; returns their addresses.
    pub(crate) fn spawn_procs(
        &self,
        n: usize,
        argv: &[String],
        env: &[(String, String)],
    ) -> Result<Vec<String>> {
        self.check_running()?;
        let dir = {
            let mut d = self.inner.dir.lock();
            if d.is_none() {
                *d = Some(SocketDir::create(&random_hex()?[..8])?);
            }
            d.as_ref().map(|d| d.path.clone()).unwrap_or_default()
        };
        let mut addrs = Vec::with_capacity(n);
        for rank in 0..n {
            let addr = format!("unix:{}/p{}.sock", dir.display(), self.next_id());
            // Waiting for Ready reads our sockets, like any other wait.
            let ready: Completion<Result<()>> =
                Completion::with_pump(None, Some(self.inner.pump.clone()));
            self.inner.ready.lock().insert(addr.clone(), ready.clone());
            let mut env = env.to_vec();
            env.extend([
                (ENV_CONTROLLER.to_string(), self.inner.addr.clone()),
                (ENV_PROC_ADDR.to_string(), addr.clone()),
                (ENV_JOB_TOKEN.to_string(), self.inner.token.clone()),
                (ENV_PROC_RANK.to_string(), rank.to_string()),
            ]);
            let weak = Arc::downgrade(&self.inner);
            let opts = crate::process::SpawnOpts {
                capture_output: crate::logs::capture_local(),
                keep_fd: None,
            };
            let child = crate::process::spawn_child_with(
                argv,
                env,
                addr.clone(),
                ready,
                opts,
                move |child, exit| {
                    if let Some(rt) = weak.upgrade() {
                        rt.child_exited(&child, &exit);
                    }
                },
            );
            match child {
                Ok((c, output)) => {
                    if let Some((out, err)) = output {
                        crate::logs::forward_local(out, err, rank as u64);
                    }
                    self.inner.children.lock().insert(addr.clone(), c);
                }
                Err(e) => {
                    // Undo what was started so far.
                    self.stop_procs(&addrs, Duration::from_millis(0));
                    return Err(e);
                }
            }
            addrs.push(addr);
        }
        self.inner.start_heartbeat();
        Ok(addrs)
    }

    /// Ask the given procs to stop; kill those still running after `grace`.
    /// Returns once all of our children among them have exited.
    pub(crate) fn stop_procs(&self, addrs: &[String], grace: Duration) {
        self.inner.mark_stopping(addrs);
        self.inner.forget_lost(addrs);
        self.stop_remote(addrs, grace);
        let children: Vec<Arc<Child>> = {
            let c = self.inner.children.lock();
            addrs.iter().filter_map(|a| c.get(a).cloned()).collect()
        };
        self.inner.mark_stopping(addrs);
        for child in &children {
            if child.ready.peek().is_some_and(|r| r.is_ok()) {
                let mut env = Envelope::new(Kind::StopProc);
                env.sender = self.inner.addr.clone();
                let _ = self.send(&child.addr, &env, &[]);
            } else {
                child.kill();
            }
        }
        let deadline = Instant::now() + grace;
        for child in &children {
            let left = deadline.saturating_duration_since(Instant::now());
            if !child.exit.wait(Some(left)) {
                tracing::warn!(addr = %child.addr, "proc did not stop in time; killing it");
                child.kill();
                child.exit.wait(Some(Duration::from_secs(10)));
            }
        }
    }

    /// Send one message; see [`Inner::send`].
    pub(crate) fn send(&self, addr: &str, env: &Envelope, parts: &[&[u8]]) -> Result<()> {
        self.inner.send(addr, env, parts, Defer::Never)
    }

    /// Like `send`, but when this thread is in a burst of sends to the same
    /// proc (several in a row with no wait in between: pipelined calls),
    /// the frame may be batched with the next ones. Batched frames go out
    /// when any thread of this runtime waits, with the next unbatched
    /// write, or after `FLUSH_DELAY` at the latest.
    pub(crate) fn send_batched(&self, addr: &str, env: &Envelope, parts: &[&[u8]]) -> Result<()> {
        let key = hash_addr(addr);
        let defer = BURST.with(|b| {
            let (last, n) = b.get();
            let n = if last == key { n.saturating_add(1) } else { 1 };
            b.set((key, n));
            if n > BURST_MIN {
                Defer::Yes
            } else {
                Defer::Never
            }
        });
        self.inner.send(addr, env, parts, defer)
    }

    /// Open a reply port gathering one value per slot; `peers[i]` is the
    /// proc expected to fill slot `i` (so its loss fails the slot).
    pub(crate) fn open_gather(
        &self,
        shape: Shape,
        peers: Vec<String>,
        relays: Option<Arc<crate::multicast::LazyRelays>>,
    ) -> (u64, Future) {
        let port = self.next_id();
        let done = self.new_future();
        let n = peers.len();
        let g = Arc::new(Gather {
            shape,
            peers,
            relays,
            state: Mutex::new(GatherState {
                values: (0..n).map(|_| None).collect(),
                remaining: n,
            }),
            done: done.clone(),
        });
        if n == 0 {
            g.finish();
        } else {
            self.inner.ports.lock().insert(port, g);
            self.inner.io.gather_missing.store(n, Ordering::Relaxed);
        }
        (port, done)
    }

    /// Wait until those of `addrs` that are our child procs still starting
    /// have said Ready (a proc that forwards a cast to them can then
    /// connect); one lock for all, none when no proc is starting.
    pub(crate) fn wait_ready_all<'a>(&self, addrs: impl Iterator<Item = &'a str>) {
        let pending: Vec<Completion<Result<()>>> = {
            let ready = self.inner.ready.lock();
            if ready.is_empty() {
                return;
            }
            addrs.filter_map(|a| ready.get(a).cloned()).collect()
        };
        for r in pending {
            r.wait(Some(spawn_timeout()));
        }
    }

    /// How many procs are recorded as lost (for tests: the set is bounded).
    #[doc(hidden)]
    pub fn lost_count(&self) -> usize {
        self.inner.lost.lock().len()
    }

    /// Multicast relays (a forwarding proc's collection of its subtree's
    /// replies) in flight here (for tests: none is left behind).
    #[doc(hidden)]
    pub fn cast_relays_in_flight(&self) -> usize {
        self.inner.cast_relays.len()
    }

    /// The procs whose connection was lost so far.
    pub(crate) fn lost_procs(&self) -> Vec<String> {
        if !self.inner.any_lost.load(Ordering::Relaxed) {
            return Vec::new();
        }
        let lost = self.inner.lost.lock();
        lost.iter().cloned().collect()
    }

    /// Whether the connection to the proc at `addr` was lost (the
    /// multicast tree then routes around it).
    pub(crate) fn is_lost(&self, addr: &str) -> bool {
        self.inner.any_lost.load(Ordering::Relaxed) && self.inner.lost.lock().contains(addr)
    }

    pub(crate) fn register_stream(&self, id: u64, port: Arc<StreamPort>) {
        self.inner.streams.lock().insert(id, port);
    }

    pub(crate) fn close_stream(&self, id: u64) {
        self.inner.streams.lock().remove(&id);
    }

    /// Record a proc mesh spawned by this process (owned by the actor whose
    /// event the calling thread handles, else by the top level); returns
    /// its name for supervision reports.
    pub(crate) fn register_proc_mesh(&self, procs: Arc<Vec<String>>) -> String {
        self.inner.register_proc_mesh(procs)
    }

    /// Record an actor mesh spawned by this process (owner as above).
    pub(crate) fn register_actor_mesh(&self, key: &str, name: &str, procs: &[String]) {
        self.inner.register_actor_mesh(key, name, procs)
    }

    /// Err (ProcFailed) when a destination of a message to actor mesh
    /// `key` is a failed proc or actor.
    pub(crate) fn check_dests<'a>(
        &self,
        key: &str,
        name: &str,
        dests: impl Iterator<Item = (usize, &'a String)>,
    ) -> Result<()> {
        self.inner.check_dests(key, name, dests)
    }

    /// Fill a slot of our own port locally (e.g. when a send failed).
    pub(crate) fn fill_slot(&self, port: u64, slot: u64, value: PointValue) {
        self.inner.fill(port, slot, value);
    }

    /// Take the next event for the actors hosted here, waiting up to
    /// `timeout` (None: forever). Messages for actors that failed to start
    /// are answered with an error here and never surface.
    pub fn next_event(&self, timeout: Option<Duration>) -> Result<Event> {
        let q = &self.inner.events;
        let started = Instant::now();
        let deadline = timeout.map(|t| started + t);
        loop {
            if q.len.load(Ordering::Acquire) == 0 {
                self.inner
                    .wait_until(&self.inner.event_spin, deadline, &|| {
                        q.len.load(Ordering::SeqCst) > 0
                            || self.inner.stopped.load(Ordering::SeqCst)
                    });
            }
            let popped = {
                let mut g = q.q.lock();
                let ev = g.pop_front();
                if ev.is_some() {
                    q.len.fetch_sub(1, Ordering::AcqRel);
                }
                ev
            };
            let ev = match popped {
                Some(ev) => ev,
                None => {
                    if self.inner.stopped.load(Ordering::SeqCst) {
                        return Err(Error::new(ErrorKind::Stopped, "runtime was shut down"));
                    }
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Err(Error::new(ErrorKind::Timeout, "no event"));
                    }
                    continue;
                }
            };
            match ev.kind {
                EventKind::Spawn | EventKind::Message | EventKind::Supervise => {
                    Inner::set_current_owner(&ev.actor)
                }
                _ => Inner::set_current_owner(""),
            }
            if ev.kind == EventKind::Message {
                let state = self.actor_state(&ev.actor);
                if let Some(ActorState::Failed(why)) = state {
                    let mut ev = ev;
                    let msg = format!("actor '{}' failed: {why}", ev.actor);
                    let _ = self.inner.answer(&mut ev, Err((&msg, &[])));
                    continue;
                }
            }
            return Ok(ev);
        }
    }

    fn actor_state(&self, key: &str) -> Option<ActorState> {
        self.inner.actors.lock().get(key).cloned()
    }

    /// Stop accepting work, close every connection, stop every child proc
    /// and remove the socket directory. Idempotent.
    pub fn shutdown(&self) {
        if self.inner.shutting_down.swap(true, Ordering::SeqCst) {
            return;
        }
        let children: Vec<String> = self
            .inner
            .children
            .lock()
            .keys()
            .cloned()
            .chain(self.inner.remote.addrs())
            .collect();
        self.stop_procs(&children, Duration::from_secs(2));
        self.inner.flush_deferred(None);
        self.inner.stopped.store(true, Ordering::SeqCst);
        // Wake the accept threads and every reader thread.
        self.inner.listener.shutdown();
        if let Some((l, _)) = self.inner.tcp_listener.get() {
            l.shutdown();
        }
        if let Some((path, l)) = self.inner.unix_alias.get() {
            l.shutdown();
            let _ = std::fs::remove_file(path);
        }
        let conns: Vec<Arc<Conn>> = self.inner.conns.lock().drain().map(|(_, c)| c).collect();
        for c in conns {
            c.shutdown();
        }
        if let Ok(path) = unix_path(&self.inner.addr) {
            let _ = std::fs::remove_file(path);
        }
        self.inner.dir.lock().take();
        // Fail whatever is still waiting.
        let ports: Vec<Arc<Gather>> = self.inner.ports.lock().drain().map(|(_, g)| g).collect();
        for g in ports {
            g.done
                .complete(Err(Error::new(ErrorKind::Stopped, "runtime was shut down")));
        }
        let streams: Vec<Arc<StreamPort>> =
            self.inner.streams.lock().drain().map(|(_, s)| s).collect();
        for s in streams {
            s.close("runtime was shut down");
        }
        self.inner.wake_parked();
        self.inner.wake_supervision_waiters();
        signal_eventfd(self.inner.io.kick.as_raw_fd());
        crate::logs::flush();
    }

    pub(crate) fn check_running(&self) -> Result<()> {
        if self.inner.stopped.load(Ordering::SeqCst) {
            Err(Error::new(ErrorKind::Stopped, "runtime was shut down"))
        } else {
            Ok(())
        }
    }
}

impl Gather {
    fn finish(&self) {
        let values: Vec<PointValue> = {
            let mut st = self.state.lock();
            st.values
                .iter_mut()
                .map(|v| v.take().unwrap_or_else(|| PointValue::error("no reply")))
                .collect()
        };
        self.done.complete(Ok(ValueMesh {
            shape: self.shape.clone(),
            values,
        }));
    }
}

impl Inner {
    fn accept_loop(self: &Arc<Self>, listener: &Listener) {
        loop {
            match listener.accept() {
                Ok(stream) => {
                    if self.stopped.load(Ordering::SeqCst) {
                        return;
                    }
                    let me = self.clone();
                    let _ = std::thread::Builder::new()
                        .name("monarch-conn".into())
                        .spawn(move || me.serve_inbound(stream));
                }
                Err(e) => {
                    if self.stopped.load(Ordering::SeqCst) {
                        return;
                    }
                    if e.kind() != std::io::ErrorKind::Interrupted {
                        tracing::warn!(error = %e, "accept failed");
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            }
        }
    }

    /// Authenticate an inbound connection, then read from it until it ends.
    fn serve_inbound(self: Arc<Self>, mut stream: Stream) {
        let _ = stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT));
        let _ = stream.set_write_timeout(Some(HANDSHAKE_TIMEOUT));
        let peer = match crate::auth::accept_handshake(
            &mut stream,
            self.token.as_bytes(),
            &self.addr,
        ) {
            Ok(peer) => peer,
            Err(e) => {
                tracing::warn!(from = %stream.peer_desc(), error = %e, "dropping unauthenticated connection");
                return;
            }
        };
        let _ = stream.set_read_timeout(None);
        let _ = stream.set_write_timeout(None);
        let conn = match Conn::new(peer.clone(), stream, Vec::new()) {
            Ok(c) => Arc::new(c),
            Err(e) => {
                tracing::warn!(%peer, error = %e, "cannot set up connection");
                return;
            }
        };
        self.conns
            .lock()
            .entry(peer)
            .or_insert_with(|| conn.clone());
        self.conns_changed();
        self.drain_conn(&conn);
    }

    /// Connect to `addr`, authenticate both ways, register and start
    /// reading. The connection is known under `addr` and under the
    /// identity the peer proved (they differ when we reach a peer through
    /// another of its addresses, e.g. a controller over TCP).
    fn connect(self: &Arc<Self>, addr: &str) -> Result<Arc<Conn>> {
        let gate = self
            .connecting
            .lock()
            .entry(addr.to_string())
            .or_default()
            .clone();
        let result = {
            let _one_at_a_time = gate.lock();
            // Another thread may have connected while we waited.
            let existing = self.conns.lock().get(addr).cloned();
            match existing {
                Some(c) => Ok(c),
                None => self.connect_now(addr),
            }
        };
        let mut connecting = self.connecting.lock();
        // Forget the gate once no other thread holds it.
        if Arc::strong_count(&gate) == 2 {
            connecting.remove(addr);
        }
        result
    }

    fn connect_now(self: &Arc<Self>, addr: &str) -> Result<Arc<Conn>> {
        let mut stream = Stream::connect_from(&self.addr, addr)?;
        let _ = stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT));
        let _ = stream.set_write_timeout(Some(HANDSHAKE_TIMEOUT));
        let identity =
            crate::auth::connect_handshake(&mut stream, self.token.as_bytes(), &self.addr)
                .map_err(|e| {
                    Error::new(
                        ErrorKind::ProcFailed,
                        format!("cannot authenticate with {addr}: {e}"),
                    )
                })?;
        let _ = stream.set_read_timeout(None);
        let _ = stream.set_write_timeout(None);
        let conn = Arc::new(
            Conn::new(addr.to_string(), stream, Vec::new())
                .map_err(|e| Error::io("socket setup", e))?,
        );
        let registered = {
            let mut conns = self.conns.lock();
            let c = conns
                .entry(addr.to_string())
                .or_insert_with(|| conn.clone())
                .clone();
            if identity != addr {
                conns.entry(identity).or_insert_with(|| c.clone());
            }
            c
        };
        self.conns_changed();
        Ok(registered)
    }

    /// A connection ended (once per connection): forget it, fail what it owed.
    fn conn_ended(&self, conn: &Arc<Conn>, reason: String) {
        if !conn.mark_closed() {
            return;
        }
        let peer_still_connected = {
            let mut conns = self.conns.lock();
            conns.retain(|_, c| !Arc::ptr_eq(c, conn));
            conns.contains_key(&conn.peer)
        };
        conn.shutdown();
        // A spare connection to a peer we still reach another way (both
        // sides connected at once) ending is not the peer's loss.
        if !self.stopped.load(Ordering::SeqCst) && !peer_still_connected {
            self.peer_lost(&conn.peer, reason);
        }
    }

    /// The connection to `peer` ended: fail every reply slot it still owed.
    fn peer_lost(&self, peer: &str, reason: String) {
        self.remote_peer_lost(peer, &reason);
        if let Some(p) = self.remote.get(peer) {
            // Prefer how the proc ended, as its agent reports it.
            if p.exit.wait(Some(Duration::from_millis(500))) {
                self.fail_peer_slots(peer, &p.exit.peek().unwrap_or_default());
            }
        }
        let child = self.children.lock().get(peer).cloned();
        let why = match child {
            // Prefer the exit status to "connection closed" when we can get it.
            Some(c) if c.exit.wait(Some(Duration::from_millis(500))) => {
                if let Some(exit) = c.exit.peek() {
                    self.proc_failed(&c, &exit);
                }
                format!(
                    "proc {peer} {}",
                    c.exit.peek().map(|e| e.to_string()).unwrap_or_default()
                )
            }
            _ => format!("lost connection to proc {peer}: {reason}"),
        };
        self.fail_peer_slots(peer, &why);
        if self.controller.as_deref() == Some(peer) {
            // Our controller is gone: stop, and make sure we really exit.
            tracing::warn!("controller connection lost; stopping this proc");
            self.push_event(Event::stop_proc());
            let _ = std::thread::Builder::new()
                .name("monarch-watchdog".into())
                .spawn(|| {
                    std::thread::sleep(Duration::from_secs(5));
                    // SAFETY: terminating the process is the point.
                    unsafe { libc::_exit(1) };
                });
        }
    }

    /// These procs are being stopped: no cast will be routed through them
    /// again, so they leave the lost set.
    fn forget_lost(&self, addrs: &[String]) {
        let mut lost = self.lost.lock();
        for a in addrs {
            lost.remove(a);
        }
        if lost.is_empty() {
            self.any_lost.store(false, Ordering::Relaxed);
        }
    }

    fn fail_peer_slots(&self, peer: &str, why: &str) {
        let ports: Vec<(u64, Arc<Gather>)> = self
            .ports
            .lock()
            .iter()
            .map(|(k, g)| (*k, g.clone()))
            .collect();
        // Routes avoid lost procs; a proc being stopped (its mesh is going
        // away) is not recorded, so the set holds only failed procs of
        // meshes not yet stopped (`forget_lost`) instead of growing forever.
        if !self.is_stopping(peer) {
            self.lost.lock().insert(peer.to_string());
            self.any_lost.store(true, Ordering::Relaxed);
        }
        if let Some(me) = self.me.upgrade() {
            me.relay_peer_lost(peer, why);
        }
        for (port, g) in ports {
            for (slot, p) in g.peers.iter().enumerate() {
                if p == peer {
                    self.fill(port, slot as u64, PointValue::error(why));
                }
            }
            // Points the lost proc was to forward a cast to.
            let relayed = g.relays.as_ref().map(|r| r.slots_through(peer));
            for slot in relayed.into_iter().flatten() {
                let msg = format!("{why} (it was forwarding this cast to this point)");
                self.fill(port, slot, PointValue::error(msg));
            }
        }
        let streams: Vec<(u64, Arc<StreamPort>)> = self
            .streams
            .lock()
            .iter()
            .map(|(k, s)| (*k, s.clone()))
            .collect();
        for (port, s) in streams {
            for slot in s.owed_by(peer) {
                self.fill(port, slot, PointValue::error(why));
            }
        }
    }

    fn child_exited(&self, child: &Child, exit: &ExitInfo) {
        tracing::debug!(addr = %child.addr, %exit, "proc exited");
        child.ready.complete(Err(Error::new(
            ErrorKind::ProcFailed,
            format!("proc {} {exit} before it was ready", child.addr),
        )));
        self.ready.lock().remove(&child.addr);
        // Recorded first, so a call made once this one failed fails at once.
        self.proc_failed(child, exit);
        self.fail_peer_slots(&child.addr, &format!("proc {} {exit}", child.addr));
    }

    fn push_event(&self, ev: Event) {
        {
            let mut q = self.events.q.lock();
            q.push_back(ev);
            self.events.len.fetch_add(1, Ordering::AcqRel);
        }
        self.wake_parked();
        self.notifier.signal();
    }

    /// Handle one frame from `peer` (or from ourselves, for loopback).
    fn dispatch(self: &Arc<Self>, peer: &str, frame: Frame) {
        let Frame {
            envelope: mut env,
            parts,
        } = frame;
        match env.kind {
            Kind::Ready => {
                let r = self.ready.lock().remove(peer);
                match r {
                    Some(r) => {
                        self.heartbeat_seen(peer);
                        r.complete(Ok(()));
                    }
                    None => tracing::warn!(%peer, "unexpected Ready"),
                }
            }
            Kind::Reply => {
                let value = if env.is_error {
                    PointValue::Err {
                        message: env.error,
                        parts,
                    }
                } else {
                    PointValue::Ok(parts)
                };
                self.fill(env.reply_port, env.reply_slot, value);
            }
            Kind::Message if env.actor == remote::CONTROL_ACTOR => {
                self.on_agent_message(peer, &env, &parts);
            }
            Kind::SpawnActor | Kind::Message | Kind::StopActor => {
                let kind = match env.kind {
                    Kind::SpawnActor => EventKind::Spawn,
                    Kind::Message => EventKind::Message,
                    _ => EventKind::StopActor,
                };
                if !env.cast_ranks.is_empty() {
                    // A multicast: pass it down the tree first.
                    self.forward_cast(&mut env, &parts);
                    if env.cast_slots.first() == Some(&crate::multicast::FORWARD_ONLY) {
                        return;
                    }
                }
                let reply = (env.reply_port != 0).then(|| ReplyTo {
                    peer: if env.reply_to.is_empty() {
                        env.sender.clone()
                    } else {
                        env.reply_to.clone()
                    },
                    port: env.reply_port,
                    slot: env.reply_slot,
                });
                if kind == EventKind::Spawn {
                    self.record_hosted(&env.actor, &env.sender, env.message_rank);
                }
                let sender = env.sender;
                let mut ev = Event {
                    kind,
                    actor: env.actor,
                    method: env.method,
                    type_name: env.type_name,
                    parts,
                    message_rank: env.message_rank,
                    shape: env.shape,
                    answered: reply.is_none(),
                    reply,
                    rt: Arc::downgrade(self),
                };
                if let Err(why) = self.admit(&ev) {
                    if ev.reply.is_none()
                        && kind == EventKind::Message
                        && why.starts_with("undeliverable")
                    {
                        // Nobody waits: the sender must still learn of it.
                        ev.answered = true;
                        self.undeliverable(&sender, &ev.actor, &why);
                        return;
                    }
                    // Refused while reading: buffer the answer rather than
                    // risk blocking the reading thread on a full socket.
                    let _ = self.answer_with(&mut ev, Err((&why, &[])), Some(Defer::Yes));
                    return;
                }
                if kind == EventKind::StopActor {
                    // Meshes the actor owns stop before it does.
                    let actor = ev.actor.clone();
                    self.stop_owned_then(Some(&actor), ev);
                    return;
                }
                self.push_event(ev);
            }
            Kind::Supervise => self.on_supervise(peer, &parts),
            Kind::Heartbeat => self.answer_heartbeat(peer),
            Kind::HeartbeatAck => self.heartbeat_seen(peer),
            Kind::StopProc => {
                // Procs this one started stop first.
                self.stop_owned_then(None, Event::stop_proc());
            }
            other => tracing::warn!(%peer, kind = ?other, "unexpected frame kind; ignored"),
        }
    }

    /// Decide whether an actor-bound event may be queued; Err is the reason
    /// it is refused (answered to the sender as an error).
    fn admit(&self, ev: &Event) -> std::result::Result<(), String> {
        let mut actors = self.actors.lock();
        match ev.kind {
            EventKind::Spawn => {
                if actors.contains_key(&ev.actor) {
                    return Err(format!(
                        "an actor named '{}' already exists on proc {}",
                        ev.actor, self.addr
                    ));
                }
                actors.insert(ev.actor.clone(), ActorState::Starting);
                Ok(())
            }
            // A failed actor can still be stopped (its binding cleans up).
            EventKind::StopActor
                if matches!(actors.get(&ev.actor), Some(ActorState::Failed(_))) =>
            {
                Ok(())
            }
            EventKind::Message | EventKind::StopActor => match actors.get(&ev.actor) {
                None => Err(format!(
                    "undeliverable: no actor '{}' on proc {} (never spawned or already stopped)",
                    ev.actor, self.addr
                )),
                Some(ActorState::Failed(why)) => Err(format!("actor '{}' failed: {why}", ev.actor)),
                Some(_) => Ok(()),
            },
            EventKind::StopProc | EventKind::Supervise => Ok(()),
        }
    }

    fn answer(self: &Arc<Self>, ev: &mut Event, result: Answer<'_>) -> Result<()> {
        self.answer_with(ev, result, None)
    }

    /// `answer`, with the batching decision forced when `defer` is set.
    fn answer_with(
        self: &Arc<Self>,
        ev: &mut Event,
        result: Answer<'_>,
        defer: Option<Defer>,
    ) -> Result<()> {
        if ev.answered && (ev.reply.is_some() || ev.kind == EventKind::Supervise) {
            return Err(Error::invalid("this event was already answered"));
        }
        ev.answered = true;
        Inner::clear_current_owner(&ev.actor);
        match ev.kind {
            EventKind::Spawn => {
                let state = match &result {
                    Ok(_) => ActorState::Alive,
                    Err((msg, _)) => ActorState::Failed(format!("constructor raised: {msg}")),
                };
                self.actors.lock().insert(ev.actor.clone(), state);
            }
            EventKind::StopActor => {
                self.actors.lock().remove(&ev.actor);
            }
            EventKind::Supervise => {
                self.supervise_answered(ev, &result);
                return Ok(());
            }
            _ => {}
        }
        let Some(to) = &ev.reply else {
            if let (Err((msg, parts)), EventKind::Message) = (result, ev.kind) {
                // Nobody waits for this answer: the actor has failed, and
                // its owner hears of it.
                let report = format!("endpoint '{}' raised:\n{msg}", ev.method);
                let payload = parts.first().map(|p| p.to_vec()).unwrap_or_default();
                self.actor_failed(
                    &ev.actor,
                    crate::supervision::FailureCause::EndpointError,
                    &report,
                    payload,
                    None,
                );
            }
            return Ok(());
        };
        let mut env = Envelope::new(Kind::Reply);
        env.reply_port = to.port;
        env.reply_slot = to.slot;
        let parts = match result {
            Ok(parts) => parts,
            Err((msg, parts)) => {
                env.is_error = true;
                env.error = msg.to_string();
                parts
            }
        };
        // While more work is queued, this proc will be back for it at once,
        // and replies can go out together when the queue runs dry.
        let defer = defer.unwrap_or(if self.events.len.load(Ordering::SeqCst) > 0 {
            Defer::Yes
        } else {
            Defer::Never
        });
        self.send(&to.peer, &env, parts, defer)
    }

    fn fill(&self, port: u64, slot: u64, value: PointValue) {
        let g = self.ports.lock().get(&port).cloned();
        let Some(g) = g else {
            let value = match self.me.upgrade() {
                Some(me) => match me.relay_fill(port, slot, value) {
                    Some(v) => v,
                    None => return,
                },
                None => value,
            };
            let s = self.streams.lock().get(&port).cloned();
            match s {
                Some(s) => {
                    if s.deliver(slot, value) {
                        self.streams.lock().remove(&port);
                    }
                }
                None => tracing::debug!(port, "reply to a closed port dropped"),
            }
            return;
        };
        let finished = {
            let mut st = g.state.lock();
            let Some(cell) = st.values.get_mut(slot as usize) else {
                tracing::warn!(port, slot, "reply to a slot that does not exist");
                return;
            };
            if cell.is_some() {
                return;
            }
            *cell = Some(value);
            st.remaining -= 1;
            self.io
                .gather_missing
                .store(st.remaining, Ordering::Relaxed);
            st.remaining == 0
        };
        if finished {
            self.ports.lock().remove(&port);
            g.finish();
        }
    }

    /// Send a frame to the proc at `addr`: locally when it is us, else on
    /// the one connection we use for that peer (so order is preserved).
    fn send(
        self: &Arc<Self>,
        addr: &str,
        env: &Envelope,
        parts: &[&[u8]],
        defer: Defer,
    ) -> Result<()> {
        if addr == self.addr {
            let mut env = env.clone();
            if env.sender.is_empty() {
                env.sender = self.addr.clone();
            }
            env.part_sizes = parts.iter().map(|p| p.len() as u64).collect();
            let frame = Frame {
                envelope: env,
                parts: parts.iter().map(|p| p.to_vec()).collect(),
            };
            self.dispatch(&self.addr.clone(), frame);
            return Ok(());
        }
        self.conn_to(addr)
            .and_then(|conn| self.write(&conn, env, parts, defer))
            .map_err(|e| match e.kind {
                // Our child refusing or dropping the connection is most
                // likely exiting: report how it ended, not the socket error.
                ErrorKind::ProcFailed => self
                    .child_exit_error(addr, Duration::from_millis(500))
                    .unwrap_or(e),
                _ => e,
            })
    }

    fn conn_to(self: &Arc<Self>, addr: &str) -> Result<Arc<Conn>> {
        if let Some(c) = self.conns.lock().get(addr) {
            return Ok(c.clone());
        }
        // A child we started connects to us; wait until it has said Ready.
        let pending = self.ready.lock().get(addr).cloned();
        if let Some(ready) = pending {
            if !ready.wait(Some(spawn_timeout())) {
                return Err(Error::new(
                    ErrorKind::ProcFailed,
                    format!(
                        "proc {addr} did not become ready within {:?}",
                        spawn_timeout()
                    ),
                ));
            }
            ready.peek().unwrap_or(Ok(()))?;
            if let Some(c) = self.conns.lock().get(addr) {
                return Ok(c.clone());
            }
        }
        if let Some(e) = self.child_exit_error(addr, Duration::ZERO) {
            return Err(e);
        }
        if let Some(e) = self.remote_dead(addr) {
            return Err(e);
        }
        self.connect(addr)
    }

    /// If `addr` is a child of ours that has exited (waiting up to `wait`
    /// for it to be reaped), an error saying how it ended.
    fn child_exit_error(&self, addr: &str, wait: Duration) -> Option<Error> {
        let child = self.children.lock().get(addr).cloned()?;
        child.exit.wait(Some(wait));
        let exit = child.exit.peek()?;
        Some(Error::new(
            ErrorKind::ProcFailed,
            format!("proc {addr} {exit}"),
        ))
    }

    fn write(&self, conn: &Conn, env: &Envelope, parts: &[&[u8]], defer: Defer) -> Result<()> {
        FBB.with(|fbb| {
            let mut fbb = fbb.borrow_mut();
            let header = env.encode_for(&mut fbb, Some(&self.addr), Some(parts));
            let buffered = conn.write(header, parts, defer).map_err(|e| {
                Error::new(
                    ErrorKind::ProcFailed,
                    format!("cannot send to proc {}: {e}", conn.peer),
                )
            })?;
            if buffered && !self.deferred.swap(true, Ordering::SeqCst) {
                // The I/O thread guarantees the flush if nobody else does.
                signal_eventfd(self.io.kick.as_raw_fd());
            }
            Ok(())
        })
    }
}

fn hash_addr(addr: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    addr.hash(&mut h);
    h.finish() | 1
}

/// How long a peer may take to complete the authentication handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
