//! What `monarch top` asks of a controller (snapshots, stopping a mesh)
//! and of the procs it shows (their last error, their stacks).

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use monarch_core::introspect::Introspection;
use monarch_core::Runtime;

use crate::top_rows::{self, Item};

/// How long one request to the controller may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// What the UI asks of the controller.
pub struct Session {
    rt: Runtime,
    pub addr: String,
}

impl Session {
    pub fn new(rt: Runtime, addr: String) -> Session {
        Session { rt, addr }
    }

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
