//! Data-plane tests between real processes: this test binary re-executes
//! itself as the buffer's owner (the `owner_child` "test" does the owner's
//! work when `RDMA_TEST_OWNER` is set), so every transfer crosses a process
//! boundary the way it does between procs.

use std::process::Command;
use std::time::{Duration, Instant};

use monarch_core::ErrorKind;
use monarch_rdma::{self as rdma, Backend, Buffer};

mod common;
use common::{pattern, serve_owner_if_asked, Owner};

const TOKEN: &str = "rdma-test-token";

/// The owner side (see `common`), when this binary runs as the owner.
#[test]
fn owner_child() {
    serve_owner_if_asked(OWNER_VAR, TOKEN, "unix:owner-child");
}

const OWNER_VAR: &str = "RDMA_TEST_OWNER";

fn start_owner(size: usize) -> Owner {
    Owner::start(OWNER_VAR, size, |_| {})
}

fn setup() {
    rdma::init(TOKEN, "unix:test-reader");
}

fn check_read(buf: &Buffer, off: usize, len: usize) {
    let mut dst = vec![0xEEu8; len + 16];
    buf.read_into(off as u64, dst.as_mut_ptr() as usize, len)
        .unwrap();
    for (i, &b) in dst[..len].iter().enumerate() {
        assert_eq!(b, pattern(off + i), "byte {i} of read at {off}+{len}");
    }
    assert!(
        dst[len..].iter().all(|&b| b == 0xEE),
        "bytes past the read changed"
    );
}

fn backends() -> [Backend; 2] {
    [Backend::SameHost, Backend::Tcp]
}

#[test]
fn reads_are_byte_exact_at_offsets_and_sizes() {
    setup();
    let size = 24 << 20;
    let owner = start_owner(size);
    for b in backends() {
        let buf = owner.handle_via(b);
        assert_eq!(buf.size(), size as u64);
        for (off, len) in [
            (0, 1),
            (1, 4095),
            (4093, 4096 + 7),
            (0, size), // whole buffer: TCP stripes it
            (size - 3, 3),
            (12345, 9 << 20), // striped, unaligned
        ] {
            check_read(&buf, off, len);
        }
        assert_eq!(buf.backend().unwrap(), b);
    }
}

#[test]
fn writes_land_in_the_owner_memory() {
    setup();
    let size = 20 << 20;
    let mut owner = start_owner(size);
    for (k, b) in backends().into_iter().enumerate() {
        let buf = owner.handle_via(b);
        let off = 1000 + k * (10 << 20);
        let len = 9 << 20;
        let v = (7 + k) as u8;
        let src = vec![v; len];
        buf.write_from(off as u64, src.as_ptr() as usize, len)
            .unwrap();
        let want = format!("sum {} {v}", v as u64 * len as u64);
        assert_eq!(owner.ask(&format!("sum {off} {len}")), want, "{b:?}");
        // Bytes just before the write are untouched.
        let before = owner.ask(&format!("sum {} 1", off - 1));
        assert_eq!(before, format!("sum {0} {0}", pattern(off - 1)));
        // And a read sees the write.
        let mut back = vec![0u8; len];
        buf.read_into(off as u64, back.as_mut_ptr() as usize, len)
            .unwrap();
        assert!(back.iter().all(|&x| x == v));
    }
}

#[test]
fn many_concurrent_transfers() {
    setup();
    let size = 8 << 20;
    let owner = start_owner(size);
    for b in backends() {
        let buf = owner.handle_via(b);
        std::thread::scope(|s| {
            for t in 0..24 {
                let buf = &buf;
                s.spawn(move || {
                    for k in 0..4 {
                        let off = (t * 65_537 + k * 1_000_003) % (size - 300_000);
                        check_read(buf, off, 250_000 + t);
                    }
                });
            }
        });
    }
}

#[test]
fn out_of_range_and_wrong_size_are_refused() {
    setup();
    let owner = start_owner(1 << 20);
    for b in backends() {
        let buf = owner.handle_via(b);
        let mut dst = vec![0u8; 2 << 20];
        let e = buf
            .read_into(0, dst.as_mut_ptr() as usize, (1 << 20) + 1)
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
        assert!(e.message.contains("outside"), "{}", e.message);
        let e = buf
            .read_into(u64::MAX, dst.as_mut_ptr() as usize, 2)
            .unwrap_err();
        assert!(e.message.contains("outside"), "{}", e.message);
    }
}

#[test]
fn dropped_buffer_is_refused_by_owner_and_handle() {
    setup();
    let mut owner = start_owner(1 << 20);
    let bufs: Vec<_> = backends()
        .into_iter()
        .map(|b| owner.handle_via(b))
        .collect();
    for b in &bufs {
        check_read(b, 0, 4096);
    }
    assert_eq!(owner.ask("drop"), "dropped");
    for b in &bufs {
        let mut dst = vec![0u8; 4096];
        let e = b.read_into(0, dst.as_mut_ptr() as usize, 4096).unwrap_err();
        assert_eq!(
            e.kind,
            ErrorKind::InvalidArgument,
            "{:?}: {}",
            b.backend(),
            e.message
        );
        assert!(e.message.contains("not registered"), "{}", e.message);
    }
    // A handle dropped locally refuses use without asking anyone.
    let h = owner.handle_via(Backend::Tcp);
    assert!(h.drop_buffer().is_ok()); // the owner already released it: still fine
    let mut dst = vec![0u8; 16];
    let e = h.read_into(0, dst.as_mut_ptr() as usize, 16).unwrap_err();
    assert!(e.message.contains("was dropped"), "{}", e.message);
    assert!(h.drop_buffer().is_err());
}

