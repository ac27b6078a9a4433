//! Job secrets: making strong ones and refusing weak ones.
//!
//! The handshake (`crate::auth`) gives an attacker no offline test of a
//! guess, but each connection is still one online guess. A secret given
//! from outside (`MONARCH_JOB_TOKEN`, `monarch host --secret-file`) must
//! therefore have at least [`MIN_BITS`] bits of estimated entropy; the
//! secrets the runtime makes itself ([`generate`], `monarch secret`) have
//! 256.
//!
//! The estimate assumes the characters were drawn at random from the
//! smallest usual alphabet holding them (hex digits, letters, base64,
//! printable ASCII), credits only the characters that do not continue a
//! long pattern (a repeat of earlier text or a run such as `aaaa…` or
//! `abcd…`, from [`PATTERN`] characters on), limits the alphabet to the
//! square of the number of distinct characters used, and treats text made
//! only of letters and word separators as words (about 2.35 bits a
//! letter). It refuses short, repetitive and word-like secrets; it cannot
//! tell a random-looking string typed by a person from a random one, so
//! `monarch secret` is the way to make one.

use std::io;

use crate::error::{Error, Result};

/// The least estimated entropy of a secret given from outside.
pub const MIN_BITS: f64 = 128.0;

/// Patterns this long or longer earn only their first character.
pub const PATTERN: usize = 8;

/// Bits credited to a letter of text made of words.
const WORD_LETTER_BITS: f64 = 2.35;

/// Characters analysed (a longer secret is credited for these only).
const MAX_ANALYSED: usize = 4096;

