//! What operations return and what events are answered with.

use crate::completion::Completion;
use crate::error::Result;
use crate::value::ValueMesh;

/// A pending result: a ValueMesh (empty for operations without values) or
/// an error that concerns the operation as a whole.
pub type Future = Completion<Result<ValueMesh>>;

/// An answer to an event: payload parts, or an error message plus parts
/// (a binding may put a serialized exception there).
pub type Answer<'a> = std::result::Result<&'a [&'a [u8]], (&'a str, &'a [&'a [u8]])>;
