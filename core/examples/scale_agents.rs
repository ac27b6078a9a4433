//! Load generator and controller for `benches/scale.py`: one controller
//! against many host agents.
//!
//! `scale_agents agents N` runs N host agents in this process, each a real
//! runtime listening on TCP and serving the agent actor through the real
//! agent protocol (authentication, frames, replies); one thread answers all
//! of them, woken through their notification descriptors. It prints one
//! address per line, then `ready`, and serves until stdin closes.
//!
//! `scale_agents controller IDLE_S ROUNDS ADDR...` attaches the agents as a
//! host mesh (as a controller does), sits idle for IDLE_S seconds, then
//! calls every agent ROUNDS times and gathers the answers; it prints one
//! JSON line: attach time, its own CPU while idle (percent of one CPU),
//! per call+gather (median latency and CPU), resident memory and threads.
//!
//! The job secret comes from `MONARCH_JOB_TOKEN` in both modes.

use std::io::BufRead;
use std::time::{Duration, Instant};

use monarch_core::{HostMesh, Runtime};

fn secret() -> String {
    std::env::var("MONARCH_JOB_TOKEN").expect("MONARCH_JOB_TOKEN")
}

fn agent() -> Runtime {
    Runtime::listen_tcp(
        "tcp:127.0.0.1:0",
        std::net::IpAddr::from([127, 0, 0, 1]),
        secret(),
    )
    .expect("listen on 127.0.0.1")
}

/// Answer every call to any of `agents` (an `info` gets a host name, any
/// other method an empty answer), from one thread sleeping in `epoll` on
/// their notification descriptors.
fn serve(agents: Vec<Runtime>) {
    // SAFETY: plain syscalls on descriptors the runtimes own.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    assert!(ep >= 0, "epoll_create1");
    for (i, a) in agents.iter().enumerate() {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: i as u64,
        };
        // SAFETY: valid descriptors and event.
        let r = unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, a.notify_fd(), &mut ev) };
        assert!(r == 0, "epoll_ctl");
    }
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 256];
    loop {
        // SAFETY: a valid epoll descriptor and event array.
        let n = unsafe { libc::epoll_wait(ep, events.as_mut_ptr(), 256, -1) };
        for e in &events[..n.max(0) as usize] {
            let a = &agents[e.u64 as usize];
            a.clear_notify_fd();
            while let Ok(mut ev) = a.next_event(Some(Duration::ZERO)) {
                let answer: &[u8] = if ev.method == monarch_core::agent_protocol::INFO {
                    b"scale-agent"
                } else {
                    b""
                };
                let _ = ev.reply(Ok(&[answer]));
            }
        }
    }
}

fn agents(n: usize) {
    let agents: Vec<Runtime> = (0..n).map(|_| agent()).collect();
    for a in &agents {
        a.serve_builtin(monarch_core::runtime::AGENT_ACTOR);
        println!("{}", a.addr());
    }
    println!("ready");
    let served = agents.clone();
    std::thread::spawn(move || serve(served));
    // Serve until the bench closes our stdin.
    for _ in std::io::stdin().lock().lines() {}
    for a in &agents {
        a.shutdown();
    }
}

/// Total CPU time (user + system) of this process, all threads.
fn cpu_time() -> Duration {
    // SAFETY: getrusage fills the struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// A field of /proc/self/status (e.g. `VmRSS`, `Threads`), its first number.
fn status(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn controller(idle: Duration, rounds: usize, addrs: &[String]) {
    let rt = Runtime::listen_tcp(
        "tcp:127.0.0.1:0",
        std::net::IpAddr::from([127, 0, 0, 1]),
        secret(),
    )
    .expect("controller");
    let t = Instant::now();
    let hosts = HostMesh::attach(&rt, addrs).expect("attach the agents");
    let attach_s = t.elapsed().as_secs_f64();
    let hosts = hosts.hosts();
    // Idle: nothing to do but keep the connections.
    let (c0, t0) = (cpu_time(), Instant::now());
    std::thread::sleep(idle);
    let idle_cpu = (cpu_time() - c0).as_secs_f64() / t0.elapsed().as_secs_f64() * 100.0;
    let mut lat = Vec::with_capacity(rounds);
    let c0 = cpu_time();
    for _ in 0..rounds {
        let t = Instant::now();
        let futs: Vec<_> = hosts
            .iter()
            .map(|h| rt.call_agent(h, "ping", &[]).expect("call"))
            .collect();
        for f in futs {
            assert!(f.wait(Some(Duration::from_secs(120))), "no answer");
            let vm = f.take().expect("ready").expect("a value mesh");
            assert!(!vm.values[0].is_err(), "{:?}", vm.values[0]);
        }
        lat.push(t.elapsed().as_secs_f64());
    }
    let cast_cpu = (cpu_time() - c0).as_secs_f64() / rounds.max(1) as f64;
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let median = lat.get(lat.len() / 2).copied().unwrap_or(0.0);
    println!(
        "{{\"agents\": {}, \"attach_s\": {attach_s:.4}, \"idle_cpu_pct\": {idle_cpu:.3}, \
         \"cast_median_s\": {median:.6}, \"cast_cpu_s\": {cast_cpu:.6}, \"rss_kib\": {}, \
         \"threads\": {}, \"fds\": {}}}",
        hosts.len(),
        status("VmRSS"),
        status("Threads"),
        std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count()),
    );
    rt.shutdown();
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("agents") => agents(args[1].parse().expect("N")),
        Some("controller") => controller(
            Duration::from_secs_f64(args[1].parse().expect("IDLE_S")),
            args[2].parse().expect("ROUNDS"),
            &args[3..],
        ),
        _ => {
            eprintln!("usage: scale_agents agents N | controller IDLE_S ROUNDS ADDR...");
            std::process::exit(2);
        }
    }
}
