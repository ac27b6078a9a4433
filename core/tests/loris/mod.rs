//! A slow-loris attacker for the listener tests (`core/tests/slow_loris.rs`
//! and `cli/tests/slow_loris.rs`, which includes this file by path): many
//! connections that each send one more byte of a handshake that never ends
//! on every tick, and connect again when the server closes them. No secret
//! is needed to do this.

// Each test binary uses part of this module.
#![allow(dead_code)]

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::os::fd::FromRawFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Where the attacker connects.
#[derive(Clone, Debug)]
pub enum Target {
    /// A TCP address, from a chosen local IPv4 address (else the default).
    Tcp(SocketAddrV4, Option<Ipv4Addr>),
    Unix(PathBuf),
}

impl Target {
    /// `tcp:IP:PORT` (IPv4) or `unix:PATH`, as a runtime names its address.
    pub fn parse(addr: &str) -> Target {
        match addr.strip_prefix("unix:") {
            Some(p) => Target::Unix(p.into()),
            None => Target::Tcp(
                addr.strip_prefix("tcp:")
                    .unwrap_or(addr)
                    .parse()
                    .expect("tcp:IPv4:PORT"),
                None,
            ),
        }
    }

    /// Connect from `ip` (e.g. another loopback address: another source
    /// than this host's other peers).
    pub fn from(self, ip: Ipv4Addr) -> Target {
        match self {
            Target::Tcp(to, _) => Target::Tcp(to, Some(ip)),
            unix => unix,
        }
    }
}

/// A blocking TCP connection to `to` from `from` (port chosen by the kernel).
fn tcp_from(to: SocketAddrV4, from: Ipv4Addr) -> io::Result<TcpStream> {
    let sin = |a: SocketAddrV4| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*a.ip()).to_be(),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: a fresh socket, owned by the TcpStream made from it at once;
    // bind and connect get valid sockaddr_in values of the size given.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let s = TcpStream::from_raw_fd(fd);
        let local = sin(SocketAddrV4::new(from, 0));
        if libc::bind(fd, &local as *const _ as *const libc::sockaddr, len) != 0 {
            return Err(io::Error::last_os_error());
        }
        let remote = sin(to);
        if libc::connect(fd, &remote as *const _ as *const libc::sockaddr, len) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(s)
    }
}

enum Sock {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Sock {
    fn connect(t: &Target) -> io::Result<Sock> {
        let s = match t {
            Target::Tcp(to, None) => Sock::Tcp(TcpStream::connect_timeout(
                &SocketAddr::V4(*to),
                Duration::from_secs(5),
            )?),
            Target::Tcp(to, Some(from)) => Sock::Tcp(tcp_from(*to, *from)?),
            Target::Unix(p) => Sock::Unix(UnixStream::connect(p)?),
        };
        match &s {
            Sock::Tcp(s) => s.set_nonblocking(true)?,
            Sock::Unix(s) => s.set_nonblocking(true)?,
        }
        Ok(s)
    }

    /// Whether the server has closed the connection (what it sent is
    /// read and dropped).
    fn closed_by_server(&mut self) -> bool {
        let mut buf = [0u8; 512];
        loop {
            let r = match self {
                Sock::Tcp(s) => s.read(&mut buf),
                Sock::Unix(s) => s.read(&mut buf),
            };
            match r {
                Ok(0) => return true,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return true,
            }
        }
    }

    fn send_byte(&self, b: u8) -> bool {
        let r = match self {
            Sock::Tcp(s) => {
                let mut w: &TcpStream = s;
                w.write(&[b])
            }
            Sock::Unix(s) => {
                let mut w: &UnixStream = s;
                w.write(&[b])
            }
        };
        matches!(r, Ok(1)) || matches!(&r, Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }
}

/// What the attacker sends, a byte per tick: a valid first message (the
/// magic and a nonce), then the start of a proof with the longest identity
/// the acceptor takes. At a byte per tick it never completes.
fn script() -> Vec<u8> {
    let mut s = b"MONARCH\x01".to_vec();
    s.extend_from_slice(&[7u8; 32]);
    s.extend_from_slice(&4096u16.to_le_bytes());
    s.extend(std::iter::repeat_n(b'a', 4096));
    s
}

/// The attacker: one thread holding `n` trickling connections.
pub struct Loris {
    stop: Arc<AtomicBool>,
    /// Connections the server closed (each is then opened again).
    closed: Arc<AtomicUsize>,
    /// Ticks completed (every connection open and sent a byte).
    rounds: Arc<AtomicUsize>,
    thread: Option<JoinHandle<()>>,
}

impl Loris {
    /// Open `n` connections to `target` and send a byte of the monarch
    /// handshake on each every `tick`.
    pub fn start(target: Target, n: usize, tick: Duration) -> Loris {
        Loris::start_script(target, n, tick, script())
    }

