//! The per-process runtime: this process's proc (its listening socket, its
//! connections to peers, its hosted actors and reply ports) and the
//! processes it started.
//!
//! [`Runtime`] (this file) is the public face. Its state is held by parts
//! that each own theirs: `identity` (address, job secret, controller,
//! socket directory), `listeners`, `peers` (connections, lost procs),
//! `ports` (reply ports), `children` (started procs), `actors` and
//! `events` (hosted actors, the event queue), `supervise` (owned meshes,
//! failures, the top level's events), `heartbeat`, `remote` (procs on
//! other hosts) and `cast` (multicast relays). `failures` connects them
//! when a proc or actor fails; `dispatch` handles frames in and out,
//! `links` connections coming and going, `handshakes` accepting and
//! authenticating them, `io` how threads wait.
//!
//! Threads: one accept thread (every listener and every connection still
//! in its handshake), one I/O thread, one reaper thread for all children
//! (pidfds in epoll). Sends are written by the calling thread itself (no
//! hop through an executor); a thread that waits reads the sockets itself, so
//! a reply completes its future on the thread that wants it (see `io`).

use parking_lot::Mutex;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// The runtime's maps are looked up on every message; SipHash (std's
/// default) showed up in profiles, foldhash is several times cheaper.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

use flatbuffers::FlatBufferBuilder;

mod actors;
pub(crate) mod cast;
mod children;
mod counters;
mod debug;
mod dispatch;
mod events;
mod failures;
mod handshakes;
mod heartbeat;
mod identity;
mod introspect;
mod io;
mod links;
mod listeners;
mod peers;
mod poller;
mod ports;
use actors::ActorState;
pub(crate) use children::StartWatch;
pub use events::{Event, EventKind};
pub use introspect::INTROSPECT_ACTOR;
pub(crate) use ports::GatherPeers;
pub use ports::PortReceiver;
pub(crate) mod remote;
pub use remote::{AGENT_ACTOR, CONTROL_ACTOR};
#[cfg(test)]
mod connect_tests;
#[cfg(test)]
mod empty_key_tests;
#[cfg(test)]
mod many_conns_tests;
#[cfg(test)]
mod notify_fd_tests;
mod setup_errors;
#[cfg(test)]
mod spin_hint_tests;
mod supervise;
mod trust;

use crate::eventfd::EventFd;
use identity::Identity;
use io::{Io, Parking};
use listeners::{Listen, Listeners};
use supervise::Supervision;

use crate::completion::{Completion, Notifier, Pump, SpinPolicy};
use crate::conn::Defer;
use crate::error::{Error, ErrorKind, Result};
use crate::geometry::Shape;
use crate::port::{PortRef, StreamPort};
use crate::process::SocketDir;
use crate::progress::ProgressKind;
use crate::supervision::SupervisionEvent;
use crate::value::PointValue;
use crate::wire::{Envelope, Kind};

pub use crate::future::{Answer, Future};

/// The controller's address (a worker proc reads this and the `ENV_*`
/// below at start-up).
pub const ENV_CONTROLLER: &str = "MONARCH_CONTROLLER";
/// The address the proc must listen on.
pub const ENV_PROC_ADDR: &str = "MONARCH_PROC_ADDR";
/// The job secret procs authenticate each other with.
pub const ENV_JOB_TOKEN: &str = "MONARCH_JOB_TOKEN";
/// The proc's rank in the mesh it was spawned into.
pub const ENV_PROC_RANK: &str = "MONARCH_PROC_RANK";
/// Set by a host agent: the descriptor of the proc's listening TCP socket.
pub const ENV_LISTEN_FD: &str = "MONARCH_LISTEN_FD";
/// The address of the host agent that started this proc (it probes the
/// proc's heartbeats over the connection the proc opens to it).
pub const ENV_AGENT: &str = "MONARCH_AGENT";

