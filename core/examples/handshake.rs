//! Connect latency: the authentication handshake alone (both ends in this
//! process over a Unix socket pair), and a TCP connect plus handshake to a
//! running host agent (`monarch host`). Prints one JSON line per row with
//! the median and 90th percentile in microseconds. `benches/handshake.py`
//! starts the agent and prints the table.
//!
//! MONARCH_JOB_TOKEN=... cargo run --release -p monarch-core --example handshake -- [N] [AGENT_IP:PORT]

use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use monarch_core::auth::{accept_handshake, connect_handshake};

fn row(name: &str, mut us: Vec<f64>) {
    us.sort_by(|a, b| a.total_cmp(b));
    let p = |q: f64| us[((us.len() - 1) as f64 * q).round() as usize];
    println!(
        "{{\"row\": \"{name}\", \"n\": {}, \"median_us\": {:.1}, \"p90_us\": {:.1}}}",
        us.len(),
        p(0.5),
        p(0.9)
    );
}

fn micros(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e6
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(300);
    let agent = args.next();
    let secret = std::env::var("MONARCH_JOB_TOKEN").expect("MONARCH_JOB_TOKEN is set");
    let key = secret.as_bytes();

    let mut pair = Vec::with_capacity(n);
    for _ in 0..n + 20 {
        let (mut a, mut c) = UnixStream::pair().unwrap();
        let k = key.to_vec();
        let t = Instant::now();
        let acceptor = std::thread::spawn(move || accept_handshake(&mut a, &k, "unix:/a"));
        connect_handshake(&mut c, key, "unix:/c").expect("handshake");
        acceptor.join().unwrap().expect("handshake");
        pair.push(micros(t));
    }
    row("socket pair, both ends here", pair[20..].to_vec());

    if let Some(addr) = agent {
        let mut tcp = Vec::with_capacity(n);
        for _ in 0..n + 20 {
            let t = Instant::now();
            let mut s = TcpStream::connect(&addr).expect("connect to the agent");
            s.set_nodelay(true).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            connect_handshake(&mut s, key, "tcp:127.0.0.1:1").expect("handshake with the agent");
            tcp.push(micros(t));
        }
        row(
            "TCP connect + handshake to monarch host",
            tcp[20..].to_vec(),
        );
    }
}
