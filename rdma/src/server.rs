//! The owner's data-plane server: one abstract Unix socket (same-host
//! leases) and one TCP listener (TCP transfers), each connection served by
//! its own thread with blocking I/O, started when the process registers its
//! first buffer. Nothing here runs foreign code or touches the control
//! connections; an actor busy in an endpoint still serves reads of its
//! buffers.

use std::io::Read;
use std::net::TcpListener;
use std::os::unix::net::UnixListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use monarch_core::limits::HandshakeLimits;
use monarch_core::transport::Bounded;
use monarch_core::{Error, ErrorKind, Result};

use crate::conn::{self, Request, Stream, IO_TIMEOUT};
use crate::registry::{self, Lease};
use crate::{identity, random};

/// Addresses of this process's data-plane server.
pub struct Server {
    /// `unix:@name`
    pub unix: String,
    /// `ip:port` as advertised to peers (`tcp:` not included).
    pub tcp: String,
}

/// The address peers on other hosts should use to reach this one:
/// `MONARCH_RDMA_HOST` if set, else the IP of this proc's control-plane TCP
/// address `owner` (where its peers already reach it), else the address of
/// the interface holding the default route, else loopback.
fn advertised_ip(owner: &str) -> String {
    if let Ok(h) = std::env::var("MONARCH_RDMA_HOST") {
        if !h.is_empty() {
            return h;
        }
    }
    if let Some(ip) = control_plane_ip(owner) {
        return ip.to_string();
    }
    // A UDP "connect" sends nothing; it only picks the outgoing interface.
    std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| {
            s.connect("192.0.2.1:9")?;
            s.local_addr()
        })
        .map(|a| a.ip().to_string())
        .unwrap_or_else(|_| "127.0.0.1".into())
}

/// The IP of `owner` when it is a TCP address bound to one interface.
fn control_plane_ip(owner: &str) -> Option<std::net::IpAddr> {
    let sa: std::net::SocketAddr = owner.strip_prefix("tcp:")?.parse().ok()?;
    (!sa.ip().is_unspecified()).then_some(sa.ip())
}

/// The TCP listeners of the data plane: one on `MONARCH_RDMA_BIND` if set,
/// else on the advertised address only (never every interface unless
/// asked), and, when that one is not on loopback already, one on
/// 127.0.0.1 at the same port, where readers on this host connect. Returns
/// them with the address to advertise.
fn listen_tcp(owner: &str) -> std::io::Result<(Vec<TcpListener>, String)> {
    let advertised = advertised_ip(owner);
    let bind = std::env::var("MONARCH_RDMA_BIND")
        .ok()
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| advertised.clone());
    let bind_host = bind.trim_start_matches('[').trim_end_matches(']');
    let mut last = None;
    // The loopback port may be taken by another process: a few new ports.
    for _ in 0..8 {
        let tl = TcpListener::bind((bind_host, 0)).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("cannot listen on {bind} (set MONARCH_RDMA_BIND to choose): {e}"),
            )
        })?;
        let a = tl.local_addr()?;
        if a.ip().is_loopback() || a.ip().is_unspecified() {
            return Ok((vec![tl], advertised));
        }
        match TcpListener::bind(("127.0.0.1", a.port())) {
            Ok(lo) => return Ok((vec![tl, lo], advertised)),
            Err(e) => last = Some(e),
        }
    }
    Err(last.expect("tried at least once"))
}

/// This process's server, started on first use (the first registration).
pub(crate) fn running() -> Result<&'static Server> {
    static SERVER: OnceLock<std::result::Result<Server, String>> = OnceLock::new();
    SERVER
        .get_or_init(|| start().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| {
            Error::new(
                ErrorKind::Io,
                format!("cannot start the data-plane server: {e}"),
            )
        })
}

