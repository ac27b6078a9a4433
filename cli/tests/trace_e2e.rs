//! `MONARCH_TRACE` end to end: a controller (this test process) and three
//! real `monarch worker` procs write their spans; the controller's
//! shutdown merges them into one Chrome trace file, which must parse as
//! Chrome trace JSON and hold the runtime's spans (spawn, send, deliver,
//! handle, reply) with their fields, nested as they ran. The merge by hand
//! (`monarch trace merge`) gives the same events.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use monarch_core::{CallMode, ProcMesh, Runtime, Shape};
use serde_json::Value;

mod common;
use common::{call, wait, worker_argv};

const PROCS: usize = 3;

/// Upper bound for any single wait; only there to turn a hang into a failure.
const HANG: std::time::Duration = std::time::Duration::from_secs(60);

fn events(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("trace file");
    let doc: Value = serde_json::from_str(&text).expect("the trace is JSON");
    doc["traceEvents"]
        .as_array()
        .expect("traceEvents is an array")
        .clone()
}

fn arg_u64(e: &Value, name: &str) -> u64 {
    e["args"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("{name} missing in {e}"))
}

/// The complete (`X`) spans of `name`.
fn spans<'a>(evs: &'a [Value], name: &str) -> Vec<&'a Value> {
    evs.iter()
        .filter(|e| e["ph"] == "X" && e["name"] == name)
        .collect()
}

