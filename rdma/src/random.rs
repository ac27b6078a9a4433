//! Random values of the data plane (registration keys, queue-pair packet
//! sequence numbers, the server's socket name), from the operating
//! system's generator. Failing to get randomness is an error for the
//! caller: none of these values may ever be guessable.

use monarch_core::{Error, ErrorKind, Result};

/// Where random bytes come from: [`OS`], or a failing stand-in in tests.
pub(crate) type Source = fn(&mut [u8]) -> std::result::Result<(), getrandom::Error>;

/// The operating system's generator.
pub(crate) const OS: Source = getrandom::fill;

/// `N` random bytes from `source`; `what` names the value in the error.
pub(crate) fn bytes<const N: usize>(source: Source, what: &str) -> Result<[u8; N]> {
    let mut b = [0u8; N];
    source(&mut b).map_err(|e| {
        Error::new(
            ErrorKind::Io,
            format!("cannot get random bytes for {what}: {e}"),
        )
    })?;
    Ok(b)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A source that always fails.
    pub(crate) fn broken(_: &mut [u8]) -> std::result::Result<(), getrandom::Error> {
        Err(getrandom::Error::UNSUPPORTED)
    }

    #[test]
    fn a_failing_source_is_an_error() {
        let e = bytes::<8>(broken, "a test value").unwrap_err();
        assert_eq!(e.kind, ErrorKind::Io);
        assert!(e.message.contains("a test value"), "{}", e.message);
    }

    #[test]
    fn the_os_source_fills_the_bytes() {
        // 32 zero bytes from a working generator: odds of 2^-256.
        assert_ne!(bytes::<32>(OS, "a test value").unwrap(), [0u8; 32]);
    }
}