    /// The start of a TLS ClientHello: a record header announcing 16 KiB,
    /// then its body, a byte per tick.
    pub fn tls_script() -> Vec<u8> {
        let mut s = vec![0x16, 0x03, 0x01, 0x40, 0x00, 0x01];
        s.extend(std::iter::repeat_n(0u8, 16 * 1024));
        s
    }

    /// As [`Loris::start`], sending `script` (its last byte repeats).
    pub fn start_script(target: Target, n: usize, tick: Duration, script: Vec<u8>) -> Loris {
        let stop = Arc::new(AtomicBool::new(false));
        let closed = Arc::new(AtomicUsize::new(0));
        let rounds = Arc::new(AtomicUsize::new(0));
        let (s, c, r) = (stop.clone(), closed.clone(), rounds.clone());
        let thread = std::thread::Builder::new()
            .name("slow-loris".into())
            .spawn(move || {
                let mut conns: Vec<(Option<Sock>, usize)> = (0..n).map(|_| (None, 0)).collect();
                while !s.load(Ordering::SeqCst) {
                    let start = Instant::now();
                    let mut all_open = true;
                    for (sock, pos) in conns.iter_mut() {
                        if let Some(open) = sock {
                            if open.closed_by_server() || !open.send_byte(script[*pos]) {
                                c.fetch_add(1, Ordering::SeqCst);
                                *sock = None;
                            } else {
                                *pos = (*pos + 1).min(script.len() - 1);
                                continue;
                            }
                        }
                        // (Re)connect and send the first byte.
                        *pos = 0;
                        match Sock::connect(&target) {
                            Ok(open) if open.send_byte(script[0]) => {
                                *pos = 1;
                                *sock = Some(open);
                            }
                            _ => all_open = false,
                        }
                    }
                    if all_open {
                        r.fetch_add(1, Ordering::SeqCst);
                    }
                    if let Some(rest) = tick.checked_sub(start.elapsed()) {
                        std::thread::sleep(rest);
                    }
                }
            })
            .expect("start the attacker thread");
        Loris {
            stop,
            closed,
            rounds,
            thread: Some(thread),
        }
    }

    /// Connections the server has closed so far.
    pub fn closed(&self) -> usize {
        self.closed.load(Ordering::SeqCst)
    }

    /// Wait (at most `bound`) until `rounds` ticks with every connection
    /// open have passed since this call; false if they did not.
    pub fn wait_rounds(&self, rounds: usize, bound: Duration) -> bool {
        let target = self.rounds.load(Ordering::SeqCst) + rounds;
        wait_for(bound, || self.rounds.load(Ordering::SeqCst) >= target)
    }

    /// Wait (at most `bound`) until the server has closed at least `n`.
    pub fn wait_closed(&self, n: usize, bound: Duration) -> bool {
        wait_for(bound, || self.closed() >= n)
    }
}

impl Drop for Loris {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Poll `done` every 20 ms for at most `bound`.
pub fn wait_for(bound: Duration, done: impl Fn() -> bool) -> bool {
    let until = Instant::now() + bound;
    while Instant::now() < until {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    done()
}

/// Threads of process `pid` ("self" for this one).
pub fn threads_of(pid: &str) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Open descriptors of process `pid`.
pub fn fds_of(pid: &str) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Raise this process's open-file limit to its hard limit (the attacker
/// holds over a thousand sockets).
pub fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on a valid rlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}