/// How long a newly started proc may take to report Ready.
fn spawn_timeout() -> Duration {
    let secs = std::env::var("MONARCH_SPAWN_TIMEOUT_S")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(120);
    Duration::from_secs(secs)
}

pub(crate) struct Inner {
    // Who this proc is, where it listens, whether it is stopping.
    id: Identity,
    listeners: Listeners,
    lifecycle: Lifecycle,
    /// Ourselves (for paths that only have `&self`).
    me: Weak<Inner>,
    /// Unique ids (child sockets, actor keys; ports and relays through
    /// `trust`).
    next_id: AtomicU64,
    /// Who may send what: port ids, the refusal log.
    trust: trust::Trust,
    /// Why inbound connections could not be set up.
    setup_errors: setup_errors::SetupErrors,

    // The parts that own the runtime's state.
    peers: peers::Peers,
    ports: ports::ReplyPorts,
    actors: actors::Actors,
    events: events::EventQueue,
    children: children::Children,
    /// Procs started by host agents on other hosts.
    remote: remote::RemoteProcs,
    /// Multicast relays: replies of a cast's subtree collected here.
    cast_relays: cast::Relays,
    /// Multicast: our subtree's addresses in each proc mesh.
    cast_tables: cast::Tables,
    /// Casts received carrying the view (for tests).
    cast_views: AtomicU64,
    /// Owners, failed procs and actors, top-level supervision events.
    supervision: Supervision,
    heartbeat: heartbeat::Heartbeat,
    /// Remote-debugging sessions (the root controller's registry).
    debug: debug::DebugSessions,
    /// Templates local procs are forked from.
    zygotes: crate::zygote::Zygotes,

    // How threads wait and wake (see `io`).
    notifier: Arc<Notifier>,
    parking: Parking,
    /// Lets waiters read our sockets while they spin.
    pump: Arc<dyn Pump>,
    /// Spin policy of `next_event`.
    event_spin: SpinPolicy,
    io: Io,
    /// Some connection may hold batched frames not yet written.
    deferred: AtomicBool,
}

/// Whether the runtime is shutting down, and whether it has stopped
/// (connections closed, waiters failed).
#[derive(Default)]
struct Lifecycle {
    shutting_down: AtomicBool,
    stopped: AtomicBool,
}

impl Lifecycle {
    /// True for the one caller that is to shut the runtime down.
    fn begin_shutdown(&self) -> bool {
        !self.shutting_down.swap(true, Ordering::SeqCst)
    }

    #[inline]
    fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    fn mark_stopped(&self) {
        self.stopped.store(true, Ordering::SeqCst);
    }

    #[inline]
    fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }
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

/// 128 random bits as hex (socket directory names).
fn random_hex() -> Result<String> {
    crate::random::hex128().map_err(|e| Error::io("no random bytes from the kernel", e))
}

