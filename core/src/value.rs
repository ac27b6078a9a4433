//! Gathered results: one value (or error) per point of a mesh.

use crate::geometry::Shape;

/// The answer of one actor: payload parts, or an error message with
/// optional parts (a binding may put a serialized exception there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PointValue {
    Ok(Vec<Vec<u8>>),
    Err {
        message: String,
        parts: Vec<Vec<u8>>,
    },
}

impl PointValue {
    pub fn error(message: impl Into<String>) -> PointValue {
        PointValue::Err {
            message: message.into(),
            parts: Vec::new(),
        }
    }

    pub fn is_err(&self) -> bool {
        matches!(self, PointValue::Err { .. })
    }

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
    pub shape: Shape,
    pub values: Vec<PointValue>,
}
