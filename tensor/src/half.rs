//! f16 and bf16 to and from f32, bit by bit (no dependency), rounding to
//! nearest even as torch does. Written with selects rather than branches
//! so a loop over them vectorises. f16 follows F. Giesen's conversions
//! ("half to float done quick"); bf16 is the top half of an f32.

/// The f32 equal to the f16 with bits `h` (every f16 is exact in f32).
#[inline(always)]
pub fn f16_to_f32(h: u16) -> f32 {
    let h = h as u32;
    let shifted_exp = 0x7c00u32 << 13;
    let o = ((h & 0x7fff) << 13) + ((127 - 15) << 23);
    let exp = shifted_exp & (h << 13);
    // All three candidates computed, one selected: no branch in a loop.
    // Inf or NaN: the exponent is all ones in f32 too.
    let inf_nan = o + ((128 - 16) << 23);
    // Zero or subnormal: renormalised by a float subtraction.
    let sub = (f32::from_bits(o + (1 << 23)) - f32::from_bits(113 << 23)).to_bits();
    let v = if exp == shifted_exp {
        inf_nan
    } else if exp == 0 {
        sub
    } else {
        o
    };
    f32::from_bits(v | ((h & 0x8000) << 16))
}

/// `f` rounded to the nearest f16 (ties to even); NaN becomes a quiet NaN.
#[inline(always)]
pub fn f32_to_f16(f: f32) -> u16 {
    let bits = f.to_bits();
    let sign = bits & 0x8000_0000;
    let u = bits ^ sign;
    let f16max = (127 + 16) << 23;
    let infty = 255u32 << 23;
    let denorm_magic = ((127 - 15) + (23 - 10) + 1) << 23;
    // All candidates computed, one selected (see f16_to_f32).
    let big = if u > infty { 0x7e00 } else { 0x7c00 };
    // The float addition does the rounding of a subnormal result.
    let sub = (f32::from_bits(u) + f32::from_bits(denorm_magic))
        .to_bits()
        .wrapping_sub(denorm_magic);
    let mant_odd = (u >> 13) & 1;
    let normal = u
        .wrapping_add((15u32.wrapping_sub(127) << 23).wrapping_add(0xfff))
        .wrapping_add(mant_odd)
        >> 13;
    let o = if u >= f16max {
        big
    } else if u < (113 << 23) {
        sub
    } else {
        normal
    };
    (o | (sign >> 16)) as u16
}

/// The f32 equal to the bf16 with bits `b`.
#[inline(always)]
pub fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

/// `f` rounded to the nearest bf16 (ties to even); NaN becomes 0x7fc0
/// (with its sign), as in torch.
#[inline(always)]
pub fn f32_to_bf16(f: f32) -> u16 {
    let bits = f.to_bits();
    let nan = (bits >> 16) & 0x8000 | 0x7fc0;
    let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1)) >> 16;
    (if f.is_nan() { nan } else { rounded }) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_f16_round_trips_through_f32() {
        for h in 0..=u16::MAX {
            let f = f16_to_f32(h);
            if f.is_nan() {
                assert!(f16_to_f32(f32_to_f16(f)).is_nan());
            } else {
                assert_eq!(f32_to_f16(f), h, "bits {h:#06x} -> {f}");
            }
        }
    }

    #[test]
    fn f16_known_values_and_rounding() {
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0xc000), -2.0);
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(f16_to_f32(0x7c00), f32::INFINITY);
        assert_eq!(f32_to_f16(65520.0), 0x7c00, "rounds up to inf");
        assert_eq!(f32_to_f16(65519.0), 0x7bff);
        // 1 + 2^-11 is halfway between 1 and the next f16: ties to even.
        assert_eq!(f32_to_f16(1.0 + 2f32.powi(-11)), 0x3c00);
        assert_eq!(f32_to_f16(1.0 + 3.0 * 2f32.powi(-11)), 0x3c02);
        assert_eq!(
            f32_to_f16(2f32.powi(-25)),
            0,
            "half the smallest subnormal: to even"
        );
        assert_eq!(f32_to_f16(-0.0), 0x8000);
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        assert_eq!(bf16_to_f32(0x3f80), 1.0);
        assert_eq!(
            f32_to_bf16(f32::from_bits(0x3f80_8000)),
            0x3f80,
            "tie to even"
        );
        assert_eq!(
            f32_to_bf16(f32::from_bits(0x3f81_8000)),
            0x3f82,
            "tie to even"
        );
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8001)), 0x3f81);
        assert_eq!(f32_to_bf16(f32::NAN) & 0x7fff, 0x7fc0);
        for b in 0..=u16::MAX {
            let f = bf16_to_f32(b);
            if !f.is_nan() {
                assert_eq!(f32_to_bf16(f), b);
            }
        }
    }
}