#[test]
fn remote_drop_releases_the_owner_registration() {
    setup();
    let owner = start_owner(1 << 20);
    let a = owner.handle_via(Backend::SameHost);
    let b = owner.handle_via(Backend::Tcp);
    check_read(&b, 0, 100);
    a.drop_buffer().unwrap();
    let mut dst = vec![0u8; 100];
    let e = b.read_into(0, dst.as_mut_ptr() as usize, 100).unwrap_err();
    assert!(e.message.contains("not registered"), "{}", e.message);
}

#[test]
fn dead_owner_fails_cleanly() {
    setup();
    for b in backends() {
        let mut owner = start_owner(1 << 20);
        let buf = owner.handle_via(b);
        check_read(&buf, 0, 1000);
        owner.kill();
        let mut dst = vec![0u8; 1000];
        let t = Instant::now();
        let e = buf
            .read_into(0, dst.as_mut_ptr() as usize, 1000)
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::ProcFailed, "{b:?}: {}", e.message);
        assert!(t.elapsed() < Duration::from_secs(30));
    }
}

#[test]
fn owner_dying_mid_transfer_fails_cleanly() {
    setup();
    let size = 256 << 20;
    for b in backends() {
        let mut owner = start_owner(size);
        let buf = owner.handle_via(b);
        let pid = owner.child.id();
        let reader = std::thread::spawn(move || {
            let mut dst = vec![0u8; size];
            let t = Instant::now();
            // Keep transferring until one fails (the owner is killed below).
            loop {
                if let Err(e) = buf.read_into(0, dst.as_mut_ptr() as usize, size) {
                    return (e, t.elapsed());
                }
                if t.elapsed() > Duration::from_secs(60) {
                    panic!("transfers kept succeeding after the owner was killed");
                }
            }
        });
        std::thread::sleep(Duration::from_millis(300));
        // SAFETY: killing our own child.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        let (e, _) = reader.join().unwrap();
        assert_eq!(e.kind, ErrorKind::ProcFailed, "{b:?}: {}", e.message);
        owner.kill();
    }
}

#[test]
fn wrong_token_is_refused() {
    // A separate process, so this test's token does not leak into others.
    if std::env::var("RDMA_TEST_WRONG_TOKEN").is_err() {
        let owner = start_owner(4096);
        let hex: String = owner.desc.iter().map(|b| format!("{b:02x}")).collect();
        let st = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "wrong_token_is_refused",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("RDMA_TEST_WRONG_TOKEN", hex)
            .status()
            .unwrap();
        assert!(st.success());
        return;
    }
    let hex = std::env::var("RDMA_TEST_WRONG_TOKEN").unwrap();
    let desc: Vec<u8> = (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    rdma::init("not-the-job-token", "unix:intruder");
    for b in backends() {
        let buf = Buffer::from_bytes(None, &desc).unwrap();
        buf.set_backend(b);
        let mut dst = vec![0u8; 16];
        let e = buf.read_into(0, dst.as_mut_ptr() as usize, 16).unwrap_err();
        assert!(e.message.contains("authentication"), "{b:?}: {}", e.message);
    }
}

#[test]
fn selection_falls_back_when_ibverbs_is_absent() {
    setup();
    let probe = rdma::ibverbs::probe();
    assert!(!probe.available, "this machine has no RDMA device");
    assert!(!probe.reason.is_empty());
    let owner = start_owner(4096);
    let buf = Buffer::from_bytes(None, &owner.desc).unwrap();
    assert_eq!(buf.choose_with(None), Backend::SameHost);
    assert_eq!(buf.choose_with(Some(Backend::Ibverbs)), Backend::SameHost);
    assert_eq!(buf.choose_with(Some(Backend::Tcp)), Backend::Tcp);
    assert_eq!(buf.choose_with(Some(Backend::SameHost)), Backend::SameHost);
    // An owner on another host: same-host is impossible, TCP is chosen.
    let mut d = rdma::Descriptor::decode(&owner.desc).unwrap();
    d.host = "another-host".into();
    let far = Buffer::from_bytes(None, &d.encode()).unwrap();
    assert_eq!(far.choose_with(None), Backend::Tcp);
    assert_eq!(far.choose_with(Some(Backend::SameHost)), Backend::Tcp);
    assert_eq!(far.choose_with(Some(Backend::Ibverbs)), Backend::Tcp);
}

#[test]
fn own_buffer_round_trip_in_process() {
    setup();
    let mut mem: Vec<u8> = (0..100_000).map(pattern).collect();
    let buf = rdma::register(None, mem.as_mut_ptr() as usize, mem.len(), true, 1).unwrap();
    let h = Buffer::from_bytes(None, &buf.to_bytes().unwrap()).unwrap();
    for b in backends() {
        h.set_backend(b);
        check_read(&h, 10, 99_000);
    }
    drop(buf);
    let mut dst = vec![0u8; 10];
    assert!(h.read_into(0, dst.as_mut_ptr() as usize, 10).is_err());
    drop(mem);
}
