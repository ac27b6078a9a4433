//! `monarch top`: a terminal view of a running controller's job (hosts ->
//! procs -> actors with their state and counters, refreshed), attached
//! with the job secret; keys show an actor's last error, dump a Python
//! proc's stacks and stop a mesh (docs/operating.md).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use monarch_core::introspect::Introspection;
use monarch_core::runtime::{ENV_CONTROLLER, ENV_JOB_TOKEN, ENV_PROC_ADDR, SECRET_FILE};
use monarch_core::Runtime;

use crate::top_rows::{self, Item};
use crate::top_ui;

/// How long one request to the controller may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

pub struct Args {
    pub controller: Option<String>,
    pub interval: Duration,
    pub once: bool,
}

pub fn parse_args(args: &[String]) -> Result<Args, String> {
    let mut a = Args {
        controller: None,
        interval: Duration::from_secs(1),
        once: false,
    };
    let mut it = args.iter();
    while let Some(x) = it.next() {
        match x.as_str() {
            "--controller" => {
                a.controller = Some(it.next().ok_or("--controller needs an ADDR")?.clone());
            }
            "--interval" => {
                let v = it.next().ok_or("--interval needs SECONDS")?;
                let s: f64 = v
                    .parse()
                    .ok()
                    .filter(|s: &f64| s.is_finite() && *s >= 0.1 && *s <= 3600.0)
                    .ok_or(format!("--interval '{v}': give seconds from 0.1 to 3600"))?;
                a.interval = Duration::from_secs_f64(s);
            }
            "--once" => a.once = true,
            other => return Err(format!("unexpected argument '{other}'")),
        }
    }
    Ok(a)
}

/// The socket-directory roots a controller of this user may be under.
fn socket_roots() -> Vec<PathBuf> {
    let base = std::env::var_os("MONARCH_SOCKET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    let prefix = format!("monarch-{uid}");
    let Ok(entries) = std::fs::read_dir(&base) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect()
}

/// The live controllers of this user on this host (their socket paths),
/// other than this process.
fn find_controllers() -> Vec<PathBuf> {
    let me = std::process::id();
    let mut found = Vec::new();
    for root in socket_roots() {
        let Ok(entries) = std::fs::read_dir(&root) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(pid) = name.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
                continue;
            };
            let sock = e.path().join("controller.sock");
            if pid == me || !sock.exists() || !e.path().join(SECRET_FILE).exists() {
                continue;
            }
            if Path::new(&format!("/proc/{pid}")).exists() {
                found.push(sock);
            }
        }
    }
    found.sort();
    found
}

/// The controller to attach to and its job secret.
fn target(args: &Args) -> Result<(String, String), String> {
    let addr = match &args.controller {
        Some(a) => a.clone(),
        None => {
            let found = find_controllers();
            match found.as_slice() {
                [one] => format!("unix:{}", one.display()),
                [] => return Err("no running controller found; pass --controller ADDR".into()),
                many => {
                    let list: Vec<String> = many
                        .iter()
                        .map(|p| format!("  unix:{}", p.display()))
                        .collect();
                    return Err(format!(
                        "several controllers are running; pass --controller with one of:\n{}",
                        list.join("\n")
                    ));
                }
            }
        }
    };
    if let Ok(t) = std::env::var(ENV_JOB_TOKEN) {
        if !t.is_empty() {
            return Ok((addr, t));
        }
    }
    let sock = addr.strip_prefix("unix:").ok_or(format!(
        "{ENV_JOB_TOKEN} is not set (needed to attach to {addr})"
    ))?;
    let file = Path::new(sock).with_file_name(SECRET_FILE);
    let secret = std::fs::read_to_string(&file)
        .map_err(|e| format!("cannot read the job secret at {}: {e}", file.display()))?;
    Ok((addr, secret.trim().to_string()))
}

/// A runtime of our own, authenticating with `secret`.
fn attach(secret: &str) -> Result<Runtime, String> {
    // Single-threaded here: no other thread reads the environment yet.
    std::env::remove_var(ENV_CONTROLLER);
    std::env::remove_var(ENV_PROC_ADDR);
    std::env::set_var(ENV_JOB_TOKEN, secret);
    Runtime::new().map_err(|e| format!("cannot start a runtime: {e}"))
}

pub fn run(args: &Args) -> ExitCode {
    let (addr, secret) = match target(args) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("monarch top: {e}");
            return ExitCode::from(1);
        }
    };
    let rt = match attach(&secret) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("monarch top: {e}");
            return ExitCode::from(1);
        }
    };
    let code = if args.once {
        match rt.introspect_remote(&addr, REQUEST_TIMEOUT) {
            Ok(snap) => {
                print!("{}", top_rows::text(&snap));
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("monarch top: {addr}: {e}");
                ExitCode::from(1)
            }
        }
    } else {
        let session = Session {
            rt: rt.clone(),
            addr,
        };
        match top_ui::run(&session, args.interval) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("monarch top: {e}");
                ExitCode::from(1)
            }
        }
    };
    rt.shutdown();
    code
}

