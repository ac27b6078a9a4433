//! Gathered results: one value (or error) per point of a mesh.

use crate::geometry::Shape;

/// The answer of one actor: payload parts, or an error message with
/// optional parts (a binding may put a serialized exception there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PointValue {
    /// The point's reply: payload parts.
    Ok(Vec<Vec<u8>>),
    /// The point failed.
    Err {
        /// What went wrong.
        message: String,
        /// Binding-defined parts (a serialized exception).
        parts: Vec<Vec<u8>>,
    },
}

impl PointValue {
    /// A failed point with `message` and no parts.
    pub fn error(message: impl Into<String>) -> PointValue {
        PointValue::Err {
            message: message.into(),
            parts: Vec::new(),
        }
    }

    /// Whether the point failed.
    pub fn is_err(&self) -> bool {
        matches!(self, PointValue::Err { .. })
    }

    /// The payload parts (a failed point's parts).
    pub fn parts(&self) -> &[Vec<u8>] {
        match self {
            PointValue::Ok(p) => p,
            PointValue::Err { parts, .. } => parts,
        }
    }
}

/// The gathered replies of a call, in rank order of `shape`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueMesh {
    /// The view the values were gathered over.
    pub shape: Shape,
    /// One value per point, in row-major order of `shape`.
    pub values: Vec<PointValue>,
}
