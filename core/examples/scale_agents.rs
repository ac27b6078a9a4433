//! Load generator and controller for `benches/scale.py`: one controller
//! against many host agents.
//!
//! `scale_agents agents N` runs N host agents in this process, each a real
//! runtime listening on TCP and serving the agent actor through the real
//! agent protocol (authentication, frames, replies); `start` starts each
//! proc as another runtime in this process, which connects to the
//! controller and says Ready as a proc does. One thread answers all of
//! them, woken through their notification descriptors. It prints one
//! address per line, then `ready`, and serves until stdin closes.
//!
//! `scale_agents controller IDLE_S ROUNDS ADDR...` attaches the agents as a
//! host mesh (as a controller does), sits idle for IDLE_S seconds, then
//! calls every agent ROUNDS times and gathers the answers; it prints one
//! JSON line: attach time, its own CPU while idle (percent of one CPU),
//! per call+gather (median latency and CPU), then the time to spawn one
//! proc per host through the agents to every actor's first answer, per
//! cast+gather to the actors on those procs (median latency, CPU per
//! round, and the calling thread's CPU to issue the cast), and its
//! resident memory, threads and descriptors at the end.
//!
//! The job secret comes from `MONARCH_JOB_TOKEN` in both modes.

use std::collections::HashMap;
use std::io::BufRead;
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use monarch_core::agent_protocol;
use monarch_core::{CallMode, HostMesh, Runtime};

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

/// The runtimes the serving thread answers for (agents and their procs),
/// woken through their notification descriptors in one epoll set.
struct Served {
    epoll: i32,
    runtimes: Mutex<Vec<Runtime>>,
    /// Listening sockets bound by `prepare`, by the address handed out.
    prepared: Mutex<HashMap<String, TcpListener>>,
}

impl Served {
    fn add(&self, rt: Runtime) {
        let mut all = self.runtimes.lock().unwrap();
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: all.len() as u64,
        };
        // SAFETY: valid descriptors and event.
        let r =
            unsafe { libc::epoll_ctl(self.epoll, libc::EPOLL_CTL_ADD, rt.notify_fd(), &mut ev) };
        assert!(r == 0, "epoll_ctl");
        all.push(rt);
    }

    /// `prepare n`: bind n sockets for procs.
    fn prepare(&self, parts: &[Vec<u8>]) -> Vec<Vec<u8>> {
        let n: usize = String::from_utf8_lossy(&parts[0]).parse().unwrap_or(0);
        let mut prepared = self.prepared.lock().unwrap();
        (0..n)
            .map(|_| {
                let l = TcpListener::bind("127.0.0.1:0").expect("bind a proc socket");
                let addr = format!("tcp:127.0.0.1:{}", l.local_addr().unwrap().port());
                prepared.insert(addr.clone(), l);
                addr.into_bytes()
            })
            .collect()
    }

    /// `start controller base argv env addrs`: one in-process proc per
    /// prepared address, each connecting to the controller on a thread
    /// of its own (the answer goes back once all said Ready).
    fn start(self: &Arc<Self>, mut ev: monarch_core::Event) {
        let me = self.clone();
        std::thread::spawn(move || {
            let controller = String::from_utf8_lossy(&ev.parts[0]).into_owned();
            let addrs: Vec<String> = String::from_utf8_lossy(&ev.parts[4])
                .lines()
                .map(str::to_string)
                .collect();
            for addr in addrs {
                let l = me.prepared.lock().unwrap().remove(&addr).expect("prepared");
                let rt = Runtime::proc_on_listener(l, addr, secret(), controller.clone())
                    .expect("start an in-process proc");
                me.add(rt);
            }
            let _ = ev.reply(Ok(&[]));
        });
    }

    /// Answer every event: `info` with a host name, `prepare` and `start`
    /// as an agent does, anything else (calls, actor spawns) with an empty
    /// answer.
    fn serve(self: &Arc<Self>) {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 256];
        loop {
            // SAFETY: a valid epoll descriptor and event array.
            let n = unsafe { libc::epoll_wait(self.epoll, events.as_mut_ptr(), 256, -1) };
            for e in &events[..n.max(0) as usize] {
                let rt = self.runtimes.lock().unwrap()[e.u64 as usize].clone();
                rt.clear_notify_fd();
                while let Ok(mut ev) = rt.next_event(Some(Duration::ZERO)) {
                    if !ev.wants_reply() {
                        continue;
                    }
                    match ev.method.as_str() {
                        agent_protocol::INFO => drop(ev.reply(Ok(&[b"scale-agent"]))),
                        agent_protocol::PREPARE => {
                            let addrs = self.prepare(&ev.parts);
                            let refs: Vec<&[u8]> = addrs.iter().map(|a| a.as_slice()).collect();
                            let _ = ev.reply(Ok(&refs));
                        }
                        agent_protocol::START => self.start(ev),
                        _ => drop(ev.reply(Ok(&[b""]))),
                    }
                }
            }
        }
    }
}

