//! `monarch_value_mesh`: the gathered replies of a call, one value or error
//! per point, read in place.

use std::ffi::{c_char, CString};

use monarch_core::{PointValue, ValueMesh};

use crate::args::out_ptr;
use crate::bytes::owned_buffer;
use crate::handles::{self, get, Handle};
use crate::status::{guard, monarch_status, Fail};

/// The gathered replies of a call: one value or error per point, in
/// row-major rank order of the called mesh's shape.
///
/// Created by `monarch_future_take`; freed by `monarch_value_mesh_free`.
/// Read-only, so it may be read from any number of threads at once;
/// everything borrowed from it stays valid until it is freed.
pub struct monarch_value_mesh {
    _private: [u8; 0],
}

impl Handle for monarch_value_mesh {
    type Rust = HeldValueMesh;
    const KIND: &'static str = "value mesh";
}

/// A ValueMesh plus the NUL-terminated copies of its error messages that
/// C borrows.
pub(crate) struct HeldValueMesh {
    mesh: ValueMesh,
    errors: Vec<Option<CString>>,
}

impl HeldValueMesh {
    pub(crate) fn new(mesh: ValueMesh) -> HeldValueMesh {
        let errors = mesh
            .values
            .iter()
            .map(|v| match v {
                PointValue::Err { message, .. } => {
                    Some(CString::new(message.replace('\0', "")).unwrap_or_default())
                }
                PointValue::Ok(_) => None,
            })
            .collect();
        HeldValueMesh { mesh, errors }
    }

    /// Point `rank`, or an error naming the valid range.
    fn point(&self, rank: usize) -> Result<&PointValue, Fail> {
        self.mesh.values.get(rank).ok_or_else(|| {
            Fail::invalid(format!(
                "rank {rank} out of range for a value mesh of {} points",
                self.mesh.values.len()
            ))
        })
    }

    /// The borrowed error message of point `rank` (NULL if none).
    fn error_ptr(&self, rank: usize) -> *const c_char {
        self.errors[rank]
            .as_ref()
            .map(|c| c.as_ptr())
            .unwrap_or(std::ptr::null())
    }
}

/// Write the Shape flatbuffer of the mesh that was called; free it with
/// `monarch_buffer_free`. Points are in row-major rank order of this shape.
#[no_mangle]
pub unsafe extern "C" fn monarch_value_mesh_shape(
    vm: *const monarch_value_mesh,
    out: *mut *mut u8,
    out_len: *mut usize,
) -> monarch_status {
    guard(|| {
        let v = get(vm)?;
        owned_buffer(
            monarch_core::wire::encode_shape(&v.mesh.shape),
            out,
            out_len,
        )
    })
}

/// Write the number of points.
#[no_mangle]
pub unsafe extern "C" fn monarch_value_mesh_len(
    vm: *const monarch_value_mesh,
    out: *mut usize,
) -> monarch_status {
    guard(|| {
        let v = get(vm)?;
        *out_ptr(out, "out")? = v.mesh.values.len();
        Ok(())
    })
}

/// Describe point `rank`: writes whether it is an error, its error message
/// (NULL if none; borrowed, valid until the value mesh is freed) and its
/// number of payload parts.
#[no_mangle]
pub unsafe extern "C" fn monarch_value_mesh_point(
    vm: *const monarch_value_mesh,
    rank: usize,
    out_is_error: *mut bool,
    out_error: *mut *const c_char,
    out_nparts: *mut usize,
) -> monarch_status {
    guard(|| {
        let v = get(vm)?;
        let p = v.point(rank)?;
        *out_ptr(out_is_error, "out_is_error")? = p.is_err();
        *out_ptr(out_error, "out_error")? = v.error_ptr(rank);
        *out_ptr(out_nparts, "out_nparts")? = p.parts().len();
        Ok(())
    })
}

/// Borrow payload part `part` of point `rank` (valid until the value mesh
/// is freed).
#[no_mangle]
pub unsafe extern "C" fn monarch_value_mesh_part(
    vm: *const monarch_value_mesh,
    rank: usize,
    part: usize,
    out_data: *mut *const u8,
    out_len: *mut usize,
) -> monarch_status {
    guard(|| {
        let v = get(vm)?;
        let p = v.point(rank)?;
        let bytes = p.parts().get(part).ok_or_else(|| {
            Fail::invalid(format!(
                "part {part} out of range: point {rank} has {}",
                p.parts().len()
            ))
        })?;
        *out_ptr(out_data, "out_data")? = bytes.as_ptr();
        *out_ptr(out_len, "out_len")? = bytes.len();
        Ok(())
    })
}

/// One point of a value mesh as `monarch_value_mesh_points` describes it:
/// what `monarch_value_mesh_point` and `monarch_value_mesh_part` (part 0)
/// would say. Pointers are borrowed, valid until the value mesh is freed.
#[repr(C)]
pub struct monarch_point_info {
    /// Whether the point is an error.
    pub is_error: bool,
    /// The point is OK with exactly one part, byte-identical to point 0's
    /// (also OK with one part); always false for point 0 itself. Lets a
    /// binding decode a uniform answer once.
    pub same_as_first: bool,
    /// Error message (NULL if none).
    pub error: *const c_char,
    /// Number of payload parts.
    pub nparts: usize,
    /// Payload part 0 (NULL when there are no parts).
    pub part0: *const u8,
    /// Length of part 0 (0 when there are no parts).
    pub part0_len: usize,
}

/// Describe the points of a value mesh in rank order, all in one call:
/// fills `out[0..min(cap, len)]` and writes the number of points to
/// `*out_len` (when it exceeds `cap`, call again with a larger array).
/// `out` may be NULL when `cap` is 0.
#[no_mangle]
pub unsafe extern "C" fn monarch_value_mesh_points(
    vm: *const monarch_value_mesh,
    out: *mut monarch_point_info,
    cap: usize,
    out_len: *mut usize,
) -> monarch_status {
    guard(|| {
        let v = get(vm)?;
        let out_len = out_ptr(out_len, "out_len")?;
        let values = &v.mesh.values;
        let n = values.len().min(cap);
        if n > 0 && out.is_null() {
            return Err(Fail::invalid("out is NULL but cap is not 0"));
        }
        let first: Option<&[u8]> = match values.first() {
            Some(PointValue::Ok(parts)) if parts.len() == 1 => Some(&parts[0]),
            _ => None,
        };
        for (rank, p) in values.iter().take(n).enumerate() {
            let parts = p.parts();
            let (part0, part0_len) = match parts.first() {
                Some(b) => (b.as_ptr(), b.len()),
                None => (std::ptr::null(), 0),
            };
            let same_as_first = rank > 0
                && !p.is_err()
                && parts.len() == 1
                && first.is_some_and(|f| f == &parts[0][..]);
            // SAFETY: the caller promises `cap` writable items at `out`.
            unsafe {
                out.add(rank).write(monarch_point_info {
                    is_error: p.is_err(),
                    same_as_first,
                    error: v.error_ptr(rank),
                    nparts: parts.len(),
                    part0,
                    part0_len,
                })
            };
        }
        *out_len = values.len();
        Ok(())
    })
}

/// Free a value mesh handle (and everything borrowed from it). NULL is a
/// no-op.
#[no_mangle]
pub unsafe extern "C" fn monarch_value_mesh_free(vm: *mut monarch_value_mesh) -> monarch_status {
    guard(|| handles::free(vm))
}
