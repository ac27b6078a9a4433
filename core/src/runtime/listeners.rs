//! `Listeners`: the sockets this proc accepts connections on. Its own
//! address; a TCP listener opened when the runtime first needs to be
//! reached from other hosts; and, for a proc on a TCP address, a Unix
//! socket alias for procs of the same host.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use crate::error::{Error, Result};
use crate::transport::Listener;

/// Where a new runtime listens.
pub(super) enum Listen {
    /// Bind this address (its actual address becomes our identity).
    Bind(String),
    /// Adopt an inherited listening TCP socket; `String` is our identity.
    Fd(i32, String),
    /// Bind this TCP address but be known as `tcp:<advertise>:<port>`.
    Advertise(String, std::net::IpAddr),
}

pub(super) struct Listeners {
    /// The listener at this proc's address.
    main: Listener,
    /// The TCP listener for other hosts (a controller attaching host
    /// agents), and its port.
    tcp: OnceLock<(Arc<Listener>, u16)>,
    /// The same-host Unix socket of a proc on a TCP address (path, listener).
    unix_alias: OnceLock<(PathBuf, Arc<Listener>)>,
}

impl Listeners {
    /// Open the listener `listen` names; returns it with this proc's address.
    pub(super) fn bind(listen: Listen) -> Result<(Listeners, String)> {
        let (main, addr) = match listen {
            Listen::Bind(addr) => Listener::bind(&addr)?,
            // SAFETY: the agent that started us handed this descriptor over
            // for exactly this purpose; nothing else in the process owns it.
            Listen::Fd(fd, addr) => (unsafe { Listener::from_tcp_fd(fd) }, addr),
            Listen::Advertise(bind, ip) => {
                let (l, actual) = Listener::bind(&bind)?;
                let port = actual.rsplit(':').next().unwrap_or("0").to_string();
                let ip = match ip {
                    std::net::IpAddr::V6(v6) => format!("[{v6}]"),
                    v4 => v4.to_string(),
                };
                (l, format!("tcp:{ip}:{port}"))
            }
        };
        let listeners = Listeners {
            main,
            tcp: OnceLock::new(),
            unix_alias: OnceLock::new(),
        };
        Ok((listeners, addr))
    }

    /// The listener at this proc's address.
    pub(super) fn main(&self) -> &Listener {
        &self.main
    }

    /// For a proc at TCP address `addr`, open its same-host Unix socket;
    /// the caller accepts on it. None when there is none to open.
    pub(super) fn open_unix_alias(&self, addr: &str) -> Option<Arc<Listener>> {
        let path = crate::transport::same_host_path(addr, addr)?;
        // Ours alone while we hold the TCP port: a file left by an earlier
        // proc on this port is stale.
        let _ = std::fs::remove_file(&path);
        match Listener::bind(&format!("unix:{}", path.display())) {
            Ok((l, _)) => {
                let l = Arc::new(l);
                let _ = self.unix_alias.set((path, l.clone()));
                Some(l)
            }
            Err(e) => {
                tracing::warn!(error = %e, "no same-host Unix socket; peers use TCP");
                None
            }
        }
    }

    /// The port of our TCP listener, opening it the first time (bound to
    /// `MONARCH_BIND_ADDR`, default all interfaces); `accept` starts
    /// accepting on a newly opened one.
    pub(super) fn tcp_port(&self, accept: impl FnOnce(Arc<Listener>) -> Result<()>) -> Result<u16> {
        if let Some((_, port)) = self.tcp.get() {
            return Ok(*port);
        }
        let bind = std::env::var("MONARCH_BIND_ADDR").unwrap_or_else(|_| "0.0.0.0:0".into());
        let (l, actual) = Listener::bind(&format!("tcp:{bind}"))?;
        let port: u16 = actual
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        let l = Arc::new(l);
        if self.tcp.set((l.clone(), port)).is_err() {
            // Another thread won the race; ours is dropped unused.
            return Ok(self.tcp.get().expect("set").1);
        }
        accept(l)?;
        Ok(port)
    }

    /// Stop accepting (wakes the accept threads) and remove the Unix alias.
    pub(super) fn shutdown(&self) {
        self.main.shutdown();
        if let Some((l, _)) = self.tcp.get() {
            l.shutdown();
        }
        if let Some((path, l)) = self.unix_alias.get() {
            l.shutdown();
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Start a thread named `name` accepting connections on `l` for `rt`.
pub(super) fn spawn_accept(rt: &Arc<super::Inner>, name: &str, l: Arc<Listener>) -> Result<()> {
    let acc = rt.clone();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || acc.accept_loop(&l))
        .map(|_| ())
        .map_err(|e| Error::io("cannot start accept thread", e))
}