fn agents(n: usize) {
    let agents: Vec<Runtime> = (0..n).map(|_| agent()).collect();
    // SAFETY: plain syscall; checked below.
    let epoll = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    assert!(epoll >= 0, "epoll_create1");
    let served = Arc::new(Served {
        epoll,
        runtimes: Mutex::new(Vec::new()),
        prepared: Mutex::new(HashMap::new()),
    });
    for a in &agents {
        a.serve_builtin(monarch_core::runtime::AGENT_ACTOR);
        served.add(a.clone());
        println!("{}", a.addr());
    }
    println!("ready");
    let s = served.clone();
    std::thread::spawn(move || s.serve());
    // Serve until the bench closes our stdin.
    for _ in std::io::stdin().lock().lines() {}
    for rt in served.runtimes.lock().unwrap().iter() {
        rt.shutdown();
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

/// CPU time of the calling thread.
fn thread_cpu_time() -> Duration {
    // SAFETY: clock_gettime fills the struct.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
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
    let hm = HostMesh::attach(&rt, addrs).expect("attach the agents");
    let attach_s = t.elapsed().as_secs_f64();
    let hosts = hm.hosts();
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
    // One proc per host, through the agents, to every actor's first reply.
    let t = Instant::now();
    let pm = hm
        .spawn_procs(
            &["procs".to_string()],
            &[1],
            &["scale-proc".to_string()],
            &[],
        )
        .expect("spawn through the agents");
    let (am, ready) = pm
        .spawn_actors("bench", "bench", &[])
        .expect("spawn actors");
    assert!(
        ready.wait(Some(Duration::from_secs(600))),
        "procs never ready"
    );
    let spawned = ready.take().expect("ready").expect("a value mesh");
    assert!(spawned.values.iter().all(|v| !v.is_err()), "a proc failed");
    let spawn_s = t.elapsed().as_secs_f64();
    // A cast to the actor mesh on those procs (one `call()`, down the
    // multicast tree of procs), gathered, round after round.
    let mut cast_lat = Vec::with_capacity(rounds);
    let mut issue = Vec::with_capacity(rounds);
    let c0 = cpu_time();
    for _ in 0..rounds {
        let t = Instant::now();
        let i0 = thread_cpu_time();
        let f = am
            .call("ping", &[], CallMode::All)
            .expect("cast")
            .expect("a gather");
        issue.push((thread_cpu_time() - i0).as_secs_f64());
        assert!(f.wait(Some(Duration::from_secs(120))), "no answer");
        let vm = f.take().expect("ready").expect("a value mesh");
        assert_eq!(vm.values.len(), hosts.len());
        assert!(vm.values.iter().all(|v| !v.is_err()), "a point failed");
        cast_lat.push(t.elapsed().as_secs_f64());
    }
    let mesh_cast_cpu = (cpu_time() - c0).as_secs_f64() / rounds.max(1) as f64;
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    let mesh_cast_median = median(&mut cast_lat);
    let mesh_cast_issue = median(&mut issue);
    let median = median(&mut lat);
    println!(
        "{{\"agents\": {}, \"attach_s\": {attach_s:.4}, \"idle_cpu_pct\": {idle_cpu:.3}, \
         \"cast_median_s\": {median:.6}, \"cast_cpu_s\": {cast_cpu:.6}, \"spawn_s\": {spawn_s:.4}, \
         \"mesh_cast_median_s\": {mesh_cast_median:.6}, \"mesh_cast_cpu_s\": {mesh_cast_cpu:.6}, \"mesh_cast_issue_s\": {mesh_cast_issue:.7}, \"rss_kib\": {}, \
         \"threads\": {}, \"fds\": {}}}",
        hosts.len(),
        status("VmRSS"),
        status("Threads"),
        std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count()),
    );
    // Exit without stopping the procs: the load generator's procs answer
    // no stop (their agent reports no exits), and the bench closes it next.
    use std::io::Write;
    let _ = std::io::stdout().flush();
    std::process::exit(0);
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
