//! `Listeners`: the sockets this proc accepts connections on. Its own
//! address; a TCP listener opened when the runtime first needs to be
//! reached from other hosts; and, for a proc on a TCP address, a Unix
//! socket alias for procs of the same host. All are non-blocking and
//! served by the one accept thread (`handshakes`), which a signal on
//! [`Listeners::changed_fd`] sends to look at them again.

use std::path::PathBuf;
use std::sync::OnceLock;

use crate::error::{Error, Result};
use crate::eventfd::EventFd;
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
    tcp: OnceLock<(Listener, u16)>,
    /// The same-host Unix socket of a proc on a TCP address (path, listener).
    unix_alias: OnceLock<(PathBuf, Listener)>,
    /// Readable when a listener was opened or all were shut down.
    changed: EventFd,
}

/// A listener that only the accept thread's `poll` waits on.
fn nonblocking(l: Listener) -> Result<Listener> {
    l.set_nonblocking(true)
        .map_err(|e| Error::io("cannot make a listener non-blocking", e))?;
    Ok(l)
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
            main: nonblocking(main)?,
            tcp: OnceLock::new(),
            unix_alias: OnceLock::new(),
            changed: EventFd::new().map_err(|e| Error::io("eventfd", e))?,
        };
        Ok((listeners, addr))
    }

    /// Every open listener.
    pub(super) fn all(&self) -> Vec<&Listener> {
        let mut all = vec![&self.main];
        all.extend(self.tcp.get().map(|(l, _)| l));
        all.extend(self.unix_alias.get().map(|(_, l)| l));
        all
    }

    /// Readable when the set of listeners changed (`poll` it, then
    /// [`Listeners::seen_change`]).
    pub(super) fn changed_fd(&self) -> i32 {
        self.changed.fd()
    }

    /// Make [`Listeners::changed_fd`] not readable.
    pub(super) fn seen_change(&self) {
        self.changed.drain();
    }

    /// For a proc at TCP address `addr`, open its same-host Unix socket
    /// (when there is one to open).
    pub(super) fn open_unix_alias(&self, addr: &str) {
        let Some(path) = crate::transport::same_host_path(addr, addr) else {
            return;
        };
        // Ours alone while we hold the TCP port: a file left by an earlier
        // proc on this port is stale.
        let _ = std::fs::remove_file(&path);
        match Listener::bind(&format!("unix:{}", path.display())).and_then(|(l, _)| nonblocking(l))
        {
            Ok(l) => {
                let _ = self.unix_alias.set((path, l));
                self.changed.signal();
            }
            Err(e) => {
                tracing::warn!(error = %e, "no same-host Unix socket; peers use TCP");
            }
        }
    }

    /// The port of our TCP listener, opening it the first time (bound to
    /// `MONARCH_BIND_ADDR`, default all interfaces).
    pub(super) fn tcp_port(&self) -> Result<u16> {
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
        if self.tcp.set((nonblocking(l)?, port)).is_err() {
            // Another thread won the race; ours is dropped unused.
            return Ok(self.tcp.get().expect("set").1);
        }
        self.changed.signal();
        Ok(port)
    }

    /// Stop accepting (wakes the accept thread) and remove the Unix alias.
    pub(super) fn shutdown(&self) {
        self.main.shutdown();
        if let Some((l, _)) = self.tcp.get() {
            l.shutdown();
        }
        if let Some((path, l)) = self.unix_alias.get() {
            l.shutdown();
            let _ = std::fs::remove_file(path);
        }
        self.changed.signal();
    }
}
