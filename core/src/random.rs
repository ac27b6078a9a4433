//! Random values from the kernel (`getrandom`): job secrets, handshake
//! ephemeral keys, socket directory names. A failure is returned to the caller:
//! no value here may ever fall back to something guessable.

use std::io;

/// Fill `buf` with random bytes.
pub fn fill(buf: &mut [u8]) -> io::Result<()> {
    getrandom::fill(buf).map_err(|e| match e.raw_os_error() {
        Some(code) => io::Error::from_raw_os_error(code),
        None => io::Error::other(format!("getrandom: {e}")),
    })
}

/// 128 random bits as 32 hex digits.
pub fn hex128() -> io::Result<String> {
    let mut buf = [0u8; 16];
    fill(&mut buf)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}
