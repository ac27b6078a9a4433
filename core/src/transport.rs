//! Where the bytes go: the one place that knows about socket kinds.
//!
//! Addresses are strings: `unix:/path/to.sock` for procs on this host (a
//! socket in a directory only the user can open, see `process::SocketDir`)
//! and `tcp:IP:PORT` for procs and host agents reached across hosts.
//! TCP sockets get `TCP_NODELAY` (small frames are the common case) and
//! kernel keepalive with a user timeout, so a peer behind a cut link is
//! noticed even on an idle connection (see [`tcp_timeout`]).
//! When this process has a TLS configuration (`crate::tls`), every TCP
//! stream it opens or accepts is a [`Stream::Tls`]; Unix sockets never are.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind, Result};
use crate::tls::TlsStream;

/// A parsed address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Addr {
    /// A Unix socket path (`unix:PATH`).
    Unix(PathBuf),
    /// A TCP address (`tcp:IP:PORT`).
    Tcp(SocketAddr),
}

impl Addr {
    /// Parse `unix:PATH` or `tcp:IP:PORT` (a bare `IP:PORT` or
    /// `HOST:PORT` is taken as TCP).
    pub fn parse(s: &str) -> Result<Addr> {
        if let Some(p) = s.strip_prefix("unix:") {
            if p.is_empty() {
                return Err(Error::invalid(format!("empty socket path in '{s}'")));
            }
            return Ok(Addr::Unix(PathBuf::from(p)));
        }
        let hp = s.strip_prefix("tcp:").unwrap_or(s);
        let sa = hp
            .to_socket_addrs()
            .ok()
            .and_then(|mut it| it.next())
            .ok_or_else(|| {
                Error::invalid(format!(
                    "unsupported address '{s}' (want unix:PATH or tcp:IP:PORT)"
                ))
            })?;
        Ok(Addr::Tcp(sa))
    }
}

impl std::fmt::Display for Addr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Addr::Unix(p) => write!(f, "unix:{}", p.display()),
            Addr::Tcp(sa) => write!(f, "tcp:{sa}"),
        }
    }
}

/// Normalize a host address given by a user (`IP:PORT`, `HOST:PORT` or
/// `tcp:...`) to the canonical `tcp:IP:PORT`.
pub fn tcp_addr(s: &str) -> Result<String> {
    match Addr::parse(s)? {
        a @ Addr::Tcp(_) => Ok(a.to_string()),
        Addr::Unix(_) => Err(Error::invalid(format!(
            "'{s}' is not a TCP address (want IP:PORT)"
        ))),
    }
}

/// How long a TCP peer may leave data or keepalive probes unacknowledged
/// before the connection is declared dead (`MONARCH_TCP_TIMEOUT_MS`,
/// default 10 s). Also the connect timeout.
pub(crate) fn tcp_timeout() -> Duration {
    let ms = std::env::var("MONARCH_TCP_TIMEOUT_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(10_000)
        .max(100);
    Duration::from_millis(ms)
}

/// Set by a host agent for its procs: its private socket directory, where
/// each proc also listens on a Unix socket named after its TCP port, so
/// procs of the same host talk over Unix sockets.
pub const ENV_HOST_SOCKET_DIR: &str = "MONARCH_HOST_SOCKET_DIR";

/// The Unix socket under which the proc at `peer` (`tcp:IP:PORT`) is also
/// reachable, when it was started by the same agent as this process (same
/// IP, and that agent's socket directory is in our environment).
pub(crate) fn same_host_path(my_addr: &str, peer: &str) -> Option<PathBuf> {
    let dir = std::env::var_os(ENV_HOST_SOCKET_DIR)?;
    let (Ok(Addr::Tcp(me)), Ok(Addr::Tcp(p))) = (Addr::parse(my_addr), Addr::parse(peer)) else {
        return None;
    };
    (me.ip() == p.ip()).then(|| PathBuf::from(dir).join(format!("{}.sock", p.port())))
}

/// A connected stream of either kind (TCP with or without TLS).
#[derive(Debug)]
pub enum Stream {
    /// A Unix stream socket.
    Unix(UnixStream),
    /// A plain TCP connection.
    Tcp(TcpStream),
    /// A TCP connection inside TLS.
    Tls(TlsStream),
}

impl From<UnixStream> for Stream {
    fn from(s: UnixStream) -> Stream {
        Stream::Unix(s)
    }
}

impl From<TcpStream> for Stream {
    fn from(s: TcpStream) -> Stream {
        Stream::Tcp(s)
    }
}

fn setsockopt_int(fd: RawFd, level: libc::c_int, name: libc::c_int, v: libc::c_int) {
    // SAFETY: a valid int option value of the right size on our own socket.
    unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            &v as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

/// NODELAY, keepalive probing and a user timeout on a TCP socket.
fn tune_tcp(s: &TcpStream) {
    let _ = s.set_nodelay(true);
    let fd = s.as_raw_fd();
    let t = tcp_timeout();
    let probe = (t.as_secs() / 4).clamp(1, 60) as libc::c_int;
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1);
    setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, probe);
    setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, probe);
    setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 3);
    setsockopt_int(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_USER_TIMEOUT,
        t.as_millis().min(i32::MAX as u128) as libc::c_int,
    );
}

