//! `monarch host`: the host agent.
//!
//! Listens on TCP, authenticates every connection with the job secret
//! (SPAKE2 and key confirmation, `monarch_core::auth`), and serves the
//! built-in actor `AGENT_ACTOR` for controllers: `prepare` binds listening
//! sockets for new procs (so the controller knows their addresses before
//! they start), `start` starts them with the bootstrap environment (their
//! listening socket inherited), `kill` kills them, `info` names the host.
//! It reports each proc's exit and streams its stdout/stderr, line by
//! line, to the controller that started it. It probes its procs'
//! heartbeats itself and reports a proc that stops answering (the
//! controller fails it and asks for it to be killed; it probes only the
//! agents). Procs of a controller whose connection is lost are killed. SIGTERM/SIGINT: kill all procs, exit 0.
//! `--tls-cert/--tls-key/--tls-ca` turn on mutual TLS for the agent and
//! its procs (they become `MONARCH_TLS_*` in the environment the procs
//! inherit; see `monarch_core::tls`).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::{IpAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PREPARED_TTL: Duration = Duration::from_secs(300);

use monarch_core::agent_protocol::{
    AGENT_ACTOR, EXIT, EXIT_CODE, EXIT_SIGNAL, HUNG, INFO, KILL, LOG_STDERR, LOG_STDOUT, PREPARE,
    START,
};
use monarch_core::completion::Completion;
use monarch_core::process::{spawn_child_with, Child, ExitInfo, SocketDir, SpawnOpts};
use monarch_core::runtime::{
    ENV_AGENT, ENV_CONTROLLER, ENV_JOB_TOKEN, ENV_LISTEN_FD, ENV_PROC_ADDR, ENV_PROC_RANK,
};
use monarch_core::{ErrorKind, Event, EventKind, Runtime};

use crate::reports::{forward, Report, ReportQueues, Reports};

/// Parsed command line of `monarch host`.
pub struct Args {
    pub listen: String,
    pub advertise: Option<IpAddr>,
    pub secret_file: Option<String>,
    /// `--tls-cert`, `--tls-key`, `--tls-ca` (in that order).
    pub tls: [Option<String>; 3],
}

pub fn parse_args(args: &[String]) -> Result<Args, String> {
    let mut listen = None;
    let mut advertise = None;
    let mut secret_file = None;
    let mut tls: [Option<String>; 3] = Default::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (key, inline) = match a.split_once('=') {
            Some((k, v)) if k.starts_with("--") => (k, Some(v.to_string())),
            _ => (a.as_str(), None),
        };
        let mut value = |name: &str| -> Result<String, String> {
            match inline.clone().or_else(|| it.next().cloned()) {
                Some(v) if !v.is_empty() => Ok(v),
                _ => Err(format!("{name} needs a value")),
            }
        };
        match key {
            "--listen" => listen = Some(value("--listen")?),
            "--advertise" => {
                let v = value("--advertise")?;
                advertise = Some(
                    v.parse::<IpAddr>()
                        .map_err(|_| format!("--advertise: '{v}' is not an IP address"))?,
                );
            }
            "--secret-file" => secret_file = Some(value("--secret-file")?),
            "--tls-cert" => tls[0] = Some(value("--tls-cert")?),
            "--tls-key" => tls[1] = Some(value("--tls-key")?),
            "--tls-ca" => tls[2] = Some(value("--tls-ca")?),
            other => return Err(format!("unexpected argument '{other}'")),
        }
    }
    let listen = listen.ok_or("missing --listen ADDR")?;
    if tls.iter().any(Option::is_some) && !tls.iter().all(Option::is_some) {
        return Err("--tls-cert, --tls-key and --tls-ca go together".into());
    }
    Ok(Args {
        listen,
        advertise,
        secret_file,
        tls,
    })
}

