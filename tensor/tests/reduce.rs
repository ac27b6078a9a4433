//! Chunk reduces between real processes: this test binary re-executes
//! itself as the owners of the other members' buffers (monarch-rdma's test
//! owner, shared from rdma/tests/common), so every member but this one is
//! read across a process boundary, straight or on the data plane.

use std::sync::Arc;

use monarch_core::ErrorKind;
use monarch_rdma::{self as rdma, Buffer};
use monarch_tensor::peer::Peer;
use monarch_tensor::{read_member, reduce_chunk, DType, Op};

#[path = "../../rdma/tests/common/mod.rs"]
mod common;
use common::{pattern, serve_owner_if_asked, Owner};

const TOKEN: &str = "tensor-test-token";
const OWNER_VAR: &str = "TENSOR_TEST_OWNER";

#[test]
fn owner_child() {
    serve_owner_if_asked(OWNER_VAR, TOKEN, "unix:tensor-owner-child");
}

const SIZE: usize = 1 << 20;

fn reduce(
    dtype: DType,
    op: Op,
    members: &[Arc<Buffer>],
    offset: u64,
    out: &mut [u8],
) -> monarch_core::Result<Vec<bool>> {
    let mut direct = vec![false; members.len()];
    let count = out.len() / dtype.size();
    unsafe {
        reduce_chunk(
            dtype,
            op,
            members,
            offset,
            out.as_mut_ptr(),
            count,
            &mut direct,
        )
    }?;
    Ok(direct)
}

// One test: `MONARCH_RDMA_BACKEND` (which turns the direct reads off) is
// the process's, so the paths are taken one after the other.
#[test]
fn members_are_combined_in_group_order_straight_or_on_the_data_plane() {
    rdma::init(TOKEN, "unix:tensor-test-reader");
    std::env::remove_var("MONARCH_RDMA_BACKEND");
    let (b, c) = (
        Owner::start(OWNER_VAR, SIZE, |_| {}),
        Owner::start(OWNER_VAR, SIZE, |_| {}),
    );
    let mut mine: Vec<u8> = (0..SIZE).map(|i| (i % 7) as u8).collect();
    let own = rdma::register(None, mine.as_mut_ptr() as usize, SIZE, false, 1).unwrap();
    let members = vec![own.clone(), b.handle(), c.handle()];
    // Over several blocks, at an offset: u8 sums wrap.
    let (off, len) = (1000usize, 300_000usize);
    let want: Vec<u8> = (off..off + len)
        .map(|i| {
            ((i % 7) as u8)
                .wrapping_add(pattern(i))
                .wrapping_add(pattern(i))
        })
        .collect();
    let mut out = vec![0u8; len];
    let direct = reduce(DType::U8, Op::Sum, &members, off as u64, &mut out).unwrap();
    assert_eq!(direct, [false, true, true]);
    assert!(out == want, "direct sum differs");

    // Max over i16: the peers' pattern wins where it is larger.
    let mut out16 = vec![0u8; 4096];
    reduce(DType::I16, Op::Max, &members, 2048, &mut out16).unwrap();
    for i in 0..2048 {
        let at = 2048 + 2 * i;
        let m = i16::from_le_bytes([mine[at], mine[at + 1]]);
        let p = i16::from_le_bytes([pattern(at), pattern(at + 1)]);
        let got = i16::from_le_bytes([out16[2 * i], out16[2 * i + 1]]);
        assert_eq!(got, m.max(p), "element {i}");
    }

    // In place: the result over this member's own range.
    let mut copy = mine[off..off + len].to_vec();
    let direct = reduce(DType::U8, Op::Sum, &members, off as u64, &mut copy).unwrap();
    assert!(copy == want && direct == [false, true, true]);
    let inplace = unsafe { mine.as_mut_ptr().add(off) };
    let mut d = vec![false; 3];
    unsafe {
        reduce_chunk(
            DType::U8,
            Op::Sum,
            &members,
            off as u64,
            inplace,
            len,
            &mut d,
        )
    }
    .unwrap();
    assert!(mine[off..off + len] == want[..], "in-place sum differs");

    // On the data plane: same bits, nobody read straight.
    std::env::set_var("MONARCH_RDMA_BACKEND", "tcp");
    let members = vec![own.clone(), b.handle(), c.handle()];
    let mut out2 = vec![0u8; len];
    let direct = reduce(DType::U8, Op::Sum, &members, off as u64, &mut out2).unwrap();
    std::env::remove_var("MONARCH_RDMA_BACKEND");
    assert_eq!(direct, [false, false, false]);
    let want2: Vec<u8> = (off..off + len)
        .map(|i| mine[i].wrapping_add(pattern(i)).wrapping_add(pattern(i)))
        .collect();
    assert!(out2 == want2, "data-plane sum differs");

    // A member read straight by itself (the all-gather's copy).
    let mut got = vec![0u8; 5000];
    assert!(unsafe { read_member(&members[1], 77, got.as_mut_ptr(), 5000) }.unwrap());
    assert!(got.iter().enumerate().all(|(i, &x)| x == pattern(77 + i)));

    // Bad arguments: a range past a member's end, a dropped handle.
    let mut big = vec![0u8; 16];
    let e = reduce(DType::U8, Op::Sum, &members, SIZE as u64 - 8, &mut big).unwrap_err();
    assert!(
        e.kind == ErrorKind::InvalidArgument && e.message.contains("outside"),
        "{e:?}"
    );
    let h = b.handle();
    h.drop_buffer().unwrap();
    let e = reduce(DType::U8, Op::Sum, &[own.clone(), h], 0, &mut big).unwrap_err();
    assert!(e.message.contains("dropped"), "{e:?}");

    // A peer that died: a clear error, not another process's memory.
    let mut c = c;
    let stale = c.handle();
    c.kill();
    let e = reduce(DType::U8, Op::Sum, &[own.clone(), stale], 0, &mut big).unwrap_err();
    assert_eq!(e.kind, ErrorKind::ProcFailed, "{e:?}");
    assert!(e.message.contains("gone"), "{e:?}");
    drop(b);
}

#[test]
fn a_peer_read_straight_is_known_gone_once_it_died() {
    let mut owner = Owner::start(OWNER_VAR, 4096, |_| {});
    let d = Buffer::from_bytes(None, &owner.desc)
        .unwrap()
        .descriptor()
        .clone();
    let p = Peer::open(d.pid, &d.owner).unwrap();
    let mut got = [0u8; 700];
    unsafe { p.read_or_fail(d.addr, got.as_mut_ptr(), 700) }.unwrap();
    assert!(got.iter().enumerate().all(|(i, &x)| x == pattern(i)));
    p.check().unwrap();
    owner.kill();
    let e = p.check().unwrap_err();
    assert_eq!(e.kind, ErrorKind::ProcFailed);
    let e = unsafe { p.read_or_fail(d.addr, got.as_mut_ptr(), 700) }.unwrap_err();
    assert!(e.message.contains("gone"), "{e:?}");
}