impl Stream {
    /// Connect to `addr` (TCP with [`tcp_timeout`] as connect timeout).
    pub fn connect(addr: &str) -> Result<Stream> {
        let fail = |e: io::Error| {
            Error::new(
                ErrorKind::ProcFailed,
                format!("cannot connect to {addr}: {e}"),
            )
        };
        match Addr::parse(addr)? {
            Addr::Unix(p) => UnixStream::connect(p).map(Stream::Unix).map_err(fail),
            Addr::Tcp(sa) => {
                let tls = crate::tls::global()?;
                let s = TcpStream::connect_timeout(&sa, tcp_timeout()).map_err(fail)?;
                tune_tcp(&s);
                Stream::tcp(s, tls.as_deref(), false).map_err(fail)
            }
        }
    }

    /// A TCP stream, inside TLS when `tls` is given (`server`: we accepted
    /// it). The TLS handshake runs on first use.
    pub fn tcp(
        s: TcpStream,
        tls: Option<&crate::tls::TlsConfig>,
        server: bool,
    ) -> io::Result<Stream> {
        Ok(match tls {
            None => Stream::Tcp(s),
            Some(cfg) if server => Stream::Tls(TlsStream::server(s, cfg)?),
            Some(cfg) => Stream::Tls(TlsStream::client(s, cfg)?),
        })
    }

    /// Connect to `addr`, over the same-host Unix socket of the proc when
    /// there is one (see [`same_host_path`]), else as [`Stream::connect`].
    pub fn connect_from(my_addr: &str, addr: &str) -> Result<Stream> {
        if let Some(path) = same_host_path(my_addr, addr) {
            if let Ok(s) = UnixStream::connect(&path) {
                return Ok(Stream::Unix(s));
            }
        }
        Stream::connect(addr)
    }

    /// Another handle on the same connection.
    pub fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Tls(s) => Stream::Tls(s.try_clone()?),
        })
    }

    /// Switch the socket to (non-)blocking mode.
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_nonblocking(on),
            Stream::Tcp(s) => s.set_nonblocking(on),
            Stream::Tls(s) => s.tcp().set_nonblocking(on),
        }
    }

    /// Bound blocking reads (None: wait forever).
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_read_timeout(t),
            Stream::Tcp(s) => s.set_read_timeout(t),
            Stream::Tls(s) => s.tcp().set_read_timeout(t),
        }
    }

    /// Bound blocking writes (None: wait forever).
    pub fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_write_timeout(t),
            Stream::Tcp(s) => s.set_write_timeout(t),
            Stream::Tls(s) => s.tcp().set_write_timeout(t),
        }
    }

    /// Shut the connection down both ways (wakes a blocked reader).
    pub fn shutdown(&self) {
        let _ = match self {
            Stream::Unix(s) => s.shutdown(Shutdown::Both),
            Stream::Tcp(s) => s.shutdown(Shutdown::Both),
            Stream::Tls(s) => s.tcp().shutdown(Shutdown::Both),
        };
    }

    /// The remote IP address (None for a Unix socket).
    pub fn peer_ip(&self) -> Option<IpAddr> {
        match self {
            Stream::Unix(_) => None,
            Stream::Tcp(s) => s.peer_addr().ok().map(|a| a.ip()),
            Stream::Tls(s) => s.tcp().peer_addr().ok().map(|a| a.ip()),
        }
    }

    /// The remote address, for logs.
    pub fn peer_desc(&self) -> String {
        match self {
            Stream::Unix(_) => "unix peer".into(),
            Stream::Tcp(s) => s
                .peer_addr()
                .map(|a| format!("tcp:{a}"))
                .unwrap_or_else(|_| "tcp peer".into()),
            Stream::Tls(s) => s
                .tcp()
                .peer_addr()
                .map(|a| format!("tcp:{a} (TLS)"))
                .unwrap_or_else(|_| "tcp peer (TLS)".into()),
        }
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Stream::Unix(s) => s.as_raw_fd(),
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Tls(s) => s.as_raw_fd(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(buf),
            Stream::Tcp(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write(buf),
            Stream::Tcp(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tls(s) => s.flush(),
            _ => Ok(()),
        }
    }
}

/// A blocking stream whose socket timeouts can be set: what [`Bounded`]
/// needs (the data plane's streams implement it too).
pub trait SetTimeouts: Read + Write {
    /// The socket's read timeout (`None`: block).
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()>;
    /// The socket's write timeout (`None`: block).
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()>;
}

impl SetTimeouts for Stream {
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        Stream::set_read_timeout(self, t)
    }
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        Stream::set_write_timeout(self, t)
    }
}

