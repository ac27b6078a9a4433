//! Broadcast+gather latency vs mesh size on in-process procs
//! (`monarch_core::local`): N = 16 ... 4096 Rust-native actors, 2 worker
//! threads, the multicast tree (fan-out 16) against a flat cast where the
//! sender posts to every proc itself (fan-out >= N).
//!
//! cargo run --release -p monarch-core --example local_cast [-- --quick]
//!
//! Columns: median and p90 latency of one cast+gather; the sender's CPU
//! time per cast spent issuing it (routing and posting to its first hops;
//! not its waiting, and replies are collected by the procs up the tree);
//! messages the sender posts per cast.

use std::time::{Duration, Instant};

use std::sync::Arc;

use monarch_core::local::{Combine, LocalActor, LocalCluster};
use monarch_core::Shape;

struct Echo;

impl LocalActor for Echo {
    fn handle(
        &mut self,
        _method: &str,
        parts: &[Vec<u8>],
        point: u64,
    ) -> Result<Vec<Vec<u8>>, String> {
        let mut v = point.to_le_bytes().to_vec();
        if let Some(p) = parts.first() {
            v.extend_from_slice(&p[..p.len().min(8)]);
        }
        Ok(vec![v])
    }
}

fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

struct Row {
    median: Duration,
    p90: Duration,
    cpu: Duration,
    sends: f64,
}

fn measure(n: usize, fanout: usize, iters: usize) -> Row {
    let c = LocalCluster::new(n, 2, fanout);
    c.spawn("echo", |_| Box::new(Echo));
    let shape = Shape::new(&[("ranks", n)]).unwrap();
    let issue = std::cell::Cell::new(Duration::ZERO);
    let once = |i: u64| {
        let t0 = thread_cpu();
        let f = c
            .cast("echo", "ping", vec![i.to_le_bytes().to_vec()], &shape, true)
            .unwrap()
            .unwrap();
        issue.set(issue.get() + (thread_cpu() - t0));
        assert!(f.wait(Some(Duration::from_secs(60))));
        let vm = f.take().unwrap().unwrap();
        assert_eq!(vm.values.len(), n);
        assert!(!vm.values[n - 1].is_err());
    };
    for i in 0..(iters / 10).max(3) {
        once(i as u64);
    }
    let before = c.stats();
    let mut lat = Vec::with_capacity(iters);
    issue.set(Duration::ZERO);
    for i in 0..iters {
        let t = Instant::now();
        once(i as u64);
        lat.push(t.elapsed());
    }
    let cpu = issue.get();
    let after = c.stats();
    lat.sort();
    Row {
        median: lat[lat.len() / 2],
        p90: lat[lat.len() * 9 / 10],
        cpu: cpu / iters as u32,
        sends: (after.root_sends - before.root_sends) as f64 / iters as f64,
    }
}

/// Median latency of a cast whose u64 replies are summed inside the tree.
fn measure_reduce(n: usize, iters: usize) -> Duration {
    let c = LocalCluster::new(n, 2, 16);
    c.spawn("echo", |_| Box::new(Echo));
    let shape = Shape::new(&[("ranks", n)]).unwrap();
    let sum: Combine = Arc::new(|a: &[u8], b: &[u8]| {
        let x = u64::from_le_bytes(a[..8].try_into().unwrap());
        let y = u64::from_le_bytes(b[..8].try_into().unwrap());
        (x + y).to_le_bytes().to_vec()
    });
    let mut lat = Vec::with_capacity(iters);
    for i in 0..iters + 3 {
        let t = Instant::now();
        let f = c
            .cast_reduce("echo", "ping", vec![], &shape, vec![0; 8], sum.clone())
            .unwrap();
        assert!(f.wait(Some(Duration::from_secs(60))));
        let vm = f.take().unwrap().unwrap();
        let total = u64::from_le_bytes(vm.values[0].parts()[0][..8].try_into().unwrap());
        assert_eq!(total, (n as u64 - 1) * n as u64 / 2);
        if i >= 3 {
            lat.push(t.elapsed());
        }
    }
    lat.sort();
    lat[lat.len() / 2]
}

fn us(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1e6)
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    println!("in-process procs: cast+gather to N Rust actors, 2 worker threads");
    println!(
        "{:>6} | {:>10} {:>10} {:>12} {:>7} | {:>10} {:>10} {:>12} {:>7}",
        "N",
        "tree med",
        "tree p90",
        "issue cpu",
        "sends",
        "flat med",
        "flat p90",
        "issue cpu",
        "sends"
    );
    println!(
        "{:>6} | {:^43} | {:^43}",
        "", "fan-out 16 (us)", "fan-out N (us)"
    );
    let sizes: &[usize] = if quick {
        &[16, 256, 4096]
    } else {
        &[16, 64, 256, 1024, 4096]
    };
    for &n in sizes {
        let iters = if quick {
            20
        } else {
            (200_000 / n).clamp(30, 2000)
        };
        let t = measure(n, 16, iters);
        let f = measure(n, n.max(2), iters);
        println!(
            "{:>6} | {:>10} {:>10} {:>12} {:>7.0} | {:>10} {:>10} {:>12} {:>7.0}",
            n,
            us(t.median),
            us(t.p90),
            us(t.cpu),
            t.sends,
            us(f.median),
            us(f.p90),
            us(f.cpu),
            f.sends
        );
    }
    let n = *sizes.last().unwrap();
    let iters = if quick { 20 } else { 200 };
    println!(
        "sum of {n} replies reduced inside the tree (fan-out 16): median {} us",
        us(measure_reduce(n, iters))
    );
}
