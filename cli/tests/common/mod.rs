//! What the end-to-end tests of `monarch` share: a controller runtime that
//! is shut down when a test ends (pass or fail), and waiting on and reading
//! the values of calls to the built-in `echo` actor of `monarch worker`.
//! Each test binary sets its own `HANG`, the bound on any single wait here
//! (only there to turn a hang into a failure).

// Each test binary uses its own part of this module.
#![allow(dead_code)]

use std::io::BufRead;
use std::time::Duration;

use super::HANG;

use monarch_core::{ActorMesh, CallMode, Future, MeshView, PointValue, Runtime, ValueMesh};

/// A file whose creation lets the proc at `gpus=rank` exit: its `exit`
/// endpoint waits for the file, so whatever is sent to the mesh before
/// [`ExitGate::open`] is queued behind the proc's death (in flight when it
/// dies, not refused up front). The file is removed when the gate drops.
pub struct ExitGate {
    path: std::path::PathBuf,
}

impl ExitGate {
    pub fn open(&self) {
        std::fs::write(&self.path, b"").unwrap();
    }
}

impl Drop for ExitGate {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Ask the proc at `gpus=rank` to exit once its gate opens; the gate (file
/// named after `tag` and this process) and the call's future.
pub fn exit_behind_gate(am: &ActorMesh, rank: usize, tag: &str) -> (ExitGate, Future) {
    let path = std::env::temp_dir().join(format!("monarch-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let exit = am
        .at("gpus", rank)
        .unwrap()
        .call("exit", &[path.to_str().unwrap().as_bytes()], CallMode::One)
        .unwrap()
        .unwrap();
    (ExitGate { path }, exit)
}

/// The command line of a worker proc.
pub fn worker_argv() -> Vec<String> {
    vec![env!("CARGO_BIN_EXE_monarch").to_string(), "worker".into()]
}

/// A controller runtime that is shut down when the test ends.
pub struct Controller {
    pub rt: Runtime,
}

impl Controller {
    pub fn new() -> Controller {
        Controller {
            rt: Runtime::new().expect("controller runtime"),
        }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.rt.shutdown();
    }
}

/// The result of `f` (within `HANG`).
pub fn wait_result(f: &Future) -> monarch_core::Result<ValueMesh> {
    assert!(
        f.wait(Some(HANG)),
        "future did not complete within {HANG:?}"
    );
    f.take().expect("result already taken")
}

/// The value mesh of `f`, which must not fail as a whole.
pub fn wait(f: &Future) -> ValueMesh {
    wait_result(f).expect("operation failed as a whole")
}

/// Call `method` on every actor of `am` and wait for the values.
pub fn call(am: &ActorMesh, method: &str, parts: &[&[u8]]) -> ValueMesh {
    let f = am
        .call(method, parts, CallMode::All)
        .expect("call")
        .expect("future");
    wait(&f)
}

/// A point holding one little-endian i64.
pub fn i64_of(v: &PointValue) -> i64 {
    match v {
        PointValue::Ok(parts) => {
            assert_eq!(parts.len(), 1, "expected one part, got {parts:?}");
            i64::from_le_bytes(parts[0].as_slice().try_into().expect("8 bytes"))
        }
        PointValue::Err { message, .. } => panic!("expected a value, got error: {message}"),
    }
}

pub fn ints(vm: &ValueMesh) -> Vec<i64> {
    vm.values.iter().map(i64_of).collect()
}

/// The message of an error point.
pub fn err_msg(v: &PointValue) -> &str {
    match v {
        PointValue::Err { message, .. } => message,
        PointValue::Ok(p) => panic!("expected an error point, got value {p:?}"),
    }
}

/// Stop a child process we started: SIGTERM, up to 10 s to exit, then
/// SIGKILL; always reaped.
pub fn terminate(child: &mut std::process::Child) {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let t = std::time::Instant::now();
    while t.elapsed() < Duration::from_secs(10) {
        if child.try_wait().unwrap().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The address a `monarch host` agent started with a piped stdout prints
/// on its ready line (`MONARCH_HOST_READY <ip>:<port>`).
pub fn ready_addr(child: &mut std::process::Child) -> String {
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    line.strip_prefix("MONARCH_HOST_READY ")
        .unwrap_or_else(|| panic!("bad ready line {line:?}"))
        .trim()
        .to_string()
}