fn start() -> std::io::Result<Server> {
    use std::os::linux::net::SocketAddrExt;
    let tag: [u8; 16] = random::bytes(random::OS, "the data-plane socket name")
        .map_err(|e| std::io::Error::other(e.message))?;
    let tag: String = tag.iter().map(|b| format!("{b:02x}")).collect();
    let name = format!("monarch-rdma-{}-{tag}", std::process::id());
    let ua = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
    let ul = UnixListener::bind_addr(&ua)?;
    let (tls, advertised) = listen_tcp(&identity::owner())?;
    let port = tls[0].local_addr()?.port();
    std::thread::Builder::new()
        .name("monarch-rdma-unix".into())
        .spawn(move || {
            for s in ul.incoming() {
                match s {
                    Ok(s) => serve(Stream::Unix(s)),
                    Err(e) => tracing::warn!(error = %e, "rdma unix accept failed"),
                }
            }
        })?;
    for tl in tls {
        std::thread::Builder::new()
            .name("monarch-rdma-tcp".into())
            .spawn(move || accept_tcp(tl))?;
    }
    Ok(Server {
        unix: format!("unix:@{name}"),
        tcp: format!("{advertised}:{port}"),
    })
}

fn accept_tcp(tl: TcpListener) {
    for s in tl.incoming() {
        match s {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                match Stream::tcp(s, true) {
                    Ok(s) => serve(s),
                    Err(e) => tracing::warn!(error = %e, "rdma tcp connection refused"),
                }
            }
            Err(e) => tracing::warn!(error = %e, "rdma tcp accept failed"),
        }
    }
}

/// Connections of this process's data-plane server still in their
/// handshake: each holds a thread, so they are capped.
static PENDING: AtomicUsize = AtomicUsize::new(0);

/// The handshake limits of the control plane (`MONARCH_HANDSHAKE_TIMEOUT_MS`,
/// `MONARCH_MAX_PENDING_HANDSHAKES`), read once.
fn limits() -> &'static HandshakeLimits {
    static LIMITS: OnceLock<HandshakeLimits> = OnceLock::new();
    LIMITS.get_or_init(HandshakeLimits::from_env)
}

/// Releases a pending handshake's slot however its thread ends.
struct PendingSlot;

impl Drop for PendingSlot {
    fn drop(&mut self) {
        PENDING.fetch_sub(1, Ordering::AcqRel);
    }
}

fn serve(s: Stream) {
    let limits = limits();
    if PENDING.fetch_add(1, Ordering::AcqRel) >= limits.max_pending {
        // Over the cap a new connection is closed at once (its transfer
        // fails with the connection's error); slots free up within one
        // handshake deadline.
        PENDING.fetch_sub(1, Ordering::AcqRel);
        tracing::debug!("data-plane connection refused: too many pending handshakes");
        return;
    }
    let slot = PendingSlot;
    // A thread that cannot start drops its closure, and the slot with it.
    let _ = std::thread::Builder::new()
        .name("monarch-rdma-conn".into())
        .spawn(move || {
            let mut s = s;
            let authenticated = conn::accept_handshake(
                &mut Bounded::new(&mut s, limits.timeout),
                &identity::token(),
                &identity::my_id(),
            );
            drop(slot);
            if !authenticated {
                return;
            }
            let _ = s.set_write_timeout(Some(IO_TIMEOUT));
            // Idle pooled connections wait for their next request forever.
            let _ = s.set_read_timeout(None);
            let mut held = Held::default();
            loop {
                let mut b = [0u8; 40];
                if s.read_exact(&mut b).is_err() {
                    return; // peer gone: `held` (if any) is released
                }
                let _ = s.set_read_timeout(Some(IO_TIMEOUT));
                let req = Request::decode(&b);
                if handle(&mut s, &req, &mut held).is_err() {
                    return;
                }
                let _ = s.set_read_timeout(None);
            }
        });
}

/// What a connection holds between requests: a lease (same-host and
/// ibverbs transfers) and the connection's ibverbs queue pair.
#[derive(Default)]
struct Held {
    // Declared first so it is destroyed first: no peer access through it
    // once the lease ends.
    qp: Option<crate::ibverbs::Qp>,
    lease: Option<Lease>,
}

