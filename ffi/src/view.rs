//! What the mesh handle types (proc, actor and host meshes) share: views.
//! A view function reads a mesh handle and writes a new handle of the same
//! type for a new view of the same procs (see docs/c-abi.md, "Mesh
//! geometry").

use std::ffi::c_char;

use monarch_core::MeshView;

use crate::args::{arg_slice, out_ptr, str_array};
use crate::bytes::owned_buffer;
use crate::handles::{get, insert, Handle};
use crate::status::Fail;

/// A stop bound for `*_slice_range` meaning "to the end of the dimension".
pub const MONARCH_SLICE_END: i64 = 9_223_372_036_854_775_807;

/// A size for `*_split` meaning "infer this size from the others" (at most
/// one per split).
pub const MONARCH_SPLIT_INFER: usize = 0;

/// Look mesh handle `h` up, derive a new view with `op`, and write a new
/// handle for it to `*out`.
pub(crate) fn derive_view<H: Handle>(
    h: *const H,
    out: *mut *mut H,
    op: impl FnOnce(&H::Rust) -> Result<H::Rust, Fail>,
) -> Result<(), Fail> {
    let m = get(h)?;
    let out = out_ptr(out, "out")?;
    *out = insert::<H>(op(&m)?);
    Ok(())
}

/// Write the Shape flatbuffer of mesh handle `h` as an owned buffer.
pub(crate) fn shape_of<H: Handle>(
    h: *const H,
    out: *mut *mut u8,
    out_len: *mut usize,
) -> Result<(), Fail>
where
    H::Rust: MeshView,
{
    let m = get(h)?;
    owned_buffer(monarch_core::wire::encode_shape(m.shape()), out, out_len)
}

/// The (from, to) pairs of a rename.
pub(crate) fn rename_args<'a>(
    from: *const *const c_char,
    to: *const *const c_char,
    n: usize,
) -> Result<Vec<(&'a str, &'a str)>, Fail> {
    let from = str_array(from, n, "from")?;
    let to = str_array(to, n, "to")?;
    Ok(from.into_iter().zip(to).collect())
}

/// The (name, size) pairs of a split; None for `MONARCH_SPLIT_INFER`.
pub(crate) fn split_args<'a>(
    names: *const *const c_char,
    sizes: *const usize,
    n: usize,
) -> Result<Vec<(&'a str, Option<usize>)>, Fail> {
    let names = str_array(names, n, "names")?;
    let sizes = arg_slice(sizes, n, "sizes")?;
    Ok(names
        .into_iter()
        .zip(sizes)
        .map(|(name, &size)| (name, (size != MONARCH_SPLIT_INFER).then_some(size)))
        .collect())
}
