//! The ibverbs backend against a fake provider library
//! (`tests/fake_ibverbs/fake_ibverbs.c`, compiled here with `cc`): no RDMA
//! hardware, but libmonarch's real code path: run-time loading, symbol
//! resolution (`ibv_reg_mr` and the `ibv_reg_mr_iova2`-only variant), the
//! device and port probe, queue-pair creation and the RESET→INIT→RTR→RTS
//! transitions, the QP-info exchange over the owner's data connection,
//! lazy memory registration in the owner, RDMA READ/WRITE work requests
//! through `ctx->ops.post_send`, completions through `ctx->ops.poll_cq`,
//! leases, refusals, a dead owner, and the fallback to TCP when queue pairs
//! cannot connect. The fake "executes" a work request with
//! process_vm_readv/writev into the peer whose pid its GID carries.
//!
//! Like `rdma.rs`, this binary re-executes itself as the buffer's owner.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Once;
use std::time::{Duration, Instant};

use monarch_core::ErrorKind;
use monarch_rdma::{self as rdma, Backend, Buffer};

mod common;
use common::{pattern, serve_owner_if_asked, Owner};

const TOKEN: &str = "rdma-verbs-test-token";

fn fake_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fake-ibverbs")
}

/// The fake library variant `name` (built by [`build_fakes`]).
fn fake(name: &str) -> String {
    fake_dir().join(format!("{name}.so")).display().to_string()
}

/// Build every variant of the fake library once per test process, and make
/// this process (and the owners it starts) load the working one.
fn setup() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if std::env::var("RDMA_VERBS_OWNER").is_err() {
            let src =
                PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fake_ibverbs/fake_ibverbs.c");
            std::fs::create_dir_all(fake_dir()).unwrap();
            for (name, def) in [
                ("ok", ""),
                ("nodev", "-DFAKE_NO_DEVICES"),
                ("down", "-DFAKE_PORT_DOWN"),
                ("iova2", "-DFAKE_ONLY_IOVA2"),
                ("broken", "-DFAKE_BROKEN_RTR"),
            ] {
                let tmp = fake_dir().join(format!("{name}.so.{}", std::process::id()));
                let mut cmd = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()));
                cmd.args(["-shared", "-fPIC", "-O1", "-o"])
                    .arg(&tmp)
                    .arg(&src);
                if !def.is_empty() {
                    cmd.arg(def);
                }
                let st = cmd
                    .status()
                    .expect("a C compiler (cc) is needed for the ibverbs tests");
                assert!(st.success(), "building the fake libibverbs ({name}) failed");
                std::fs::rename(&tmp, fake(name)).unwrap();
            }
            // Before anything probes (the probe runs once per process).
            std::env::set_var("MONARCH_IBVERBS_LIB", fake("ok"));
        }
        rdma::init(TOKEN, "unix:verbs-test-reader");
    });
}

/// The owner side (see `common`), when this binary runs as the owner.
#[test]
fn owner_child() {
    serve_owner_if_asked(OWNER_VAR, TOKEN, "unix:verbs-owner-child");
}

const OWNER_VAR: &str = "RDMA_VERBS_OWNER";

/// An owner loading the fake variant `lib`.
fn start_owner(size: usize, lib: &str) -> Owner {
    Owner::start(OWNER_VAR, size, |cmd| {
        cmd.env("MONARCH_IBVERBS_LIB", fake(lib));
    })
}

fn check_read(buf: &Buffer, off: usize, len: usize) -> Backend {
    let mut dst = vec![0xEEu8; len + 16];
    let b = buf
        .read_into(off as u64, dst.as_mut_ptr() as usize, len)
        .unwrap();
    for (i, &x) in dst[..len].iter().enumerate() {
        assert_eq!(x, pattern(off + i), "byte {i} of read at {off}+{len}");
    }
    assert!(
        dst[len..].iter().all(|&x| x == 0xEE),
        "bytes past the read changed"
    );
    b
}

#[test]
fn probe_reports_each_missing_piece() {
    setup();
    let p = rdma::ibverbs::probe_library(&fake("nodev"));
    assert!(!p.available);
    assert!(p.devices.is_empty());
    assert!(p.reason.contains("there is no RDMA device"), "{}", p.reason);
    let p = rdma::ibverbs::probe_library(&fake("down"));
    assert!(!p.available);
    assert_eq!(p.devices, vec!["fakeib0".to_string()]);
    assert!(p.reason.contains("is not active"), "{}", p.reason);
    for lib in ["ok", "iova2"] {
        let p = rdma::ibverbs::probe_library(&fake(lib));
        assert!(p.available, "{lib}: {}", p.reason);
        assert!(p.reason.contains("fakeib0"), "{}", p.reason);
    }
    // This process loaded the working fake.
    assert!(
        rdma::ibverbs::probe().available,
        "{}",
        rdma::ibverbs::probe().reason
    );
}

