//! TCP backend: transfers on dedicated data connections to the owner's
//! data-plane listener (never the control connection), each authenticated
//! with the job token. A transfer larger than `STRIPE_MIN` is cut into
//! stripes sent in parallel over several connections (one thread each),
//! `MONARCH_RDMA_TCP_STREAMS` at most (default: 4, or the number of CPUs
//! when fewer). The owner's server copies straight between the socket and
//! the registered memory; the reader's side straight into its destination.

use crate::conn::{self, Request};
use crate::descriptor::Descriptor;
use monarch_core::Result;

/// Transfers below this size use one connection.
const STRIPE_MIN: usize = 8 << 20;

fn max_streams() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        std::env::var("MONARCH_RDMA_TCP_STREAMS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|n| *n > 0)
            .unwrap_or_else(|| {
                std::thread::available_parallelism()
                    .map(|n| n.get())
                    .unwrap_or(2)
                    .min(4)
            })
    })
}

/// The TCP target for `d`: loopback when the owner is on this host.
pub fn target(d: &Descriptor, same_host: bool) -> String {
    if same_host {
        if let Some((_, port)) = d.tcp_addr.rsplit_once(':') {
            return format!("tcp:127.0.0.1:{port}");
        }
    }
    format!("tcp:{}", d.tcp_addr)
}

/// One stripe: `len` bytes at `offset` of the buffer <-> `local`.
fn stripe(
    target: &str,
    token: &str,
    d: &Descriptor,
    offset: u64,
    local: usize,
    len: usize,
    write: bool,
) -> Result<()> {
    let mut s = conn::get(target, token, &d.owner)?;
    let req = Request {
        op: if write { conn::OP_WRITE } else { conn::OP_READ },
        id: d.id,
        key: d.key,
        offset,
        len: len as u64,
    };
    let what = if write { "write" } else { "read" };
    match conn::request(&mut s, &req, &d.owner, what) {
        Ok(()) => {}
        Err(e) => {
            // A refusal leaves the connection usable; a broken one is not.
            if e.kind == monarch_core::ErrorKind::InvalidArgument {
                conn::put(target, s);
            } else {
                conn::forget(target);
            }
            return Err(e);
        }
    }
    let r = if write {
        // SAFETY: the caller guarantees `local` is readable for `len` bytes.
        let src = unsafe { std::slice::from_raw_parts(local as *const u8, len) };
        conn::write_bulk(&mut s, src)
            .map_err(|e| conn::lost(&d.owner, what, e))
            .and_then(|_| match conn::recv_status(&mut s) {
                Ok(Ok(())) => Ok(()),
                Ok(Err(m)) => Err(monarch_core::Error::invalid(m)),
                Err(e) => Err(conn::lost(&d.owner, what, e)),
            })
    } else {
        // SAFETY: the caller guarantees `local` is writable for `len` bytes.
        let dst = unsafe { std::slice::from_raw_parts_mut(local as *mut u8, len) };
        conn::read_bulk(&mut s, dst).map_err(|e| conn::lost(&d.owner, what, e))
    };
    match r {
        Ok(()) => {
            conn::put(target, s);
            Ok(())
        }
        Err(e) => {
            conn::forget(target);
            Err(e)
        }
    }
}

/// Copy `len` bytes between the buffer (from `offset`) and `local`.
pub fn transfer(
    d: &Descriptor,
    token: &str,
    same_host: bool,
    offset: u64,
    local: usize,
    len: usize,
    write: bool,
) -> Result<()> {
    let target = target(d, same_host);
    let n = (len / STRIPE_MIN).clamp(1, max_streams());
    if n == 1 {
        return stripe(&target, token, d, offset, local, len, write);
    }
    // Stripe boundaries on 64 KiB multiples.
    let per = (len / n).div_ceil(64 << 10) * (64 << 10);
    std::thread::scope(|sc| {
        let mut handles = Vec::with_capacity(n);
        let mut at = 0usize;
        while at < len {
            let l = per.min(len - at);
            let t = target.as_str();
            handles.push(
                sc.spawn(move || stripe(t, token, d, offset + at as u64, local + at, l, write)),
            );
            at += l;
        }
        let mut first_err = None;
        for h in handles {
            let r = h.join().unwrap_or_else(|_| {
                Err(monarch_core::Error::new(
                    monarch_core::ErrorKind::Internal,
                    "a TCP stripe thread panicked",
                ))
            });
            if let Err(e) = r {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    })
}
