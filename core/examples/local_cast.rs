//! Broadcast+gather vs mesh size on in-process procs
//! (`monarch_core::local`): N = 16 ... 4096 Rust-native actors, 2 worker
//! threads, multicast tree with fan-out 16.
//!
//! cargo run --release -p monarch-core --example local_cast [-- --quick] [--flat] [--json]
//!
//! Columns: median and p90 latency of one cast+gather; the sender's CPU
//! time per cast spent issuing it (`cast()`: indexing the view, finding its
//! first hops, posting to them; thread CPU time, so other load on the
//! machine does not count); the CPU time per cast spent taking in the reply
//! batches that reach the sender and filling the N results (on whichever
//! worker thread delivers them); reply batches and messages per cast at
//! the sender; and the issue and gather CPU as a multiple of N = 16's.
//! `--profile N ITERS` only casts (for callgrind; see
//! benches/native_cast.py --callgrind).
//! `--flat` adds the same cast with fan-out N (the sender posts to every
//! proc and every reply comes straight back); `--json` prints one JSON
//! object per row instead of the table (for benches/native_cast.py).

use std::sync::Arc;
use std::time::{Duration, Instant};

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
    n: usize,
    fanout: usize,
    median: Duration,
    p90: Duration,
    /// Per cast: the sender's CPU time issuing it (median).
    issue: Duration,
    /// Per cast: CPU time taking in the replies at the sender (mean).
    gather: Duration,
    batches: f64,
    sends: f64,
}

fn measure(n: usize, fanout: usize, iters: usize) -> Row {
    let c = LocalCluster::new(n, 2, fanout);
    c.spawn("echo", |_| Box::new(Echo)).unwrap();
    let shape = Shape::new(&[("ranks", n)]).unwrap();
    let mut issue = Vec::with_capacity(iters);
    let once = |i: u64, issue: &mut Vec<Duration>| {
        let t0 = thread_cpu();
        let f = c
            .cast("echo", "ping", vec![i.to_le_bytes().to_vec()], &shape, true)
            .unwrap()
            .unwrap();
        issue.push(thread_cpu() - t0);
        assert!(f.wait(Some(Duration::from_secs(60))));
        let vm = f.take().unwrap().unwrap();
        assert_eq!(vm.values.len(), n);
        assert!(!vm.values[n - 1].is_err());
    };
    for i in 0..(iters / 10).max(3) {
        once(i as u64, &mut issue);
    }
    issue.clear();
    let before = c.stats();
    let mut lat = Vec::with_capacity(iters);
    for i in 0..iters {
        let t = Instant::now();
        once(i as u64, &mut issue);
        lat.push(t.elapsed());
    }
    let after = c.stats();
    lat.sort();
    issue.sort();
    Row {
        n,
        fanout,
        median: lat[lat.len() / 2],
        p90: lat[lat.len() * 9 / 10],
        issue: issue[issue.len() / 2],
        gather: Duration::from_nanos((after.gather_cpu_ns - before.gather_cpu_ns) / iters as u64),
        batches: (after.root_batches - before.root_batches) as f64 / iters as f64,
        sends: (after.root_sends - before.root_sends) as f64 / iters as f64,
    }
}

/// Median latency of a cast whose u64 replies are summed inside the tree.
fn measure_reduce(n: usize, iters: usize) -> Duration {
    let c = LocalCluster::new(n, 2, 16);
    c.spawn("echo", |_| Box::new(Echo)).unwrap();
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

/// `iters` cast+gathers to `n` points (after one to warm up), and no
/// other work: run under callgrind to count the instructions of
/// `LocalCluster::cast` (issue) and `Collector::add_at_sender` (gather).
fn profile(n: usize, iters: usize) {
    let c = LocalCluster::new(n, 2, 16);
    c.spawn("echo", |_| Box::new(Echo)).unwrap();
    let shape = Shape::new(&[("ranks", n)]).unwrap();
    for i in 0..=iters {
        let f = c
            .cast("echo", "ping", vec![i.to_le_bytes().to_vec()], &shape, true)
            .unwrap()
            .unwrap();
        assert!(f.wait(Some(Duration::from_secs(600))));
        assert_eq!(f.take().unwrap().unwrap().values.len(), n);
    }
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let flat = args.iter().any(|a| a == "--flat");
    let json = args.iter().any(|a| a == "--json");
    if let Some(i) = args.iter().position(|a| a == "--profile") {
        // For an instruction count (benches/native_cast.py --callgrind):
        // just N-point casts, nothing else.
        let n: usize = args[i + 1].parse().expect("--profile N ITERS");
        let iters: usize = args[i + 2].parse().expect("--profile N ITERS");
        profile(n, iters);
        return;
    }
    let sizes: &[usize] = if quick {
        &[16, 256, 4096]
    } else {
        &[16, 64, 256, 1024, 4096]
    };
    if !json {
        println!("in-process procs: cast+gather to N Rust actors, 2 worker threads (times in us)");
        println!(
            "{:>6} {:>7} | {:>8} {:>8} | {:>9} {:>10} | {:>7} {:>5} | {:>11} {:>12}",
            "N",
            "fan-out",
            "median",
            "p90",
            "issue cpu",
            "gather cpu",
            "batches",
            "sends",
            "issue x N16",
            "gather x N16"
        );
    }
    let mut base: Option<(f64, f64)> = None;
    for &n in sizes {
        let iters = if quick {
            20
        } else {
            (200_000 / n).clamp(100, 2000)
        };
        let mut rows = vec![measure(n, 16, iters)];
        if flat {
            rows.push(measure(n, n.max(2), iters));
        }
        for r in rows {
            let (i0, g0) = *base.get_or_insert((us(r.issue), us(r.gather)));
            let (ix, gx) = (us(r.issue) / i0, us(r.gather) / g0);
            if json {
                println!(
                    "{{\"n\": {}, \"fanout\": {}, \"median_us\": {:.1}, \"p90_us\": {:.1}, \
                     \"issue_cpu_us\": {:.2}, \"gather_cpu_us\": {:.2}, \"batches\": {:.1}, \
                     \"sends\": {:.1}}}",
                    r.n,
                    r.fanout,
                    us(r.median),
                    us(r.p90),
                    us(r.issue),
                    us(r.gather),
                    r.batches,
                    r.sends
                );
            } else {
                println!(
                    "{:>6} {:>7} | {:>8.0} {:>8.0} | {:>9.1} {:>10.1} | {:>7.1} {:>5.0} | {:>11.1} {:>12.1}",
                    r.n,
                    r.fanout,
                    us(r.median),
                    us(r.p90),
                    us(r.issue),
                    us(r.gather),
                    r.batches,
                    r.sends,
                    ix,
                    gx
                );
            }
        }
    }
    let n = *sizes.last().unwrap();
    let iters = if quick { 20 } else { 200 };
    let red = us(measure_reduce(n, iters));
    if json {
        println!("{{\"reduce_n\": {n}, \"reduce_median_us\": {red:.1}}}");
    } else {
        println!("sum of {n} replies reduced inside the tree (fan-out 16): median {red:.0} us");
    }
}