/// Put the TLS flags into our environment (as absolute paths), so this
/// process and the procs it starts use them; then check the configuration.
fn setup_tls(args: &Args) -> Result<bool, String> {
    use monarch_core::tls::{ENV_TLS_CA, ENV_TLS_CERT, ENV_TLS_KEY};
    if let [Some(cert), Some(key), Some(ca)] = &args.tls {
        for (var, path) in [(ENV_TLS_CERT, cert), (ENV_TLS_KEY, key), (ENV_TLS_CA, ca)] {
            let abs = std::path::absolute(path).map_err(|e| format!("{path}: {e}"))?;
            // Before any thread of ours starts (single-threaded here).
            std::env::set_var(var, abs);
        }
    }
    monarch_core::tls::global()
        .map(|c| c.is_some())
        .map_err(|e| e.to_string())
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

struct Proc {
    child: Arc<Child>,
    controller: String,
    /// Its controller's report queue.
    reports: Reports,
}

struct Agent {
    rt: Runtime,
    /// The IP we bind procs' sockets on, and the one we advertise.
    bind_ip: IpAddr,
    advertise: IpAddr,
    /// Sockets bound by `prepare`, waiting for `start` (dropped when
    /// unused for `PREPARED_TTL`).
    prepared: Mutex<HashMap<String, (TcpListener, Instant)>>,
    procs: Arc<Mutex<HashMap<String, Proc>>>,
    /// When the procs' heartbeats were last checked.
    heartbeats_checked: Mutex<Instant>,
    /// Where our procs also listen on Unix sockets (0700; removed on exit).
    socket_dir: Option<SocketDir>,
    /// Each controller's queue of reports (output, exits, hung procs).
    reports: ReportQueues,
}

/// The job secret from --secret-file or the environment, refused when
/// weak (`monarch_core::secret::check`).
fn secret(args: &Args) -> Result<String, String> {
    let (s, source) = if let Some(path) = &args.secret_file {
        let s = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read secret file {path}: {e}"))?;
        let s = s.trim().to_string();
        if s.is_empty() {
            return Err(format!("secret file {path} is empty"));
        }
        (s, format!("secret file {path}"))
    } else {
        match std::env::var(ENV_JOB_TOKEN) {
            Ok(s) if !s.is_empty() => (s, ENV_JOB_TOKEN.to_string()),
            _ => {
                return Err(format!(
                    "no job secret: set {ENV_JOB_TOKEN} or pass --secret-file PATH \
                     (`monarch secret` prints a fresh one)"
                ))
            }
        }
    };
    monarch_core::secret::check(&s, &source).map_err(|e| e.message)?;
    Ok(s)
}

pub fn run(args: &Args) -> ExitCode {
    let secret = match secret(args) {
        Ok(s) => s,
        Err(msg) => {
            eprintln!("monarch host: {msg}");
            return ExitCode::from(2);
        }
    };
    let tls = match setup_tls(args) {
        Ok(on) => on,
        Err(msg) => {
            eprintln!("monarch host: {msg}");
            return ExitCode::from(2);
        }
    };
    let listen = args.listen.strip_prefix("tcp:").unwrap_or(&args.listen);
    let sa: std::net::SocketAddr = match listen.parse() {
        Ok(sa) => sa,
        Err(_) => {
            eprintln!(
                "monarch host: --listen wants IP:PORT, got '{}'",
                args.listen
            );
            return ExitCode::from(2);
        }
    };
    let advertise = args.advertise.unwrap_or_else(|| {
        if sa.ip().is_unspecified() {
            monarch_core::transport::default_host_ip()
        } else {
            sa.ip()
        }
    });
    // SAFETY: installing an async-signal-safe handler (one atomic store).
    unsafe {
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
    }
    let rt = match Runtime::listen_tcp(&format!("tcp:{sa}"), advertise, secret) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("monarch host: {e}");
            return ExitCode::from(1);
        }
    };
    rt.serve_builtin(AGENT_ACTOR);
    let hostport = rt
        .addr()
        .strip_prefix("tcp:")
        .unwrap_or(rt.addr())
        .to_string();
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "MONARCH_HOST_READY {hostport}");
        let _ = out.flush();
    }
    tracing::info!(addr = %rt.addr(), tls, "host agent listening");
    let agent = Agent {
        rt: rt.clone(),
        bind_ip: sa.ip(),
        advertise,
        prepared: Mutex::new(HashMap::new()),
        procs: Arc::new(Mutex::new(HashMap::new())),
        heartbeats_checked: Mutex::new(Instant::now()),
        reports: ReportQueues::new(rt.clone()),
        socket_dir: monarch_core::random::hex128()
            .map_err(|e| monarch_core::Error::io("no random bytes from the kernel", e))
            .and_then(|name| SocketDir::create(&name[..8]))
            .map_err(|e| tracing::warn!(error = %e, "no socket directory; procs of this host talk over TCP"))
            .ok(),
    };
    while !STOP.load(Ordering::SeqCst) {
        match rt.next_event(Some(Duration::from_millis(200))) {
            Ok(ev) => agent.handle(ev),
            Err(e) if e.kind == ErrorKind::Timeout => {}
            Err(e) => {
                tracing::warn!(error = %e, "agent event loop ends");
                break;
            }
        }
        agent.reap_orphaned();
        agent.check_heartbeats();
    }
    agent.kill_all();
    rt.shutdown();
    ExitCode::SUCCESS
}

