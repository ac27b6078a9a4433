//! `monarch top`: a terminal view of a running controller's job (hosts ->
//! procs -> actors with their state and counters, refreshed), attached
//! with the job secret; keys show an actor's last error, dump a Python
//! proc's stacks and stop a mesh (docs/operating.md).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use monarch_core::runtime::{ENV_CONTROLLER, ENV_JOB_TOKEN, ENV_PROC_ADDR, SECRET_FILE};
use monarch_core::Runtime;

use crate::top_rows;
use crate::top_session::{Session, REQUEST_TIMEOUT};
use crate::top_ui;

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
        let session = Session::new(rt.clone(), addr);
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
