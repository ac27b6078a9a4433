//! What the data-plane tests share: the buffer's owner runs in a child
//! process (the test binary re-executed, its `owner_child` "test" serving
//! when the binary's owner variable is set), so every transfer crosses a
//! process boundary as it does between procs.
//!
//! The owner's protocol on stdin/stdout: it prints `desc <hex>` for its
//! buffer (filled with [`pattern`]), then obeys `drop` (prints `dropped`)
//! and `sum <off> <len>` (prints the bytes' sum and first byte), and exits
//! at EOF.

// Each test binary uses its own part of this module.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use monarch_rdma::{self as rdma, Backend, Buffer};

/// The byte at offset `i` of every owner's buffer.
pub fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(131) ^ (i >> 9)) as u8
}

/// The owner side: when `var` holds a size, register that many bytes
/// (runtime `token`, address `addr`), serve the protocol and exit;
/// otherwise return at once (the binary runs as a test).
pub fn serve_owner_if_asked(var: &str, token: &str, addr: &str) {
    let Ok(size) = std::env::var(var) else {
        return;
    };
    let size: usize = size.parse().unwrap();
    rdma::init(token, addr);
    let mut mem: Vec<u8> = (0..size).map(pattern).collect();
    let buf = rdma::register(None, mem.as_mut_ptr() as usize, size, true, 1).unwrap();
    let hex: String = buf
        .to_bytes()
        .unwrap()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let mut out = std::io::stdout().lock();
    writeln!(out, "desc {hex}").unwrap();
    out.flush().unwrap();
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        match line.split_whitespace().collect::<Vec<_>>().as_slice() {
            ["drop"] => {
                buf.drop_buffer().unwrap();
                writeln!(out, "dropped").unwrap();
            }
            ["sum", off, len] => {
                let (o, l): (usize, usize) = (off.parse().unwrap(), len.parse().unwrap());
                // Read through the Vec: peers may have written into it.
                let s: u64 = mem[o..o + l].iter().map(|&b| b as u64).sum();
                writeln!(out, "sum {s} {}", mem[o]).unwrap();
            }
            _ => {}
        }
        out.flush().unwrap();
    }
    drop(buf);
    drop(mem);
    std::process::exit(0);
}

/// An owner child process, seen from the test.
pub struct Owner {
    pub child: Child,
    stdin: Option<ChildStdin>,
    out: BufReader<std::process::ChildStdout>,
    /// Its buffer's descriptor (what a message would carry).
    pub desc: Vec<u8>,
}

impl Owner {
    /// Start an owner of `size` bytes: this binary with `var` set;
    /// `configure` adds to its environment.
    pub fn start(var: &str, size: usize, configure: impl FnOnce(&mut Command)) -> Owner {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", "owner_child", "--nocapture", "--test-threads=1"])
            .env(var, size.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        configure(&mut cmd);
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let desc = loop {
            let mut line = String::new();
            assert!(out.read_line(&mut line).unwrap() > 0, "owner exited early");
            // libtest prints "test owner_child ... " before our output.
            if let Some(h) = line.trim().split("desc ").nth(1) {
                break (0..h.len() / 2)
                    .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap())
                    .collect();
            }
        };
        Owner {
            child,
            stdin,
            out,
            desc,
        }
    }

    /// Send one protocol line, return the answer line.
    pub fn ask(&mut self, cmd: &str) -> String {
        let s = self.stdin.as_mut().unwrap();
        writeln!(s, "{cmd}").unwrap();
        s.flush().unwrap();
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        line.trim().to_string()
    }

    /// A handle on the owner's buffer (backend chosen as usual).
    pub fn handle(&self) -> Arc<Buffer> {
        Buffer::from_bytes(None, &self.desc).unwrap()
    }

    /// A handle on the owner's buffer that uses `backend`.
    pub fn handle_via(&self, backend: Backend) -> Arc<Buffer> {
        let b = self.handle();
        b.set_backend(backend);
        b
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Owner {
    /// EOF on stdin ends the owner; one that does not end in 10 s is killed.
    fn drop(&mut self) {
        self.stdin.take();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.kill();
    }
}
