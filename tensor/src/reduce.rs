//! One member's chunk of a collective: the same element range of every
//! member's tensor, combined in group order into `out`.
//!
//! Every member of a group computes its own chunk this way and the others
//! read it from there, so all of them hold the same bits (the order of the
//! combine is the group's, whoever computes it). A member's range is read
//!
//! - from this process's memory when the buffer handle is its owner's;
//! - straight from a same-host peer's memory ([`crate::peer`]), a
//!   cache-sized block at a time right before the block is combined, so
//!   the peer's memory is read once from RAM and nothing is written back
//!   but the result;
//! - else on the data plane (monarch-rdma: TCP or ibverbs, or the
//!   same-host backend when the direct read is refused), all such members
//!   at once, each into scratch memory, then combined block by block.
//!
//! [`reduce_chunk_push`] also writes each finished block into the result
//! buffer of every same-host peer (`process_vm_writev`, from cache), so
//! they need not read this chunk of the result from here afterwards.
//!
//! The direct reads and writes take no lease from the owner: the caller's
//! protocol must keep every member's buffer registered until all members
//! are done (the Python collective exchanges a last "done" message). The
//! peer's pidfd, checked after the reads, tells a peer that died meanwhile.

use std::cell::RefCell;
use std::sync::Arc;

use monarch_core::{Error, Result};
use monarch_rdma::Buffer;

use crate::dtype::{DType, Op};
use crate::kernels::{self, combine_unchecked};
use crate::peer::{self, Peer};

/// Bytes per block and source at most: the accumulator and every
/// member's block read for it stay in L2 together (1 MiB per core here;
/// the block shrinks as the group grows). Blocks of 256 KiB measured
/// faster than 64 KiB in the 64 MiB all-reduce (fewer
/// `process_vm_readv` calls).
pub const BLOCK_BYTES: usize = 256 << 10;

/// The smallest block per source, for large groups (whose blocks together
/// no longer fit in L2).
const MIN_BLOCK_BYTES: usize = 32 << 10;

/// Bytes combined across every source before the next piece: the
/// accumulator's piece stays in L1 (32 KiB per core here).
const SUB_BYTES: usize = 8 << 10;

/// Where one member's range is read from.
enum Source {
    /// Memory of this process.
    Local(*const u8),
    /// A same-host peer's memory, at this address.
    Direct(Arc<Peer>, u64),
    /// Read on the data plane into this scratch memory.
    Scratch(Vec<u64>),
}