fn text(parts: &[Vec<u8>], i: usize) -> String {
    parts
        .get(i)
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .unwrap_or_default()
}

impl Agent {
    fn handle(&self, mut ev: Event) {
        if ev.kind != EventKind::Message {
            if ev.kind == EventKind::StopProc {
                STOP.store(true, Ordering::SeqCst);
            }
            if ev.wants_reply() {
                let _ = ev.reply(Err(("a host agent hosts no actors", &[])));
            }
            return;
        }
        let result = match ev.method.as_str() {
            INFO => Ok(vec![hostname().into_bytes()]),
            PREPARE => self.prepare(&ev.parts),
            START => match ev.sender().map(str::to_string) {
                Some(controller) => self.start(&ev.parts, controller),
                None => Err("start needs a reply port".to_string()),
            },
            KILL => {
                self.kill(&ev.parts);
                Ok(Vec::new())
            }
            other => Err(format!("unknown host agent request '{other}'")),
        };
        if ev.wants_reply() {
            let r = match &result {
                Ok(parts) => {
                    let refs: Vec<&[u8]> = parts.iter().map(|p| p.as_slice()).collect();
                    ev.reply(Ok(&refs))
                }
                Err(msg) => ev.reply(Err((msg, &[]))),
            };
            if let Err(e) = r {
                tracing::warn!(error = %e, "cannot answer the controller");
            }
        }
    }

    fn prepare(&self, parts: &[Vec<u8>]) -> Result<Vec<Vec<u8>>, String> {
        let n: usize = text(parts, 0)
            .parse()
            .map_err(|_| "prepare: bad count".to_string())?;
        if n == 0 || n > 4096 {
            return Err(format!("prepare: {n} procs is out of range"));
        }
        let mut out = Vec::with_capacity(n);
        let mut prepared = self.prepared.lock();
        for _ in 0..n {
            let l = TcpListener::bind((self.bind_ip, 0))
                .map_err(|e| format!("cannot listen for a proc: {e}"))?;
            let port = l.local_addr().map_err(|e| e.to_string())?.port();
            let addr = match self.advertise {
                IpAddr::V6(v6) => format!("tcp:[{v6}]:{port}"),
                v4 => format!("tcp:{v4}:{port}"),
            };
            prepared.insert(addr.clone(), (l, Instant::now()));
            out.push(addr.into_bytes());
        }
        Ok(out)
    }

    fn start(&self, parts: &[Vec<u8>], controller: String) -> Result<Vec<Vec<u8>>, String> {
        let controller_tcp = text(parts, 0);
        let base: u64 = text(parts, 1)
            .parse()
            .map_err(|_| "start: bad base rank".to_string())?;
        let argv: Vec<String> = text(parts, 2).split('\0').map(str::to_string).collect();
        let env_s = text(parts, 3);
        let env: Vec<(String, String)> = env_s
            .split('\0')
            .filter(|kv| !kv.is_empty())
            .filter_map(|kv| {
                kv.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
            })
            .collect();
        let addrs: Vec<String> = text(parts, 4).lines().map(str::to_string).collect();
        if argv.first().is_none_or(|a| a.is_empty()) {
            return Err("start: empty bootstrap command".into());
        }
        let token = std::env::var(ENV_JOB_TOKEN).ok();
        // One queue for the controller's reports, whatever the number of procs.
        let reports = self
            .reports
            .of(&controller)
            .map_err(|e| format!("cannot start a report queue: {e}"))?;
        for (i, addr) in addrs.iter().enumerate() {
            let listener = self
                .prepared
                .lock()
                .remove(addr)
                .map(|(l, _)| l)
                .ok_or_else(|| format!("start: {addr} was not prepared here"))?;
            let rank = base + i as u64;
            let fd = listener.as_raw_fd();
            let own: Vec<(String, String)> = vec![
                (ENV_CONTROLLER.into(), controller_tcp.clone()),
                (ENV_PROC_ADDR.into(), addr.clone()),
                (ENV_PROC_RANK.into(), rank.to_string()),
                (ENV_LISTEN_FD.into(), fd.to_string()),
                (ENV_AGENT.into(), self.rt.addr().to_string()),
            ];
            let mut child_env = env.clone();
            child_env.extend(own);
            if let Some(d) = &self.socket_dir {
                child_env.push((
                    monarch_core::transport::ENV_HOST_SOCKET_DIR.into(),
                    d.path.display().to_string(),
                ));
            }
            if token.is_none() {
                // The secret came from a file: hand it on the same way
                // procs read it (their environment).
                child_env.push((ENV_JOB_TOKEN.into(), self.secret_for_child()));
            }
            let exit_reports = reports.clone();
            let procs = self.procs.clone();
            let spawned = spawn_child_with(
                &argv,
                child_env,
                addr.clone(),
                Completion::new(None),
                SpawnOpts {
                    capture_output: true,
                    keep_fd: Some(fd),
                },
                move |child, exit| {
                    procs.lock().remove(&child.addr);
                    let how = exit.to_string();
                    let (kind, n) = match exit {
                        ExitInfo::Code(c) => (EXIT_CODE, c),
                        ExitInfo::Signal(s) => (EXIT_SIGNAL, s),
                    };
                    // Queued: the reaper never waits for a controller.
                    exit_reports.send_now(Report::Event {
                        method: EXIT,
                        parts: vec![
                            child.addr.clone().into_bytes(),
                            how.into_bytes(),
                            kind.as_bytes().to_vec(),
                            n.to_string().into_bytes(),
                        ],
                    });
                },
            );
            drop(listener); // the child has its own copy
            let (child, output) = spawned.map_err(|e| format!("cannot start {argv:?}: {e}"))?;
            if let Some((out, err)) = output {
                forward(out.into(), reports.clone(), addr, rank, LOG_STDOUT);
                forward(err.into(), reports.clone(), addr, rank, LOG_STDERR);
            }
            self.procs.lock().insert(
                addr.clone(),
                Proc {
                    child,
                    controller: controller.clone(),
                    reports: reports.clone(),
                },
            );
        }
        Ok(Vec::new())
    }