/// A blocking stream whose reads and writes all end by one deadline, so
/// that a whole exchange (a handshake) is bounded, not each call.
pub struct Bounded<'a, S: SetTimeouts> {
    stream: &'a mut S,
    until: Instant,
}

impl<'a, S: SetTimeouts> Bounded<'a, S> {
    /// `stream` until `timeout` from now.
    pub fn new(stream: &'a mut S, timeout: Duration) -> Bounded<'a, S> {
        Bounded {
            stream,
            until: Instant::now() + timeout,
        }
    }

    /// Time left, or a TimedOut error once the deadline has passed.
    fn left(&self) -> io::Result<Duration> {
        match self.until.checked_duration_since(Instant::now()) {
            Some(t) if !t.is_zero() => Ok(t),
            _ => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the handshake deadline passed",
            )),
        }
    }

    /// Both socket timeouts to the time left (a TLS session may read
    /// while writing and write while reading).
    fn arm(&mut self) -> io::Result<()> {
        let left = self.left()?;
        self.stream.set_read_timeout(Some(left))?;
        self.stream.set_write_timeout(Some(left))
    }
}

/// A read that times out (EAGAIN) early is retried; once the deadline has
/// passed, `left` reports TimedOut.
impl<S: SetTimeouts> Read for Bounded<'_, S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            self.arm()?;
            match self.stream.read(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                r => return r,
            }
        }
    }
}

/// A write that times out is not retried (TLS may have taken its bytes).
impl<S: SetTimeouts> Write for Bounded<'_, S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.arm()?;
        match self.stream.write(buf) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the handshake deadline passed",
            )),
            r => r,
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        self.arm()?;
        self.stream.flush()
    }
}

/// A listening socket of either kind.
pub(crate) enum Listener {
    /// Listening on a Unix socket.
    Unix(UnixListener),
    /// Listening on TCP.
    Tcp(TcpListener),
}

impl Listener {
    /// Listen on `addr`; returns the listener and its actual address
    /// (port 0 becomes the port the kernel chose).
    pub fn bind(addr: &str) -> Result<(Listener, String)> {
        let fail = |e: io::Error| Error::io(&format!("cannot listen on {addr}"), e);
        match Addr::parse(addr)? {
            Addr::Unix(p) => {
                let l = UnixListener::bind(&p).map_err(fail)?;
                Ok((Listener::Unix(l), addr.to_string()))
            }
            Addr::Tcp(sa) => {
                let l = TcpListener::bind(sa).map_err(fail)?;
                let actual = l.local_addr().map_err(fail)?;
                Ok((Listener::Tcp(l), format!("tcp:{actual}")))
            }
        }
    }