thread_local! {
    /// Blocks per thread (an accumulator, one per member), kept: a
    /// fresh allocation of this size is an mmap to fault in each time.
    static BLOCKS: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

fn words(bytes: usize) -> usize {
    bytes.div_ceil(8)
}

fn check_member_range(b: &Buffer, k: usize, offset: u64, bytes: usize) -> Result<()> {
    match offset.checked_add(bytes as u64) {
        Some(end) if end <= b.size() => Ok(()),
        _ => Err(Error::invalid(format!(
            "member {k}: range {offset}..{} is outside its buffer of {} bytes",
            offset.saturating_add(bytes as u64),
            b.size()
        ))),
    }
}

/// How this process reads member `k`'s buffer `b` at `offset`.
fn source(b: &Buffer, k: usize, offset: u64, dtype: DType) -> Result<Source> {
    let d = b.descriptor();
    if b.is_owner() {
        if !b.is_registered() {
            return Err(Error::invalid(format!(
                "member {k}: RDMA buffer {} was dropped",
                d.id
            )));
        }
        let p = (d.addr + offset) as usize;
        if !p.is_multiple_of(dtype.size()) {
            return Err(Error::invalid(format!(
                "member {k}: offset {offset} is not aligned to {} elements",
                dtype.name()
            )));
        }
        return Ok(Source::Local(p as *const u8));
    }
    if !b.is_registered() {
        return Err(Error::invalid(format!(
            "member {k}: the handle on RDMA buffer {} of proc {} was dropped",
            d.id, d.owner
        )));
    }
    Ok(match peer::for_buffer(d, d.addr + offset)? {
        Some(p) => Source::Direct(p, d.addr + offset),
        None => Source::Scratch(Vec::new()),
    })
}

/// Reduce `count` elements of `dtype` at byte `offset` of every member's
/// buffer (`members`, in group order) into `out`:
/// `out = m0 op m1 op ... op m(n-1)`, then [`kernels::finish`] (avg
/// divides by n). `out` may be this process's own member range (the
/// in-place reduce). `direct[k]` is set to whether member `k` was read
/// straight from a same-host peer's memory (`direct` is empty or has one
/// entry per member).
///
/// # Safety
/// `out` must be valid for reads and writes of `count` elements of
/// `dtype`; the owner's buffers among `members` must point at memory valid
/// for the call.
pub unsafe fn reduce_chunk(
    dtype: DType,
    op: Op,
    members: &[Arc<Buffer>],
    offset: u64,
    out: *mut u8,
    count: usize,
    direct: &mut [bool],
) -> Result<()> {
    reduce_chunk_push(dtype, op, members, &[], offset, out, count, direct, &mut [])
}

/// [`reduce_chunk`] that also writes each finished block, while it is in
/// cache, at byte `offset` of `results[k]` (member `k`'s result buffer,
/// registered writable) for every member `k` that is a same-host peer this
/// process may write: that member then has this chunk of the result
/// without reading it (`pushed[k]` says which). `results` is empty or has
/// one entry per member (None, or the owner's own buffer: skipped);
/// `pushed` is empty or has one entry per member.
///
/// Member `k`'s range read here and the range written there may be the
/// same memory (a reduce in place): each block is read from every member
/// before it is written to any. Like the reads, the writes take no lease:
/// the caller's protocol keeps the buffers registered, and member `k` must
/// not read that range of its result until this call returned here.
///
/// # Safety
/// As for [`reduce_chunk`].
#[allow(clippy::too_many_arguments)]
pub unsafe fn reduce_chunk_push(
    dtype: DType,
    op: Op,
    members: &[Arc<Buffer>],
    results: &[Option<Arc<Buffer>>],
    offset: u64,
    out: *mut u8,
    count: usize,
    direct: &mut [bool],
    pushed: &mut [bool],
) -> Result<()> {
    // Validates (dtype, op), out's pointer and alignment.
    kernels::combine(dtype, op, out, out, 0)?;
    let n = members.len();
    if n == 0 {
        return Err(Error::invalid("a reduce needs at least one member"));
    }
    for (what, len) in [
        ("direct flags", direct.len()),
        ("result buffers", results.len()),
        ("pushed flags", pushed.len()),
    ] {
        if len != 0 && len != n {
            return Err(Error::invalid(format!("{len} {what} for {n} members")));
        }
    }
    direct.iter_mut().for_each(|d| *d = false);
    pushed.iter_mut().for_each(|d| *d = false);
    let es = dtype.size();
    let bytes = count
        .checked_mul(es)
        .ok_or_else(|| Error::invalid(format!("{count} elements overflow the address space")))?;
    for (k, b) in members.iter().enumerate() {
        check_member_range(b, k, offset, bytes)?;
    }
    if count == 0 {
        return Ok(());
    }
    if out.is_null() || !(out as usize).is_multiple_of(es) {
        return Err(Error::invalid(format!(
            "the output pointer is NULL or not aligned to {} elements",
            dtype.name()
        )));
    }
    let mut sources = Vec::with_capacity(n);
    for (k, b) in members.iter().enumerate() {
        sources.push(source(b, k, offset, dtype)?);
    }
    read_on_data_plane(members, &mut sources, offset, bytes)?;
    let mut targets = Vec::new();
    for (k, r) in results.iter().enumerate() {
        if let Some(t) = push_target(r.as_deref(), k, offset, bytes)? {
            targets.push((k, t));
        }
    }

    // The accumulator is `out` itself unless `out` overlaps a local member
    // range (read while the result is written).
    let (o0, o1) = (out as usize, out as usize + bytes);
    let overlaps = sources.iter().any(|s| match s {
        Source::Local(p) => (*p as usize) < o1 && o0 < *p as usize + bytes,
        _ => false,
    });
    // Bytes per block and source: the accumulator and every member's
    // block read here stay in L2 together.
    let per = (BLOCK_BYTES * 4 / (n + 1)).clamp(MIN_BLOCK_BYTES, BLOCK_BYTES) / es;
    let block = per.min(count);
    let stride = words(block * es);
    BLOCKS.with(|cell| -> Result<()> {
        let mut blocks = cell.borrow_mut();
        if blocks.len() < (n + 1) * stride {
            blocks.resize((n + 1) * stride, 0);
        }
        let base = blocks.as_mut_ptr();
        // Block 0 accumulates when `out` overlaps this member's range;
        // block k + 1 holds member k's block when it is read into here.
        let buf = |k: usize| base.add(k * stride) as *mut u8;
        let mut srcs: Vec<*const u8> = vec![std::ptr::null(); n];
        let mut b0 = 0;
        while b0 < count {
            let m = block.min(count - b0);
            let at = b0 * es;
            let acc = if overlaps { buf(0) } else { out.add(at) };
            for (k, s) in sources.iter().enumerate() {
                srcs[k] = match s {
                    Source::Local(p) => p.add(at),
                    Source::Scratch(v) => (v.as_ptr() as *const u8).add(at),
                    Source::Direct(p, addr) => {
                        // The first member straight into the accumulator.
                        let into = if k == 0 { acc } else { buf(k + 1) };
                        p.read_or_fail(addr + at as u64, into, m * es)?;
                        into
                    }
                };
            }
            // Every source combined a piece at a time, so the
            // accumulator's piece stays in L1 across the members.
            let sub = (SUB_BYTES / es).max(1);
            let mut i = 0;
            while i < m {
                let c = sub.min(m - i);
                let o = i * es;
                if !std::ptr::eq(srcs[0], acc) {
                    std::ptr::copy_nonoverlapping(srcs[0].add(o), acc.add(o), c * es);
                }
                for s in &srcs[1..] {
                    combine_unchecked(dtype, op, acc.add(o), s.add(o), c);
                }
                i += c;
            }
            kernels::finish(dtype, op, acc, m, n as u32)?;
            for (_, (p, addr)) in &targets {
                p.write_or_fail(addr + at as u64, acc, m * es)?;
            }
            if overlaps {
                std::ptr::copy_nonoverlapping(acc, out.add(at), m * es);
            }
            b0 += m;
        }
        Ok(())
    })?;
    for (k, s) in sources.iter().enumerate() {
        if let Source::Direct(p, _) = s {
            p.check()?;
            if let Some(d) = direct.get_mut(k) {
                *d = true;
            }
        }
    }
    for (k, (p, _)) in &targets {
        p.check()?;
        if let Some(d) = pushed.get_mut(*k) {
            *d = true;
        }
    }
    Ok(())
}

/// The peer and address to write this chunk of member `k`'s result
/// buffer `r` to, when it is a same-host peer's, registered writable and
/// this process may write it; else None (the member reads the chunk).
fn push_target(
    r: Option<&Buffer>,
    k: usize,
    offset: u64,
    bytes: usize,
) -> Result<Option<(Arc<Peer>, u64)>> {
    let Some(b) = r else { return Ok(None) };
    if b.is_owner() || !b.is_registered() || !b.descriptor().writable {
        return Ok(None);
    }
    check_member_range(b, k, offset, bytes)?;
    let d = b.descriptor();
    Ok(peer::for_buffer(d, d.addr + offset)?.map(|p| (p, d.addr + offset)))
}

/// Fill the scratch of every member read on the data plane: all of them
/// at once, one thread each.
fn read_on_data_plane(
    members: &[Arc<Buffer>],
    sources: &mut [Source],
    offset: u64,
    bytes: usize,
) -> Result<()> {
    let mut todo: Vec<(&Arc<Buffer>, &mut Vec<u64>)> = members
        .iter()
        .zip(sources.iter_mut())
        .filter_map(|(b, s)| match s {
            Source::Scratch(v) => Some((b, v)),
            _ => None,
        })
        .collect();
    for (_, v) in todo.iter_mut() {
        // Zeroed pages from the kernel: nothing is written before the read.
        **v = vec![0u64; words(bytes)];
    }
    let read = |b: &Arc<Buffer>, v: &mut Vec<u64>| {
        b.read_into(offset, v.as_mut_ptr() as usize, bytes)
            .map(|_| ())
    };
    match todo.len() {
        0 => Ok(()),
        1 => {
            let (b, v) = todo.pop().expect("one");
            read(b, v)
        }
        _ => std::thread::scope(|s| {
            let handles: Vec<_> = todo
                .into_iter()
                .map(|(b, v)| s.spawn(move || read(b, v)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(Error::invalid("a data-plane read panicked")))
                })
                .collect::<Result<Vec<()>>>()
                .map(|_| ())
        }),
    }
}

/// Copy `len` bytes at byte `offset` of `buf` into `dst`: straight from
/// the owner's memory when it is a same-host peer this process may read
/// (then `true`), else on the data plane (`false`). As for
/// [`reduce_chunk`], a direct read takes no lease: the owner must keep the
/// buffer registered until the caller is done.
///
/// # Safety
/// `dst` must be valid for writes of `len` bytes.
pub unsafe fn read_member(buf: &Buffer, offset: u64, dst: *mut u8, len: usize) -> Result<bool> {
    check_member_range(buf, 0, offset, len)?;
    if len == 0 {
        return Ok(false);
    }
    if dst.is_null() {
        return Err(Error::invalid("the destination pointer is NULL"));
    }
    if !buf.is_owner() && buf.is_registered() {
        let d = buf.descriptor();
        if let Some(p) = peer::for_buffer(d, d.addr + offset)? {
            p.read_or_fail(d.addr + offset, dst, len)?;
            p.check()?;
            return Ok(true);
        }
    }
    buf.read_into(offset, dst as usize, len)?;
    Ok(false)
}
