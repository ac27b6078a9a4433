//! Core-level ping benchmark (no foreign binding in the path): the same
//! binary is the controller and, re-executed, the worker hosting an echo
//! actor. Prints median/p99 round trip and pipelined throughput.
//!
//! cargo run --release -p monarch-core --example ping [-- N]

use std::time::{Duration, Instant};

use monarch_core::{CallMode, EventKind, MeshView, ProcMesh, Runtime, Shape};

fn worker() {
    let rt = Runtime::new().expect("runtime");
    loop {
        let mut ev = match rt.next_event(None) {
            Ok(ev) => ev,
            Err(_) => break,
        };
        match ev.kind {
            EventKind::StopProc => break,
            _ => {
                let parts: Vec<Vec<u8>> = ev.parts.clone();
                let refs: Vec<&[u8]> = parts.iter().map(|p| p.as_slice()).collect();
                let _ = ev.reply(Ok(&refs));
            }
        }
    }
    rt.shutdown();
}

fn main() {
    if std::env::var_os(monarch_core::runtime::ENV_CONTROLLER).is_some() {
        return worker();
    }
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20000);
    let rt = Runtime::new().expect("runtime");
    let exe = std::env::current_exe().unwrap().display().to_string();
    let pm = ProcMesh::spawn(&rt, Shape::new(&[("gpus", 1)]).unwrap(), &[exe], &[]).unwrap();
    let (am, ready) = pm.spawn_actors("echo", "echo", &[]).unwrap();
    assert!(ready.wait(Some(Duration::from_secs(30))));
    let one = am.at("gpus", 0).unwrap();
    let msg = [0u8; 16];
    let mut lat = Vec::with_capacity(n);
    for i in 0..n + 1000 {
        let t = Instant::now();
        let f = one.call("echo", &[&msg], CallMode::One).unwrap().unwrap();
        f.wait(None);
        if i >= 1000 {
            lat.push(t.elapsed());
        }
    }
    lat.sort();
    let t = Instant::now();
    let futs: Vec<_> = (0..n)
        .map(|_| one.call("echo", &[&msg], CallMode::One).unwrap().unwrap())
        .collect();
    for f in &futs {
        f.wait(None);
    }
    let tput = n as f64 / t.elapsed().as_secs_f64();
    println!(
        "rust ping median {:?} p99 {:?}; pipelined {:.0}/s",
        lat[n / 2],
        lat[n * 99 / 100],
        tput
    );
    pm.stop().wait(Some(Duration::from_secs(10)));
    rt.shutdown();
}