    /// Adopt a listening TCP socket inherited as descriptor `fd`.
    ///
    /// # Safety
    /// `fd` must be an open listening TCP socket owned by nobody else.
    pub unsafe fn from_tcp_fd(fd: RawFd) -> Listener {
        // SAFETY: the caller guarantees ownership of a listening socket.
        Listener::Tcp(unsafe { TcpListener::from_raw_fd(fd) })
    }

    /// Wait for the next connection.
    pub fn accept(&self) -> io::Result<Stream> {
        match self {
            Listener::Unix(l) => l.accept().map(|(s, _)| Stream::Unix(s)),
            Listener::Tcp(l) => {
                let (s, _) = l.accept()?;
                tune_tcp(&s);
                let tls = crate::tls::global()
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
                Stream::tcp(s, tls.as_deref(), true)
            }
        }
    }

    /// Switch the listening socket to (non-)blocking `accept`.
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        match self {
            Listener::Unix(l) => l.set_nonblocking(on),
            Listener::Tcp(l) => l.set_nonblocking(on),
        }
    }

    /// Wake a thread blocked in `accept` (it then fails).
    pub fn shutdown(&self) {
        // SAFETY: shutting down our own listening socket.
        unsafe { libc::shutdown(self.as_raw_fd(), libc::SHUT_RDWR) };
    }
}

impl AsRawFd for Listener {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Listener::Unix(l) => l.as_raw_fd(),
            Listener::Tcp(l) => l.as_raw_fd(),
        }
    }
}

/// The local IP this host uses to reach `peer` (by routing; no packet is
/// sent): the address under which the peer's host can reach us.
pub(crate) fn local_ip_towards(peer: &SocketAddr) -> Result<IpAddr> {
    let bind: SocketAddr = if peer.is_ipv4() {
        "0.0.0.0:0".parse().expect("valid")
    } else {
        "[::]:0".parse().expect("valid")
    };
    let s = UdpSocket::bind(bind).map_err(|e| Error::io("udp socket", e))?;
    s.connect(peer)
        .map_err(|e| Error::io(&format!("no route to {peer}"), e))?;
    Ok(s.local_addr()
        .map_err(|e| Error::io("udp local addr", e))?
        .ip())
}

/// This host's address for others when listening on an unspecified
/// address: the source address of the default route, else loopback.
pub fn default_host_ip() -> IpAddr {
    let probe: SocketAddr = "192.0.2.1:9".parse().expect("valid");
    local_ip_towards(&probe).unwrap_or(IpAddr::from([127, 0, 0, 1]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_and_print() {
        assert_eq!(
            Addr::parse("unix:/tmp/x.sock").unwrap(),
            Addr::Unix("/tmp/x.sock".into())
        );
        assert_eq!(tcp_addr("127.0.0.1:80").unwrap(), "tcp:127.0.0.1:80");
        assert_eq!(tcp_addr("tcp:10.0.0.2:1").unwrap(), "tcp:10.0.0.2:1");
        assert!(Addr::parse("nonsense").is_err());
        assert!(tcp_addr("unix:/x").is_err());
    }

    #[test]
    fn a_bounded_stream_ends_at_its_deadline_however_often_bytes_come() {
        let (l, addr) = Listener::bind("tcp:127.0.0.1:0").unwrap();
        let mut c = Stream::connect(&addr).unwrap();
        let mut s = l.accept().unwrap();
        // A byte every 20 ms: no read ever waits long, the whole does.
        let trickle = std::thread::spawn(move || {
            while s.write_all(b"x").is_ok() {
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        let mut b = Bounded::new(&mut c, Duration::from_millis(300));
        let mut buf = [0u8; 1];
        let mut got = 0usize;
        let e = loop {
            match b.read(&mut buf) {
                Ok(n) => got += n,
                Err(e) => break e,
            }
            assert!(got < 10_000, "still reading after {got} bytes");
        };
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
        assert!(got > 0);
        c.shutdown();
        trickle.join().unwrap();
    }

    #[test]
    fn tcp_listener_reports_its_port() {
        let (l, addr) = Listener::bind("tcp:127.0.0.1:0").unwrap();
        assert!(addr.starts_with("tcp:127.0.0.1:") && !addr.ends_with(":0"));
        let c = Stream::connect(&addr).unwrap();
        let s = l.accept().unwrap();
        assert!(matches!((c, s), (Stream::Tcp(_), Stream::Tcp(_))));
    }
}
