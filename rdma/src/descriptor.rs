//! The buffer descriptor: what a buffer handle becomes inside a message.
//!
//! It names the owner proc and the registration (id plus a random key, so a
//! stale descriptor never matches a later registration that reused the id),
//! the size, and what each backend needs to reach the memory: the host
//! identity, pid and address for the same-host backend, the owner's
//! data-plane socket paths and TCP address. Encoding: `MRDB`, a version
//! byte, then fixed-width little-endian integers and length-prefixed UTF-8
//! strings. Decoding checks every length, so malformed bytes are an error,
//! never a panic.

use monarch_core::{Error, Result};

const MAGIC: &[u8; 4] = b"MRDB";
const VERSION: u8 = 1;

/// Backends the owner offers (bit set in `Descriptor::backends`).
pub const OFFER_SAME_HOST: u32 = 1;
pub const OFFER_TCP: u32 = 2;
pub const OFFER_IBVERBS: u32 = 4;

/// What a message carries for a buffer: enough for any proc of the job to
/// reach the owner's registration on every backend the owner offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    /// Control-plane address of the owner proc (for messages and errors).
    pub owner: String,
    /// Registration id in the owner.
    pub id: u64,
    /// The registration's random key (a stale descriptor never matches a
    /// later registration under the same id).
    pub key: u64,
    /// Size in bytes.
    pub size: u64,
    /// Whether the owner accepts writes into the buffer.
    pub writable: bool,
    /// Backends offered (`OFFER_*` bits).
    pub backends: u32,
    /// Identity of the owner's host and pid namespace (same-host backend).
    pub host: String,
    /// The owner's pid.
    pub pid: u32,
    /// The buffer's address in the owner's memory.
    pub addr: u64,
    /// The owner's data-plane Unix socket (same-host leases).
    pub unix_path: String,
    /// The owner's data-plane TCP address, `ip:port`.
    pub tcp_addr: String,
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.b.len() < n {
            return Err(Error::invalid(
                "malformed RDMA buffer descriptor (truncated)",
            ));
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().unwrap_or([0; 8]),
        ))
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().unwrap_or([0; 4]),
        ))
    }
    fn str(&mut self) -> Result<String> {
        let n = self.u32()? as usize;
        let b = self.take(n)?;
        String::from_utf8(b.to_vec())
            .map_err(|_| Error::invalid("malformed RDMA buffer descriptor (bad string)"))
    }
}

impl Descriptor {
    /// The bytes a message carries (read back by [`Descriptor::decode`]).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128 + self.unix_path.len() + self.owner.len());
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.push(self.writable as u8);
        out.extend_from_slice(&self.id.to_le_bytes());
        out.extend_from_slice(&self.key.to_le_bytes());
        out.extend_from_slice(&self.size.to_le_bytes());
        out.extend_from_slice(&self.backends.to_le_bytes());
        out.extend_from_slice(&self.pid.to_le_bytes());
        out.extend_from_slice(&self.addr.to_le_bytes());
        put_str(&mut out, &self.owner);
        put_str(&mut out, &self.host);
        put_str(&mut out, &self.unix_path);
        put_str(&mut out, &self.tcp_addr);
        out
    }

    /// Parse [`Descriptor::encode`]'s bytes; malformed input is an
    /// `InvalidArgument` error.
    pub fn decode(b: &[u8]) -> Result<Descriptor> {
        let mut r = Reader { b };
        if r.take(4)? != MAGIC {
            return Err(Error::invalid(
                "bytes are not an RDMA buffer descriptor (bad magic)",
            ));
        }
        let v = r.take(1)?[0];
        if v != VERSION {
            return Err(Error::invalid(format!(
                "RDMA buffer descriptor version {v} is not supported (this library knows {VERSION})"
            )));
        }
        let writable = r.take(1)?[0] != 0;
        let d = Descriptor {
            writable,
            id: r.u64()?,
            key: r.u64()?,
            size: r.u64()?,
            backends: r.u32()?,
            pid: r.u32()?,
            addr: r.u64()?,
            owner: r.str()?,
            host: r.str()?,
            unix_path: r.str()?,
            tcp_addr: r.str()?,
        };
        if !r.b.is_empty() {
            return Err(Error::invalid(
                "malformed RDMA buffer descriptor (trailing bytes)",
            ));
        }
        Ok(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_rejects_garbage() {
        let d = Descriptor {
            owner: "unix:/tmp/x/p1.sock".into(),
            id: 7,
            key: 0xdead_beef,
            size: 1 << 30,
            writable: true,
            backends: OFFER_SAME_HOST | OFFER_TCP,
            host: "boot:123".into(),
            pid: 42,
            addr: 0x7fff_0000,
            unix_path: "/tmp/x/p1.sock.data".into(),
            tcp_addr: "127.0.0.1:4000".into(),
        };
        let b = d.encode();
        assert_eq!(Descriptor::decode(&b).unwrap(), d);
        for n in 0..b.len() {
            assert!(Descriptor::decode(&b[..n]).is_err(), "prefix {n}");
        }
        let mut extra = b.clone();
        extra.push(0);
        assert!(Descriptor::decode(&extra).is_err());
        assert!(Descriptor::decode(b"hello world").is_err());
    }
}