#[test]
fn verbs_is_chosen_when_both_sides_have_a_device() {
    setup();
    let owner = start_owner(4096, "ok");
    let buf = owner.handle();
    assert_eq!(buf.choose_with(None), Backend::Ibverbs);
    assert_eq!(buf.choose_with(Some(Backend::Tcp)), Backend::Tcp);
    assert_eq!(buf.choose_with(Some(Backend::SameHost)), Backend::SameHost);
    // An owner without a device does not offer it: same-host is used.
    let plain = start_owner(4096, "nodev");
    assert_eq!(plain.handle().choose_with(None), Backend::SameHost);
    assert_eq!(
        plain.handle().choose_with(Some(Backend::Ibverbs)),
        Backend::SameHost
    );
}

#[test]
fn reads_are_byte_exact_at_offsets_and_sizes() {
    setup();
    let size = 24 << 20;
    // The owner registers with ibv_reg_mr_iova2 (no ibv_reg_mr symbol).
    for lib in ["ok", "iova2"] {
        let owner = start_owner(size, lib);
        let buf = owner.handle();
        for (off, len) in [
            (0, 1),
            (0, 4096),
            (17, 1000),
            (size - 5, 5),
            (3, size - 3),
            (0, size),
        ] {
            assert_eq!(
                check_read(&buf, off, len),
                Backend::Ibverbs,
                "{lib} {off}+{len}"
            );
        }
    }
}

#[test]
fn writes_land_in_the_owner_memory() {
    setup();
    let mut owner = start_owner(20 << 20, "ok");
    let buf = owner.handle();
    let src = vec![3u8; 9 << 20];
    let b = buf
        .write_from(1000, src.as_ptr() as usize, src.len())
        .unwrap();
    assert_eq!(b, Backend::Ibverbs);
    assert_eq!(
        owner.ask(&format!("sum 1000 {}", src.len())),
        format!("sum {} 3", 3 * src.len())
    );
    check_read(&buf, 0, 1000);
    let mut dst = vec![0u8; 4];
    buf.read_into(1000, dst.as_mut_ptr() as usize, 4).unwrap();
    assert_eq!(dst, [3, 3, 3, 3]);
}

#[test]
fn many_concurrent_transfers() {
    setup();
    let owner = start_owner(8 << 20, "ok");
    let buf = owner.handle();
    std::thread::scope(|s| {
        for t in 0..8usize {
            let buf = &buf;
            s.spawn(move || {
                for k in 0..4usize {
                    let off = (t * 131_071 + k * 7919) % (4 << 20);
                    assert_eq!(check_read(buf, off, 1 << 20), Backend::Ibverbs);
                }
            });
        }
    });
}

#[test]
fn refusals_and_a_dropped_buffer_are_clear_errors() {
    setup();
    let mut owner = start_owner(1 << 20, "ok");
    let buf = owner.handle();
    let mut dst = vec![0u8; 2 << 20];
    let e = buf
        .read_into(0, dst.as_mut_ptr() as usize, 2 << 20)
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument, "{}", e.message);
    check_read(&buf, 0, 100);
    assert_eq!(owner.ask("drop"), "dropped");
    let e = buf
        .read_into(0, dst.as_mut_ptr() as usize, 100)
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument, "{}", e.message);
    assert!(e.message.contains("not registered"), "{}", e.message);
}

#[test]
fn dead_owner_fails_cleanly() {
    setup();
    let mut owner = start_owner(1 << 20, "ok");
    let buf = owner.handle();
    check_read(&buf, 0, 1000);
    owner.kill();
    let mut dst = vec![0u8; 1000];
    let t = Instant::now();
    let e = buf
        .read_into(0, dst.as_mut_ptr() as usize, 1000)
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::ProcFailed, "{}", e.message);
    assert!(t.elapsed() < Duration::from_secs(30));
}

#[test]
fn unconnectable_queue_pairs_fall_back_to_tcp() {
    setup();
    // The owner's queue pairs never reach RTR: the owner refuses the
    // connection, the reader switches this owner to TCP and the read works.
    let owner = start_owner(1 << 20, "broken");
    let buf = owner.handle();
    assert_eq!(buf.choose_with(None), Backend::Ibverbs);
    assert_eq!(check_read(&buf, 5, 100_000), Backend::Tcp);
    assert_eq!(buf.backend().unwrap(), Backend::Tcp);
    // A new handle on the same owner goes straight to TCP.
    assert_eq!(owner.handle().choose_with(None), Backend::SameHost);
}