#[test]
fn a_traced_run_gives_one_chrome_trace_of_every_proc() {
    let dir = std::env::temp_dir().join(format!("monarch-trace-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let trace: PathBuf = dir.join("run.json");
    // SAFETY: set before any thread of this test binary (one test) starts.
    unsafe { std::env::set_var("MONARCH_TRACE", &trace) };
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
    for _ in 0..2 {
        let vm = call(&am, "echo", &[b"hi"]);
        assert_eq!(vm.values.len(), PROCS);
    }
    let fut = am.call("rank", &[], CallMode::One);
    assert!(fut.is_err(), "call_one on 3 points is refused");
    assert!(pm.stop().wait(Some(HANG)), "procs did not stop");
    rt.shutdown();

    let evs = events(&trace);
    // One process per proc, named.
    let names: HashMap<u64, String> = evs
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "process_name")
        .map(|e| {
            (
                e["pid"].as_u64().unwrap(),
                e["args"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let me = std::process::id() as u64;
    assert!(names[&me].starts_with("controller"), "{names:?}");
    for r in 0..PROCS {
        assert!(
            names
                .values()
                .any(|n| n.starts_with(&format!("proc rank {r} "))),
            "rank {r} missing from {names:?}"
        );
    }
    assert_eq!(names.len(), PROCS + 1, "{names:?}");

    // Every event has the fields Chrome needs.
    for e in &evs {
        assert!(
            e["ph"].is_string() && e["pid"].is_u64() && e["tid"].is_u64(),
            "{e}"
        );
        if e["ph"] != "M" {
            assert!(e["ts"].is_f64() || e["ts"].is_u64(), "{e}");
        }
    }

    // spawn: one async span per proc, from its start to Ready, ready=true.
    let spawn_b: Vec<&Value> = evs
        .iter()
        .filter(|e| e["name"] == "spawn" && e["ph"] == "b")
        .collect();
    let spawn_e: Vec<&Value> = evs
        .iter()
        .filter(|e| e["name"] == "spawn" && e["ph"] == "e")
        .collect();
    assert_eq!(spawn_b.len(), PROCS);
    assert_eq!(spawn_e.len(), PROCS);
    let ranks: HashSet<u64> = spawn_b.iter().map(|e| arg_u64(e, "rank")).collect();
    assert_eq!(ranks, (0..PROCS as u64).collect());
    assert!(spawn_e.iter().all(|e| e["args"]["ready"] == true));

    // call ⊃ send on the controller's thread: every send of a call is its
    // child and lies within it.
    let inside = |child: &Value, parent: &Value| {
        let (cs, cd) = (
            child["ts"].as_f64().unwrap(),
            child["dur"].as_f64().unwrap(),
        );
        let (ps, pd) = (
            parent["ts"].as_f64().unwrap(),
            parent["dur"].as_f64().unwrap(),
        );
        child["pid"] == parent["pid"]
            && child["tid"] == parent["tid"]
            && cs >= ps
            && cs + cd <= ps + pd + 0.001
    };
    let calls = spans(&evs, "call");
    assert_eq!(
        calls
            .iter()
            .filter(|c| c["args"]["method"] == "echo")
            .count(),
        2
    );
    let mut call_msgs = HashSet::new();
    for c in calls.iter().filter(|c| c["args"]["method"] == "echo") {
        assert_eq!(c["pid"].as_u64(), Some(me));
        let seq = arg_u64(c, "span");
        let sends: Vec<&Value> = spans(&evs, "send")
            .into_iter()
            .filter(|s| s["pid"].as_u64() == Some(me) && arg_u64(s, "parent") == seq)
            .collect();
        assert!(!sends.is_empty(), "no send inside {c}");
        for s in sends {
            assert!(inside(s, c), "send {s} is not inside call {c}");
            assert_eq!(
                s["args"]["actor"].as_str().unwrap().split('.').next(),
                Some("echo")
            );
            assert_eq!(s["args"]["method"], "echo");
            let msg = arg_u64(s, "msg");
            assert_ne!(msg, 0, "a call's send carries its message id");
            call_msgs.insert(msg);
        }
    }
    assert_eq!(call_msgs.len(), 2, "one message id per call");

    // Each worker: deliver of each echo call (with the call's id), a handle
    // span for it, and a reply inside handling whose parent is that handle.
    let handles: Vec<&Value> = evs
        .iter()
        .filter(|e| e["name"] == "handle" && e["ph"] == "b" && e["args"]["method"] == "echo")
        .collect();
    let ends: HashMap<&str, &Value> = evs
        .iter()
        .filter(|e| e["name"] == "handle" && e["ph"] == "e")
        .map(|e| (e["id"].as_str().unwrap(), e))
        .collect();
    assert_eq!(handles.len(), 2 * PROCS);
    let worker_pids: HashSet<u64> = handles.iter().map(|h| h["pid"].as_u64().unwrap()).collect();
    assert_eq!(worker_pids.len(), PROCS);
    for h in &handles {
        let pid = h["pid"].as_u64().unwrap();
        let msg = arg_u64(h, "msg");
        assert!(call_msgs.contains(&msg), "handle {h} is of no call");
        let rank = arg_u64(h, "rank");
        assert!(rank < PROCS as u64);
        let end = ends[h["id"].as_str().unwrap()];
        let (hs, he) = (h["ts"].as_f64().unwrap(), end["ts"].as_f64().unwrap());
        assert!(he >= hs);
        let delivered = spans(&evs, "deliver").into_iter().any(|d| {
            d["pid"].as_u64() == Some(pid)
                && arg_u64(d, "msg") == msg
                && arg_u64(d, "rank") == rank
                && d["args"]["actor"] == h["args"]["actor"]
        });
        assert!(delivered, "no deliver for {h}");
        let seq = arg_u64(h, "span");
        let reply = spans(&evs, "reply")
            .into_iter()
            .find(|r| r["pid"].as_u64() == Some(pid) && arg_u64(r, "parent") == seq)
            .unwrap_or_else(|| panic!("no reply inside {h}"));
        assert_eq!(arg_u64(reply, "msg"), msg);
        let (rs, rd) = (
            reply["ts"].as_f64().unwrap(),
            reply["dur"].as_f64().unwrap(),
        );
        assert!(
            rs >= hs && rs + rd <= he + 0.001,
            "reply {reply} outside {h}..{end}"
        );
        // The reply's own send is inside it.
        let send = spans(&evs, "send")
            .into_iter()
            .find(|s| {
                s["pid"].as_u64() == Some(pid) && arg_u64(s, "parent") == arg_u64(reply, "span")
            })
            .unwrap_or_else(|| panic!("no send inside {reply}"));
        assert!(inside(send, reply));
        assert_eq!(send["args"]["kind"], "Reply");
    }

    // The merge by hand gives the same events.
    let again = dir.join("again.json");
    let out = Command::new(env!("CARGO_BIN_EXE_monarch"))
        .args(["trace", "merge", "-o"])
        .arg(&again)
        .arg(monarch_core::trace::parts_dir(&trace))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(events(&again).len(), evs.len());
    std::fs::remove_dir_all(&dir).unwrap();
}