/// What the UI asks of the controller.
pub struct Session {
    rt: Runtime,
    pub addr: String,
}

impl Session {
    /// Snapshots every `interval` (and at once when poked) on a thread of
    /// its own, until the receiver is dropped.
    pub fn snapshots(
        &self,
        interval: Duration,
    ) -> (
        mpsc::Receiver<Result<Introspection, String>>,
        mpsc::Sender<()>,
    ) {
        let (tx, rx) = mpsc::channel();
        let (poke_tx, poke_rx) = mpsc::channel::<()>();
        let rt = self.rt.clone();
        let addr = self.addr.clone();
        std::thread::spawn(move || loop {
            let r = rt
                .introspect_remote(&addr, REQUEST_TIMEOUT)
                .map_err(|e| e.to_string());
            if tx.send(r).is_err() {
                return;
            }
            match poke_rx.recv_timeout(interval) {
                Ok(()) | Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
        });
        (rx, poke_tx)
    }

    pub fn stop_mesh(&self, name: &str) -> Result<(), String> {
        self.rt
            .stop_mesh_remote(&self.addr, name, REQUEST_TIMEOUT)
            .map_err(|e| e.to_string())
    }
}

/// The mesh an item belongs to (an actor's actor mesh, a proc's proc mesh).
pub fn mesh_of(snap: &Introspection, item: Item) -> Option<String> {
    let name = match item {
        Item::Host => return None,
        Item::Proc(i) => snap.procs.get(i)?.mesh.clone(),
        Item::Actor(i, j) => snap.procs.get(i)?.actors.get(j)?.mesh.clone(),
    };
    (!name.is_empty()).then_some(name)
}

/// The last error of an item, in words.
pub fn error_of(snap: &Introspection, item: Item) -> String {
    match item {
        Item::Host => "select a proc or an actor".into(),
        Item::Proc(i) => match snap.procs.get(i) {
            Some(p) if !p.error.is_empty() => p.error.clone(),
            Some(p) => format!("{}: no failure", p.addr),
            None => String::new(),
        },
        Item::Actor(i, j) => match snap.procs.get(i).and_then(|p| p.actors.get(j)) {
            Some(a) if !a.counts.last_error.is_empty() => a.counts.last_error.clone(),
            Some(a) => format!("{}: no error so far", top_rows::actor_label(a)),
            None => String::new(),
        },
    }
}

/// Dump the Python stacks of the proc of `item`: with `py-spy dump` when
/// it is installed, else by SIGUSR1, on which a Python proc's bootstrap
/// has `faulthandler` write every thread's stack to `<socket>.stacks`.
pub fn dump_stacks(snap: &Introspection, item: Item) -> Result<String, String> {
    let i = match item {
        Item::Host => return Err("select a proc or an actor".into()),
        Item::Proc(i) | Item::Actor(i, _) => i,
    };
    let p = snap.procs.get(i).ok_or("no such proc")?;
    let here = monarch_core::introspect::host_name();
    if p.pid == 0 || p.host != here {
        return Err(format!(
            "{} runs on host '{}', not here ('{here}'): run monarch top there",
            p.addr, p.host
        ));
    }
    if let Ok(out) = std::process::Command::new("py-spy")
        .args(["dump", "--pid", &p.pid.to_string()])
        .output()
    {
        if out.status.success() {
            return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
        }
    }
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", p.pid)).unwrap_or_default();
    if !String::from_utf8_lossy(&cmdline).contains("monarch._bootstrap") {
        return Err(format!(
            "pid {} is not a Python worker proc (and py-spy is not installed)",
            p.pid
        ));
    }
    let sock = p.addr.strip_prefix("unix:").ok_or("not a local proc")?;
    let path = PathBuf::from(format!("{sock}.stacks"));
    let before = std::fs::metadata(&path)
        .map_err(|e| format!("{}: {e} (the proc does not dump stacks)", path.display()))?
        .len();
    // SAFETY: plain syscall; the proc registered a handler for SIGUSR1.
    if unsafe { libc::kill(p.pid as libc::pid_t, libc::SIGUSR1) } != 0 {
        return Err(format!(
            "kill {}: {}",
            p.pid,
            std::io::Error::last_os_error()
        ));
    }
    // faulthandler writes from the signal handler: wait until the file has
    // grown and stopped growing.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut last = before;
    let mut stable_since = None;
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(before);
        if len > before && len == last {
            let since = *stable_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= Duration::from_millis(200) {
                break;
            }
        } else {
            stable_since = None;
        }
        last = len;
    }
    let all = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let new = all.get(before as usize..).unwrap_or_default();
    if new.is_empty() {
        return Err(format!("pid {} wrote no stacks within 5 s", p.pid));
    }
    Ok(String::from_utf8_lossy(new).into_owned())
}