    fn secret_for_child(&self) -> String {
        // Only reached when the agent read its secret from a file; the
        // runtime holds it.
        self.rt.job_token().to_string()
    }

    fn kill(&self, parts: &[Vec<u8>]) {
        let procs = self.procs.lock();
        for p in parts {
            let addr = String::from_utf8_lossy(p);
            if let Some(pr) = procs.get(addr.as_ref()) {
                pr.child.kill();
            }
        }
    }

    /// Kill the procs of controllers that are no longer connected.
    fn reap_orphaned(&self) {
        self.prepared
            .lock()
            .retain(|_, (_, at)| at.elapsed() < PREPARED_TTL);
        let procs = self.procs.lock();
        for (addr, p) in procs.iter() {
            if !self.rt.is_connected(&p.controller) {
                tracing::warn!(%addr, controller = %p.controller, "controller lost; killing its proc");
                p.child.kill();
            }
        }
    }

    /// Every heartbeat interval: probe our procs, report those that
    /// stopped answering to their controller (which fails them, then asks
    /// us to kill them).
    fn check_heartbeats(&self) {
        let Some((timeout, every)) = Runtime::heartbeat_timing() else {
            return;
        };
        {
            let mut at = self.heartbeats_checked.lock();
            if at.elapsed() < every {
                return;
            }
            *at = Instant::now();
        }
        let addrs: Vec<String> = self.procs.lock().keys().cloned().collect();
        let hung = self.rt.check_heartbeats(&addrs);
        if hung.is_empty() {
            return;
        }
        let how = format!("stopped answering heartbeats for {timeout:?} (hung)");
        let procs = self.procs.lock();
        for addr in hung {
            if let Some(p) = procs.get(&addr) {
                tracing::warn!(%addr, "proc stopped answering heartbeats; reporting it");
                p.reports.send_now(Report::Event {
                    method: HUNG,
                    parts: vec![addr.into_bytes(), how.clone().into_bytes()],
                });
            }
        }
    }

    fn kill_all(&self) {
        let children: Vec<Arc<Child>> = self
            .procs
            .lock()
            .values()
            .map(|p| p.child.clone())
            .collect();
        for c in &children {
            // SAFETY: plain syscall on a pid we spawned (not yet reaped:
            // the reaper removes it from the map first).
            if !c.exit.is_ready() {
                unsafe { libc::kill(c.pid as libc::pid_t, libc::SIGTERM) };
            }
        }
        for c in &children {
            if !c.exit.wait(Some(Duration::from_secs(3))) {
                c.kill();
                c.exit.wait(Some(Duration::from_secs(5)));
            }
        }
    }
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) };
    if r != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}