/// A fresh secret: 256 random bits from the kernel as 64 hex digits.
pub fn generate() -> io::Result<String> {
    let mut buf = [0u8; 32];
    crate::random::fill(&mut buf)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// The size of the smallest usual alphabet holding every character.
fn alphabet(chars: &[char]) -> f64 {
    let all = |f: fn(&char) -> bool| chars.iter().all(f);
    let any = |f: fn(&char) -> bool| chars.iter().any(f);
    if all(char::is_ascii_digit) {
        10.0
    } else if all(|c| c.is_ascii_digit() || ('a'..='f').contains(c))
        || all(|c| c.is_ascii_digit() || ('A'..='F').contains(c))
    {
        16.0
    } else if all(char::is_ascii_alphanumeric) {
        let cases = any(char::is_ascii_lowercase) as u32 + any(char::is_ascii_uppercase) as u32;
        let digits = any(char::is_ascii_digit);
        match (cases, digits) {
            (2, true) => 62.0,
            (2, false) => 52.0,
            (_, true) => 36.0,
            _ => 26.0,
        }
    } else if all(|c| c.is_ascii_alphanumeric() || "+/=-_".contains(*c)) {
        64.0
    } else {
        95.0
    }
}

/// Text of letters and word separators only (and not hex): words.
fn word_like(chars: &[char]) -> bool {
    chars
        .iter()
        .all(|c| c.is_ascii_alphabetic() || " -_.,'".contains(*c))
        && chars.iter().any(|c| !c.is_ascii_hexdigit())
}

/// The length of the longest match of `s[i..]` with text starting
/// earlier (overlapping allowed, so `aaaa…` repeats its first `a`).
fn repeat_len(s: &[char], i: usize) -> usize {
    (0..i)
        .map(|j| {
            s[i..]
                .iter()
                .zip(&s[j..])
                .take_while(|(a, b)| a == b)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// The length of the run starting at `i` with a constant step of -1, 0
/// or +1 between neighbours (`aaaa`, `abcd`, `9876`).
fn run_len(s: &[char], i: usize) -> usize {
    if i + 1 >= s.len() {
        return s.len() - i;
    }
    let step = s[i + 1] as i64 - s[i] as i64;
    if step.abs() > 1 {
        return 1;
    }
    1 + s[i..]
        .windows(2)
        .take_while(|w| w[1] as i64 - w[0] as i64 == step)
        .count()
}

/// Characters that do not continue a long pattern.
fn novel_chars(s: &[char]) -> usize {
    let (mut i, mut novel) = (0, 0);
    while i < s.len() {
        novel += 1;
        let skip = repeat_len(s, i).max(run_len(s, i));
        i += if skip >= PATTERN { skip } else { 1 };
    }
    novel
}

/// The estimated entropy of `secret` in bits (see the module docs).
pub fn estimated_bits(secret: &str) -> f64 {
    let chars: Vec<char> = secret.chars().take(MAX_ANALYSED).collect();
    if chars.is_empty() {
        return 0.0;
    }
    let mut distinct = chars.clone();
    distinct.sort_unstable();
    distinct.dedup();
    let per_char = if word_like(&chars) {
        WORD_LETTER_BITS
    } else {
        let variety = (distinct.len() * distinct.len()) as f64;
        alphabet(&chars).min(variety.max(2.0)).log2()
    };
    novel_chars(&chars) as f64 * per_char
}

/// Ok if `secret` (named `source` in the error, e.g. the variable it came
/// from) is strong enough; else an error saying why and what to do.
pub fn check(secret: &str, source: &str) -> Result<()> {
    if secret.is_empty() {
        return Err(Error::invalid(format!(
            "{source}: the job secret is empty; make one with `monarch secret`"
        )));
    }
    let bits = estimated_bits(secret);
    if bits < MIN_BITS {
        return Err(Error::invalid(format!(
            "{source}: the job secret is too weak (about {bits:.0} bits of estimated entropy, \
             at least {MIN_BITS:.0} needed): make one with `monarch secret` \
             (or any 32 random bytes, e.g. 64 hex digits)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_secrets_are_strong() {
        for _ in 0..200 {
            let s = generate().unwrap();
            assert_eq!(s.len(), 64);
            assert!(estimated_bits(&s) >= 2.0 * MIN_BITS, "{s}");
            check(&s, "test").unwrap();
        }
    }

    #[test]
    fn random_128_bit_secrets_are_accepted() {
        // 32 hex digits or 22 base64 characters: exactly at the threshold,
        // with no pattern a random string is likely to contain.
        for _ in 0..2000 {
            let mut b = [0u8; 16];
            crate::random::fill(&mut b).unwrap();
            let hex: String = b.iter().map(|b| format!("{b:02x}")).collect();
            check(&hex, "test").unwrap_or_else(|e| panic!("{hex}: {e}"));
        }
    }

    #[test]
    fn weak_secrets_are_refused() {
        for weak in [
            "",
            "password",
            "correct horse battery staple",
            "correcthorsebatterystaplecorrecthorsebatterystaple",
            "the quick brown fox jumps over the lazy dog",
            "hosts-e2e-test-secret",
            "0123456789abcdef0123456789abcdef",
            "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ",
            &"a".repeat(500),
            &"ab".repeat(200),
            &"Tr0ub4dor&3".repeat(10),
            "deadbeefdeadbeefdeadbeefdeadbeefdeadbeefdeadbeef",
            "1234567890123456789012345678901234567890",
        ] {
            let e = check(weak, "MONARCH_JOB_TOKEN").unwrap_err();
            assert!(
                e.message.contains("MONARCH_JOB_TOKEN") && e.message.contains("monarch secret"),
                "{e}"
            );
            assert!(estimated_bits(weak) < MIN_BITS, "{weak:?}");
        }
    }

    #[test]
    fn the_estimate_follows_the_alphabet() {
        assert!((estimated_bits("0123") - 4.0 * 10f64.log2()).abs() < 1e-9);
        assert!((estimated_bits("9f3a") - 16.0).abs() < 1e-9);
        // Printable ASCII with no pattern: log2(95) bits a character.
        let s = "k#8Qz!p2W@rL^m5$Xv&Tn7*Hc(Bj4)Ds";
        assert!((estimated_bits(s) - 32.0 * 95f64.log2()).abs() < 1e-9);
        check(s, "test").unwrap();
    }
}