fn handle(s: &mut Stream, req: &Request, held: &mut Held) -> std::io::Result<()> {
    let lease = |write: bool| registry::lease(req.id, req.key, req.offset, req.len, write);
    match req.op {
        conn::OP_READ => match lease(false) {
            Ok(l) => {
                conn::send_status(s, &Ok(()))?;
                let p = l.region.ptr + req.offset as usize;
                // SAFETY: the lease checked the range against a live
                // registration and keeps it registered while we copy.
                let src = unsafe { std::slice::from_raw_parts(p as *const u8, req.len as usize) };
                conn::write_bulk(s, src)
            }
            Err(e) => conn::send_status(s, &Err(e.message)),
        },
        conn::OP_WRITE => match lease(true) {
            Ok(l) => {
                conn::send_status(s, &Ok(()))?;
                let p = l.region.ptr + req.offset as usize;
                // SAFETY: as for reads; the region was registered writable.
                let dst = unsafe { std::slice::from_raw_parts_mut(p as *mut u8, req.len as usize) };
                conn::read_bulk(s, dst)?;
                drop(l);
                conn::send_status(s, &Ok(()))
            }
            Err(e) => conn::send_status(s, &Err(e.message)),
        },
        conn::OP_LEASE_READ | conn::OP_LEASE_WRITE => {
            held.lease = None;
            match lease(req.op == conn::OP_LEASE_WRITE) {
                Ok(l) => {
                    held.lease = Some(l);
                    conn::send_status(s, &Ok(()))
                }
                Err(e) => conn::send_status(s, &Err(e.message)),
            }
        }
        conn::OP_IB_CONNECT => crate::ibverbs::serve_connect(s, req, &mut held.qp),
        conn::OP_IB_LEASE_READ | conn::OP_IB_LEASE_WRITE => {
            held.lease = None;
            if held.qp.is_none() {
                return conn::send_status(
                    s,
                    &Err("no ibverbs queue pair on this connection".into()),
                );
            }
            match lease(req.op == conn::OP_IB_LEASE_WRITE) {
                Ok(l) => {
                    let r = &l.region;
                    if crate::ibverbs::serve_lease(s, r.ptr, r.len, &r.verbs_mr, req.offset)? {
                        held.lease = Some(l);
                    }
                    Ok(())
                }
                Err(e) => conn::send_status(s, &Err(e.message)),
            }
        }
        conn::OP_RELEASE => {
            held.lease = None;
            conn::send_status(s, &Ok(()))
        }
        conn::OP_DROP => {
            let r = registry::unref(req.id, req.key).map(|_| ());
            conn::send_status(s, &r.map_err(|e| e.message))
        }
        op => conn::send_status(s, &Err(format!("unknown data-plane request {op}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tcp_listener_binds_the_control_plane_address_not_every_interface() {
        // (`MONARCH_RDMA_BIND`/`_HOST` unset: the defaults are tested.)
        let (tls, advertised) = listen_tcp("tcp:127.0.0.1:4000").unwrap();
        assert_eq!(tls.len(), 1);
        let bound = tls[0].local_addr().unwrap();
        assert_eq!(bound.ip(), std::net::IpAddr::from([127, 0, 0, 1]));
        assert_eq!(advertised, "127.0.0.1");
        // A proc reached over a Unix socket: the advertised interface, and
        // loopback for readers on this host.
        let (tls, advertised) = listen_tcp("unix:/tmp/p1.sock").unwrap();
        let bound: Vec<_> = tls.iter().map(|l| l.local_addr().unwrap()).collect();
        assert!(
            bound.iter().all(|a| !a.ip().is_unspecified()),
            "bound to {bound:?}"
        );
        assert_eq!(bound[0].ip().to_string(), advertised);
        assert!(bound.iter().any(|a| a.ip().is_loopback()), "{bound:?}");
        assert!(
            bound.iter().all(|a| a.port() == bound[0].port()),
            "{bound:?}"
        );
        // A control plane on every interface does not widen the data plane.
        assert_eq!(control_plane_ip("tcp:0.0.0.0:4000"), None);
    }
}
