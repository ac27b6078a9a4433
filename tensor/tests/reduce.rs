//! Chunk reduces between real processes: this test binary re-executes
//! itself as the owners of the other members' buffers (monarch-rdma's test
//! owner, shared from rdma/tests/common), so every member but this one is
//! read across a process boundary, straight or on the data plane.

use std::sync::Arc;

use monarch_core::ErrorKind;
use monarch_rdma::{self as rdma, Buffer};
use monarch_tensor::peer::Peer;
use monarch_tensor::{read_member, reduce_chunk, reduce_chunk_push, DType, Op};

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

/// [`reduce_chunk_push`] of `len` u8 sums at `offset` into `out`: (direct,
/// pushed) per member.
fn reduce_push(
    members: &[Arc<Buffer>],
    results: &[Option<Arc<Buffer>>],
    offset: u64,
    out: &mut [u8],
) -> monarch_core::Result<(Vec<bool>, Vec<bool>)> {
    let (mut direct, mut pushed) = (vec![false; members.len()], vec![false; members.len()]);
    unsafe {
        reduce_chunk_push(
            DType::U8,
            Op::Sum,
            members,
            results,
            offset,
            out.as_mut_ptr(),
            out.len(),
            &mut direct,
            &mut pushed,
        )
    }?;
    Ok((direct, pushed))
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

    // Pushed: every finished block also written into the peers' results,
    // here their inputs themselves (a reduce in place): each block is read
    // from every member before it is written, so they hold the sum of
    // what was there.
    let (pb, pc) = (
        Owner::start(OWNER_VAR, SIZE, |_| {}),
        Owner::start(OWNER_VAR, SIZE, |_| {}),
    );
    let pushers = vec![own.clone(), pb.handle(), pc.handle()];
    let results = vec![Some(own.clone()), Some(pb.handle()), Some(pc.handle())];
    let want_p: Vec<u8> = (off..off + len)
        .map(|i| mine[i].wrapping_add(pattern(i)).wrapping_add(pattern(i)))
        .collect();
    let mut outp = vec![0u8; len];
    let (direct, pushed) = reduce_push(&pushers, &results, off as u64, &mut outp).unwrap();
    assert_eq!(
        (direct, pushed),
        (vec![false, true, true], vec![false, true, true])
    );
    assert!(outp == want_p, "pushed sum differs");
    for peer in [&pb, &pc] {
        let mut got = vec![0u8; len + 2];
        // One byte either side: untouched.
        assert!(
            unsafe { read_member(&peer.handle(), off as u64 - 1, got.as_mut_ptr(), len + 2) }
                .unwrap()
        );
        assert_eq!(got[0], pattern(off - 1));
        assert_eq!(got[len + 1], pattern(off + len));
        assert!(
            got[1..=len] == want_p[..],
            "the sum written into a peer differs"
        );
    }
    // No result buffers: nothing pushed (as reduce_chunk).
    let (_, pushed) = reduce_push(&pushers, &[], off as u64, &mut outp).unwrap();
    assert_eq!(pushed, [false, false, false]);
    // Bad arguments: result buffers not one per member.
    let e = reduce_push(&pushers, &results[..2], off as u64, &mut outp).unwrap_err();
    assert!(e.message.contains("result buffers"), "{e:?}");

    // On the data plane: same bits, nobody read straight or written.
    std::env::set_var("MONARCH_RDMA_BACKEND", "tcp");
    let members = vec![own.clone(), b.handle(), c.handle()];
    let mut out2 = vec![0u8; len];
    let direct = reduce(DType::U8, Op::Sum, &members, off as u64, &mut out2).unwrap();
    let results = vec![None, Some(pb.handle()), Some(pc.handle())];
    let mut out3 = vec![0u8; len];
    let (direct3, pushed3) = reduce_push(&members, &results, off as u64, &mut out3).unwrap();
    std::env::remove_var("MONARCH_RDMA_BACKEND");
    assert_eq!(direct, [false, false, false]);
    assert_eq!((direct3, pushed3), (vec![false; 3], vec![false; 3]));
    assert!(out3 == out2, "data-plane sum with result buffers differs");
    drop((pb, pc));
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
