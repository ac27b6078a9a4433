//! Element types and reduction ops. Their numeric codes are the C ABI's
//! (`MONARCH_DTYPE_*`, `MONARCH_OP_*`), so they never change.

use monarch_core::{Error, Result};

/// An element type of a tensor's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DType {
    /// 32-bit IEEE float.
    F32 = 1,
    /// 64-bit IEEE float.
    F64 = 2,
    /// 16-bit IEEE float (half).
    F16 = 3,
    /// bfloat16: the upper half of an f32.
    BF16 = 4,
    /// Signed 8-bit integer.
    I8 = 5,
    /// Signed 16-bit integer.
    I16 = 6,
    /// Signed 32-bit integer.
    I32 = 7,
    /// Signed 64-bit integer.
    I64 = 8,
    /// Unsigned 8-bit integer.
    U8 = 9,
    /// Bool stored as one byte, 0 or 1.
    Bool = 10,
}

impl DType {
    /// The type with C code `code`.
    pub fn from_code(code: u32) -> Result<DType> {
        Ok(match code {
            1 => DType::F32,
            2 => DType::F64,
            3 => DType::F16,
            4 => DType::BF16,
            5 => DType::I8,
            6 => DType::I16,
            7 => DType::I32,
            8 => DType::I64,
            9 => DType::U8,
            10 => DType::Bool,
            _ => return Err(Error::invalid(format!("unknown tensor dtype code {code}"))),
        })
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 | DType::I16 => 2,
            DType::I8 | DType::U8 | DType::Bool => 1,
        }
    }

    /// Whether the type is a floating-point one.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }

    /// The name torch gives the type (for messages).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::U8 => "uint8",
            DType::Bool => "bool",
        }
    }
}

/// A reduction op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Sum (integers wrap, as in torch).
    Sum = 1,
    /// Mean over the members: summed, then divided by their number at the
    /// end ([`crate::finish`]); integers divide truncating.
    Avg = 2,
    /// Minimum; a NaN in either operand gives NaN (as `torch.minimum`).
    Min = 3,
    /// Maximum; a NaN in either operand gives NaN (as `torch.maximum`).
    Max = 4,
    /// Product (integers wrap).
    Product = 5,
    /// Bitwise and (bool: logical and). Integers and bool only.
    BAnd = 6,
    /// Bitwise or (bool: logical or). Integers and bool only.
    BOr = 7,
    /// Bitwise exclusive or (bool: logical xor). Integers and bool only.
    BXor = 8,
}

impl Op {
    /// The op with C code `code`.
    pub fn from_code(code: u32) -> Result<Op> {
        Ok(match code {
            1 => Op::Sum,
            2 => Op::Avg,
            3 => Op::Min,
            4 => Op::Max,
            5 => Op::Product,
            6 => Op::BAnd,
            7 => Op::BOr,
            8 => Op::BXor,
            _ => return Err(Error::invalid(format!("unknown reduction op code {code}"))),
        })
    }

    /// The op's name as the Python API spells it.
    pub fn name(self) -> &'static str {
        match self {
            Op::Sum => "sum",
            Op::Avg => "avg",
            Op::Min => "min",
            Op::Max => "max",
            Op::Product => "product",
            Op::BAnd => "band",
            Op::BOr => "bor",
            Op::BXor => "bxor",
        }
    }

    /// Whether the op works on bits (integers and bool only).
    pub fn is_bitwise(self) -> bool {
        matches!(self, Op::BAnd | Op::BOr | Op::BXor)
    }
}