fn unix_path(addr: &str) -> Result<&str> {
    addr.strip_prefix("unix:")
        .ok_or_else(|| Error::invalid(format!("not a Unix socket address: '{addr}'")))
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
                crate::secret::check(&token, ENV_JOB_TOKEN)?;
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
                    Ok(t) if !t.is_empty() => {
                        crate::secret::check(&t, ENV_JOB_TOKEN)?;
                        t
                    }
                    _ => crate::secret::generate()
                        .map_err(|e| Error::io("no random bytes from the kernel", e))?,
                };
                write_secret_file(&dir.path, &token)?;
                crate::trace::job_started();
                Runtime::start(Listen::Bind(addr), token, None, Some(dir))
            }
        }
    }

    /// A runtime reachable over TCP at `bind` (e.g. `tcp:0.0.0.0:0`),
    /// known to others as `tcp:<advertise>:<port>`, authenticating peers
    /// with `secret`, which must be strong (`crate::secret::check`). Used
    /// by the host agent (`monarch host`).
    pub fn listen_tcp(bind: &str, advertise: std::net::IpAddr, secret: String) -> Result<Runtime> {
        crate::secret::check(&secret, "the job secret")?;
        Runtime::start(
            Listen::Advertise(bind.to_string(), advertise),
            secret,
            None,
            None,
        )
    }

    /// A proc's runtime listening on `listener` (known as `addr`), which
    /// connects to `controller`, authenticates with `secret` and says
    /// Ready: what `Runtime::new` does in a proc from its environment,
    /// for many in-process procs (`core/examples/scale_agents.rs`).
    pub fn proc_on_listener(
        listener: std::net::TcpListener,
        addr: String,
        secret: String,
        controller: String,
    ) -> Result<Runtime> {
        use std::os::fd::IntoRawFd;
        crate::secret::check(&secret, "the job secret")?;
        Runtime::start(
            Listen::Fd(listener.into_raw_fd(), addr),
            secret,
            Some(controller),
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
        let (listeners, addr) = Listeners::bind(listen)?;
        let notifier = Arc::new(Notifier::new().map_err(|e| Error::io("eventfd", e))?);
        let kick_fd = EventFd::new().map_err(|e| Error::io("eventfd", e))?;
        let peers = peers::Peers::new().map_err(|e| Error::io("epoll", e))?;
        let inner = Arc::new_cyclic(|weak: &Weak<Inner>| Inner {
            id: Identity::new(addr, token, controller.clone(), dir),
            notifier,
            listeners,
            remote: Default::default(),
            peers,
            ports: Default::default(),
            actors: Default::default(),
            cast_relays: Default::default(),
            cast_tables: Default::default(),
            cast_views: AtomicU64::new(0),
            me: weak.clone(),
            events: Default::default(),
            parking: Parking {
                fds: Mutex::new(Vec::new()),
                count: AtomicUsize::new(0),
            },
            children: Default::default(),
            zygotes: Default::default(),
            next_id: AtomicU64::new(1),
            trust: Default::default(),
            setup_errors: Default::default(),
            lifecycle: Lifecycle::default(),
            pump: Arc::new(WeakPump {
                rt: weak.clone(),
                policy: SpinPolicy::new(),
            }),
            event_spin: SpinPolicy::new(),
            deferred: AtomicBool::new(false),
            supervision: Default::default(),
            heartbeat: Default::default(),
            debug: Default::default(),
            io: Io {
                kick: kick_fd,
                active: AtomicUsize::new(0),
                last_active_ns: AtomicU64::new(0),
                polling: AtomicBool::new(false),
                deep: AtomicBool::new(false),
                epoch: Instant::now(),
            },
        });
        inner.listeners.open_unix_alias(&inner.id.addr);
        let acc = inner.clone();
        std::thread::Builder::new()
            .name("monarch-accept".into())
            .spawn(move || acc.accept_loop())
            .map_err(|e| Error::io("cannot start accept thread", e))?;
        let io = inner.clone();
        std::thread::Builder::new()
            .name("monarch-io".into())
            .spawn(move || io.io_loop())
            .map_err(|e| Error::io("cannot start I/O thread", e))?;
        let rt = Runtime { inner };
        if let Some(c) = controller {
            // A proc started by a host agent connects to it first, so the
            // agent can probe its heartbeats from before it is Ready.
            if let Ok(agent) = std::env::var(ENV_AGENT) {
                if let Err(e) = rt.inner.connect(&agent) {
                    tracing::warn!(%agent, error = %e, "cannot reach this proc's host agent");
                }
            }
            let conn = rt.inner.connect(&c)?;
            let mut env = Envelope::new(Kind::Ready);
            env.sender = rt.inner.id.addr.clone();
            rt.inner.write(&conn, &env, &[], Defer::Never)?;
            tracing::debug!(addr = %rt.inner.id.addr, "worker ready");
        }
        Ok(rt)
    }

    /// The environment entry giving a child proc the job's debug
    /// registry (`debug_protocol`): the one this proc was given, else this
    /// proc's own, reached at `my_addr` (the address the child knows us by).
    pub fn debug_env(&self, my_addr: &str) -> (String, String) {
        use crate::debug_protocol::{DEBUG_ACTOR, ENV_DEBUG_REF};
        let value = match std::env::var(ENV_DEBUG_REF) {
            Ok(v) if !v.is_empty() && self.is_worker() => v,
            _ => {
                let r = crate::wire::ActorMeshRef {
                    name: "monarch_debug".into(),
                    key: DEBUG_ACTOR.into(),
                    procs: vec![my_addr.to_string()],
                    shape: Shape::dense(Vec::new(), Vec::new()).expect("the empty shape"),
                };
                r.encode().iter().map(|b| format!("{b:02x}")).collect()
            }
        };
        (ENV_DEBUG_REF.to_string(), value)
    }

    /// This proc's address.
    pub fn addr(&self) -> &str {
        &self.inner.id.addr
    }

    /// Whether this runtime was started by a controller.
    pub fn is_worker(&self) -> bool {
        self.inner.id.controller.is_some()
    }

    /// The descriptor that becomes readable on any completion or event.
    /// Asking for it also has the I/O thread read the sockets for its
    /// watcher, until a thread next waits inside the runtime (which reads
    /// them itself): ask again before going back to watching it.
    pub fn notify_fd(&self) -> i32 {
        let was_watched = self.inner.notifier.is_watched();
        let fd = self.inner.notifier.fd();
        if !was_watched {
            self.inner.watch_started();
        }
        fd
    }

    /// Make the notification descriptor not readable.
    pub fn clear_notify_fd(&self) {
        self.inner.notifier.clear()
    }

    /// A pending future of this runtime: waiting on it reads the
    /// runtime's sockets, and completing it signals the notification
    /// descriptor.
    pub fn new_future(&self) -> Future {
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
        let dir = self.inner.id.socket_dir()?;
        let capture = crate::logs::capture_local();
        // Procs forked from a zygote get the environment an exec'd child
        // would get now, and our working directory.
        let zygote = crate::zygote::wanted(env).then(|| {
            let child_env = crate::zygote::child_environment(env);
            let key = crate::zygote::key_of(argv, &child_env);
            let cwd = std::env::current_dir().unwrap_or_default();
            (
                child_env,
                cwd,
                self.inner.zygotes.get_or_start(argv, env, key),
            )
        });
        if n == 0 {
            return Ok(Vec::new());
        }
        let mut addrs = Vec::with_capacity(n);
        let progress = crate::progress::start(ProgressKind::ProcsReady, "procs ready", n as u64);
        for rank in 0..n {
            let addr = format!("unix:{}/p{}.sock", dir.display(), self.next_id());
            // Waiting for Ready reads our sockets, like any other wait.
            let ready: Completion<Result<()>> =
                Completion::with_pump(None, Some(self.inner.pump.clone()));
            let watch = StartWatch::new(rank, &addr, &progress);
            self.inner
                .children
                .expect_ready(&addr, ready.clone(), watch);
            let identity = [
                (ENV_CONTROLLER.to_string(), self.inner.id.addr.clone()),
                (ENV_PROC_ADDR.to_string(), addr.clone()),
                (ENV_JOB_TOKEN.to_string(), self.inner.id.token.clone()),
                (ENV_PROC_RANK.to_string(), rank.to_string()),
                self.debug_env(&self.inner.id.addr),
            ];
            let weak = Arc::downgrade(&self.inner);
            let on_exit: crate::zygote::OnExit = Box::new(move |child, exit| {
                if let Some(rt) = weak.upgrade() {
                    rt.child_exited(&child, &exit);
                }
            });
            let mut on_exit = Some(on_exit);
            let mut child = None;
            if let Some((child_env, cwd, Some(z))) = &zygote {
                let mut proc_env = child_env.clone();
                proc_env.extend(identity.iter().map(|(k, v)| (k.into(), v.into())));
                let proc = crate::zygote::NewProc {
                    addr: addr.clone(),
                    ready: ready.clone(),
                    on_exit: on_exit.take().expect("on_exit"),
                };
                match z.fork(&proc_env, cwd, capture, spawn_timeout(), proc) {
                    Ok(c) => child = Some(Ok(c)),
                    Err((e, back)) => {
                        tracing::warn!(error = %e, "zygote could not fork; starting the proc with exec");
                        on_exit = Some(back);
                    }
                }
            }
            let child = match child {
                Some(c) => c,
                None => {
                    let mut env = env.to_vec();
                    env.extend(identity);
                    let opts = crate::process::SpawnOpts {
                        capture_output: capture,
                        keep_fd: None,
                    };
                    let on_exit = on_exit.take().expect("on_exit");
                    crate::process::spawn_child_with(argv, env, addr.clone(), ready, opts, on_exit)
                }
            };
            match child {
                Ok((c, output)) => {
                    if let Some((out, err)) = output {
                        crate::logs::forward_local(out, err, rank as u64, &addr);
                    }
                    self.inner.new_proc_at(&addr);
                    self.inner.children.insert(addr.clone(), c);
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

    /// Start the zygote procs spawned with `argv` and `env` will be forked
    /// from, ahead of the first spawn (see [`crate::zygote`]).
    pub fn warm_zygote(&self, argv: &[String], env: &[(String, String)]) -> Result<()> {
        if argv.is_empty() {
            return Err(Error::invalid("bootstrap command is empty"));
        }
        self.spawn_procs(0, argv, env).map(|_| ())
    }

    /// Ask the given procs to stop; kill those still running after `grace`.
    /// Returns once all of our children among them have exited.
    pub(crate) fn stop_procs(&self, addrs: &[String], grace: Duration) {
        self.inner.supervision.mark_stopping(addrs);
        self.inner.peers.forget_lost(addrs);
        self.stop_remote(addrs, grace);
        let children = self.inner.children.among(addrs);
        for child in &children {
            if child.ready.peek().is_some_and(|r| r.is_ok()) {
                let mut env = Envelope::new(Kind::StopProc);
                env.sender = self.inner.id.addr.clone();
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
        self.inner.supervision.meshes_stopped(addrs);
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
        peers: impl Into<GatherPeers>,
        relays: Option<Arc<crate::multicast::LazyRelays>>,
    ) -> (u64, Future) {
        let port = self.inner.new_port_id();
        let done = self.new_future();
        self.inner
            .ports
            .open_gather(port, shape, peers.into(), relays, done.clone());
        (port, done)
    }

    /// Wait until those of `addrs` that are our child procs still starting
    /// have said Ready (a proc that forwards a cast to them can then
    /// connect); one lock for all, none when no proc is starting.
    pub(crate) fn wait_ready_all<'a>(&self, addrs: impl Iterator<Item = &'a str>) {
        self.inner.children.wait_ready_all(addrs, spawn_timeout());
    }

    /// How many procs are recorded as lost (for tests: the set is bounded).
    #[doc(hidden)]
    pub fn lost_count(&self) -> usize {
        self.inner.peers.lost_count()
    }

    /// Multicast relays (a forwarding proc's collection of its subtree's
    /// replies) in flight here (for tests: none is left behind).
    #[doc(hidden)]
    pub fn cast_relays_in_flight(&self) -> usize {
        self.inner.cast_relays.len()
    }

    /// Address tables of proc meshes this proc forwards casts for (for
    /// tests: tables are learned from spawns).
    #[doc(hidden)]
    pub fn cast_tables_known(&self) -> usize {
        self.inner.cast_tables.len()
    }

    /// Casts this proc received carrying the view rather than node lists
    /// (for tests: the view is what travels).
    #[doc(hidden)]
    pub fn cast_views_received(&self) -> u64 {
        self.inner.cast_views.load(Ordering::Relaxed)
    }

    /// The procs whose connection was lost so far.
    pub(crate) fn lost_procs(&self) -> Vec<String> {
        self.inner.peers.lost()
    }

    /// Whether the connection to the proc at `addr` was lost (the
    /// multicast tree then routes around it).
    pub(crate) fn is_lost(&self, addr: &str) -> bool {
        self.inner.peers.is_lost(addr)
    }

    pub(crate) fn register_stream(&self, id: u64, port: Arc<StreamPort>) {
        self.inner.ports.register_stream(id, port);
    }

    pub(crate) fn close_stream(&self, id: u64) {
        self.inner.ports.close_stream(id);
    }

    /// Record a proc mesh spawned by this process (owned by the actor whose
    /// event the calling thread handles, else by the top level); returns
    /// its name for supervision reports.
    pub(crate) fn register_proc_mesh(&self, procs: Arc<Vec<String>>) -> String {
        self.inner.supervision.register_proc_mesh(procs)
    }

    /// Record an actor mesh spawned by this process (owner as above).
    pub(crate) fn register_actor_mesh(&self, key: &str, name: &str, procs: &[String]) {
        self.inner.supervision.register_actor_mesh(key, name, procs)
    }

    /// This process sends a one-way message to actor mesh `mesh` (see
    /// `Supervision::note_one_way`).
    pub(crate) fn note_one_way(&self, mesh: &Arc<crate::wire::ActorMeshRef>) {
        self.inner.supervision.note_one_way(mesh);
    }

    /// Err (ProcFailed) when a destination of a message to actor mesh
    /// `key` is a failed proc or actor.
    pub(crate) fn check_dests<'a>(
        &self,
        key: &str,
        name: &str,
        dests: impl Iterator<Item = (usize, &'a String)>,
    ) -> Result<()> {
        self.inner.supervision.check_dests(key, name, dests)
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
            if q.len(Ordering::Acquire) == 0 {
                self.inner
                    .wait_until(&self.inner.event_spin, deadline, &|| {
                        q.len(Ordering::SeqCst) > 0 || self.inner.lifecycle.is_stopped()
                    });
            }
            let mut ev = match q.pop() {
                Some(ev) => ev,
                None => {
                    if self.inner.lifecycle.is_stopped() {
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
                    Supervision::set_current_owner(&ev.actor)
                }
                _ => Supervision::set_current_owner(""),
            }
            if ev.kind == EventKind::Message {
                let state = self.inner.actors.state(&ev.actor);
                if let Some(ActorState::Failed(report)) = state {
                    if let Some(c) = ev.counters.take() {
                        c.withdrawn();
                    }
                    let _ = self.inner.answer(&mut ev, Err((&report, &[])));
                    continue;
                }
                if ev.counters.is_some() {
                    ev.taken = Some(Instant::now());
                }
            }
            let mut ev = ev;
            ev.span = tracing::info_span!(
                "handle",
                kind = ?ev.kind,
                actor = %ev.actor,
                method = %ev.method,
                rank = ev.message_rank,
                msg = ev.message_id(),
            );
            return Ok(ev);
        }
    }

    /// Stop accepting work, close every connection, stop every child proc
    /// and remove the socket directory. Idempotent.
    pub fn shutdown(&self) {
        if !self.inner.lifecycle.begin_shutdown() {
            return;
        }
        let children: Vec<String> = self
            .inner
            .children
            .addrs()
            .into_iter()
            .chain(self.inner.remote.addrs())
            .collect();
        self.stop_procs(&children, Duration::from_secs(2));
        self.inner.zygotes.stop_all();
        self.inner.flush_deferred(None);
        self.inner.lifecycle.mark_stopped();
        // Wake the accept threads and every reader thread.
        self.inner.listeners.shutdown();
        for c in self.inner.peers.drain() {
            c.shutdown();
        }
        if let Ok(path) = unix_path(&self.inner.id.addr) {
            let _ = std::fs::remove_file(path);
        }
        self.inner.id.remove_socket_dir();
        // Fail whatever is still waiting.
        self.inner.ports.close_all("runtime was shut down");
        self.inner.wake_parked();
        self.inner.supervision.wake_waiters();
        self.inner.io.kick.signal();
        // The children are gone: their last lines are in the pipes.
        crate::logs::wait_local_output(Duration::from_secs(1));
        crate::logs::flush();
        // The procs have exited and written their parts of the trace.
        crate::trace::flush();
        crate::trace::job_finished();
    }

    /// Open a stream port of this proc; `once`: it takes one value only.
    pub fn open_port(&self, once: bool) -> PortReceiver {
        self.open_stream(once, None)
    }

    /// Send one value (or error) to the port named by `to`. A port of this
    /// proc is filled in place; otherwise a Reply frame goes to its proc.
    pub fn port_send(&self, to: &PortRef, result: Answer<'_>) -> Result<()> {
        self.check_running()?;
        let (env, parts) = dispatch::reply_envelope(to.port, to.slot, result);
        self.send(&to.addr, &env, parts)
    }

    /// Make `actor` ("" = this process's top level) the owner of meshes
    /// the calling thread spawns from now on. The runtime does this itself
    /// when `next_event` hands the thread an event (and clears it when the
    /// event is answered); a binding that runs an actor's code on another
    /// thread (an async event loop) calls it right before spawning.
    pub fn set_spawn_owner(&self, actor: &str) {
        Supervision::set_current_owner(actor);
    }

    /// Take the next supervision event addressed to this process's top
    /// level (the controller's program), waiting up to `timeout` (None:
    /// forever). Does not read sockets itself (other threads and the I/O
    /// thread do), so a thread may block here for good.
    pub fn next_supervision_event(&self, timeout: Option<Duration>) -> Result<SupervisionEvent> {
        let inner = &self.inner;
        inner
            .supervision
            .next_top_level(timeout, &|| inner.lifecycle.is_stopped())
    }

    /// Whether a supervision event is waiting for the top level.
    pub fn has_supervision_event(&self) -> bool {
        self.inner.supervision.has_top_level_event()
    }

    /// Accept messages for the built-in actor `name`, served by the
    /// program itself (the host agent's [`AGENT_ACTOR`]).
    pub fn serve_builtin(&self, name: &str) {
        self.inner.actors.set(name, ActorState::Alive);
    }

    /// The job secret this runtime authenticates peers with.
    pub fn job_token(&self) -> &str {
        &self.inner.id.token
    }

    /// Whether a connection to (or from) `addr` is open.
    pub fn is_connected(&self, addr: &str) -> bool {
        self.inner.peers.contains(addr)
    }

    /// Report `method` with `parts` to the controller at `controller`
    /// (see `agent_protocol`), if it is still connected; never reconnects.
    pub fn report(&self, controller: &str, method: &str, parts: &[&[u8]]) -> Result<()> {
        if !self.is_connected(controller) {
            return Err(Error::new(
                ErrorKind::ProcFailed,
                format!("controller {controller} is not connected"),
            ));
        }
        let mut env = Envelope::new(Kind::Message);
        env.actor = CONTROL_ACTOR.to_string();
        env.method = method.to_string();
        self.send(controller, &env, parts)
    }

    /// Err (`Stopped`) once the runtime was shut down.
    pub fn check_running(&self) -> Result<()> {
        if self.inner.lifecycle.is_stopped() {
            Err(Error::new(ErrorKind::Stopped, "runtime was shut down"))
        } else {
            Ok(())
        }
    }
}

/// The file beside a controller's socket holding its job secret (mode
/// 0600 in the 0700 socket directory), so the user's tools on this host
/// (`monarch top`, `monarch debug`) can attach to it.
pub const SECRET_FILE: &str = "job.secret";

fn write_secret_file(dir: &std::path::Path, token: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(SECRET_FILE);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut f| f.write_all(token.as_bytes()))
        .map_err(|e| Error::io(&format!("writing {}", path.display()), e))
}

fn hash_addr(addr: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    addr.hash(&mut h);
    h.finish() | 1
}
