//! What a caller may ask for: the longest name, the largest mesh. Checked
//! where a request enters the library, so a bad argument fails that one
//! call with `InvalidArgument` and never reaches a peer. The largest frame
//! a runtime sends or accepts ([`max_frame_payload`]). And what an
//! unauthenticated peer may hold: the handshake deadline and the caps on
//! pending handshakes ([`HandshakeLimits`]).

use std::borrow::Cow;
use std::sync::OnceLock;
use std::time::Duration;

use crate::error::{Error, Result};

/// Longest actor mesh, actor type, method or dimension name, in bytes.
pub const MAX_NAME_LEN: usize = 1024;

/// Longest error message sent with a failed answer, in bytes; a longer one
/// is cut (see [`bounded_message`]) so the answer still fits in a frame.
pub const MAX_ERROR_MESSAGE_LEN: usize = 64 * 1024;

/// Environment variable setting the most points one mesh may have.
pub const MAX_MESH_SIZE_VAR: &str = "MONARCH_MAX_MESH_SIZE";

/// The most points one mesh may have when `MONARCH_MAX_MESH_SIZE` is unset.
pub const DEFAULT_MAX_MESH_SIZE: usize = 1 << 20;

/// Largest total payload of one frame the wire format allows; a runtime's
/// own limit is [`max_frame_payload`] (at most this).
pub(crate) const MAX_PAYLOAD_LEN: u64 = 1 << 36;
/// Most parts in one frame.
pub(crate) const MAX_PARTS: usize = 1 << 16;

/// Environment variable: the largest payload (all parts together) of one
/// frame, in bytes, that a runtime sends or accepts.
pub const MAX_FRAME_PAYLOAD_VAR: &str = "MONARCH_MAX_FRAME_PAYLOAD";

/// The largest frame payload when `MONARCH_MAX_FRAME_PAYLOAD` is unset:
/// 4 GiB. Bulk data (Python buffers from 1 MiB, RDMA buffers) takes the
/// data plane, so control-plane frames stay far below it; a C, C++ or Julia
/// caller sending larger payloads inline raises the setting.
pub const DEFAULT_MAX_FRAME_PAYLOAD: u64 = 4 << 30;

/// The largest frame payload: `MONARCH_MAX_FRAME_PAYLOAD` if set to a
/// positive integer (at most the wire format's 64 GiB), else
/// [`DEFAULT_MAX_FRAME_PAYLOAD`]. Read once.
pub fn max_frame_payload() -> u64 {
    static MAX: OnceLock<u64> = OnceLock::new();
    *MAX.get_or_init(|| {
        setting(MAX_FRAME_PAYLOAD_VAR)
            .unwrap_or(DEFAULT_MAX_FRAME_PAYLOAD)
            .min(MAX_PAYLOAD_LEN)
    })
}

/// Check a payload before anything is sent: at most 65,536 parts, and at
/// most [`max_frame_payload`] bytes together (a peer drops the connection
/// of a frame over its limit, so a larger one fails here, alone).
pub fn check_payload(parts: &[&[u8]]) -> Result<()> {
    if parts.len() > MAX_PARTS {
        return Err(Error::invalid(format!(
            "a payload of {} parts exceeds the limit of {}",
            parts.len(),
            MAX_PARTS
        )));
    }
    let total = parts.iter().map(|p| p.len() as u64).sum::<u64>();
    let max = max_frame_payload();
    if total > max {
        return Err(Error::invalid(format!(
            "a payload of {total} bytes exceeds the limit of {max} per message \
             (send bulk data over the data plane, or set {MAX_FRAME_PAYLOAD_VAR} to raise it)"
        )));
    }
    Ok(())
}

/// Check a name: not empty, at most [`MAX_NAME_LEN`] bytes, no NUL or
/// other control character. `what` says which name it is in the error.
pub fn check_name(what: &str, name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid(format!("{what} must not be empty")));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Error::invalid(format!(
            "{what} is {} bytes long; the limit is {MAX_NAME_LEN}",
            name.len()
        )));
    }
    if let Some(c) = name.chars().find(|c| c.is_control()) {
        return Err(Error::invalid(format!(
            "{what} {:?} contains the control character {c:?}",
            shorten(name)
        )));
    }
    Ok(())
}

/// `message` cut to at most [`MAX_ERROR_MESSAGE_LEN`] bytes (at a character
/// boundary), saying how much was cut.
pub fn bounded_message(message: &str) -> Cow<'_, str> {
    if message.len() <= MAX_ERROR_MESSAGE_LEN {
        return Cow::Borrowed(message);
    }
    let mut end = MAX_ERROR_MESSAGE_LEN - 64;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!(
        "{} ... ({} more bytes cut)",
        &message[..end],
        message.len() - end
    ))
}

/// The most points one mesh may have: `MONARCH_MAX_MESH_SIZE` if set to a
/// positive integer, else [`DEFAULT_MAX_MESH_SIZE`]. Read once.
pub fn max_mesh_size() -> usize {
    static MAX: OnceLock<usize> = OnceLock::new();
    *MAX.get_or_init(|| {
        std::env::var(MAX_MESH_SIZE_VAR)
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|&n| n > 0)
            .unwrap_or(DEFAULT_MAX_MESH_SIZE)
    })
}

/// Check a mesh of `points` points against `max`; the error names the
/// setting that raises the limit.
pub fn check_mesh_size(points: usize, max: usize) -> std::result::Result<(), String> {
    if points > max {
        return Err(format!(
            "a mesh of {points} points exceeds the limit of {max} \
             (set {MAX_MESH_SIZE_VAR} to raise it)"
        ));
    }
    Ok(())
}

/// Check that `n` procs may be started on this machine: at most
/// [`max_mesh_size`], and no more than the process limit of the user
/// (`RLIMIT_NPROC`), so an impossible request fails before the first fork.
pub fn check_local_procs(n: usize) -> Result<()> {
    check_mesh_size(n, max_mesh_size()).map_err(Error::invalid)?;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit to the pointer given.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NPROC, &mut lim) } == 0;
    if ok && lim.rlim_cur != libc::RLIM_INFINITY && n as u64 > lim.rlim_cur {
        return Err(Error::invalid(format!(
            "cannot start {n} procs: the process limit of this user (RLIMIT_NPROC) is {}",
            lim.rlim_cur
        )));
    }
    Ok(())
}

/// Environment variable: how long an inbound connection may take to
/// authenticate, in milliseconds (the whole handshake, from accept).
pub const HANDSHAKE_TIMEOUT_VAR: &str = "MONARCH_HANDSHAKE_TIMEOUT_MS";

/// The handshake deadline when `MONARCH_HANDSHAKE_TIMEOUT_MS` is unset.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Environment variable: the most connections one runtime holds in their
/// handshake at once.
pub const MAX_PENDING_HANDSHAKES_VAR: &str = "MONARCH_MAX_PENDING_HANDSHAKES";

/// The most pending handshakes when `MONARCH_MAX_PENDING_HANDSHAKES` is
/// unset (and a quarter of the open-file limit is not lower).
pub const DEFAULT_MAX_PENDING_HANDSHAKES: usize = 512;

/// Environment variable: the most pending handshakes from one source (an
/// IPv4 address, an IPv6 /64 prefix, or this host's Unix sockets).
pub const MAX_PENDING_PER_SOURCE_VAR: &str = "MONARCH_MAX_PENDING_PER_SOURCE";

/// The most pending handshakes from one source when
/// `MONARCH_MAX_PENDING_PER_SOURCE` is unset.
pub const DEFAULT_MAX_PENDING_PER_SOURCE: usize = 128;

/// Bounds on connections that have not authenticated yet, for a runtime's
/// listeners (see docs/security.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HandshakeLimits {
    /// How long a whole handshake may take, from accept.
    pub timeout: Duration,
    /// The most pending handshakes in total.
    pub max_pending: usize,
    /// The most pending handshakes from one source.
    pub max_per_source: usize,
}

impl HandshakeLimits {
    /// The settings in the environment; an unset or invalid one (not a
    /// positive integer) takes its default. Without a setting, the total is
    /// also at most a quarter of this process's open-file limit, so pending
    /// handshakes never take the descriptors the rest of the process needs.
    pub fn from_env() -> HandshakeLimits {
        let max_pending = setting(MAX_PENDING_HANDSHAKES_VAR).unwrap_or_else(|| {
            (open_file_limit() / 4).clamp(1, DEFAULT_MAX_PENDING_HANDSHAKES as u64)
        });
        HandshakeLimits {
            timeout: handshake_timeout(),
            max_pending: max_pending as usize,
            max_per_source: setting(MAX_PENDING_PER_SOURCE_VAR)
                .unwrap_or(DEFAULT_MAX_PENDING_PER_SOURCE as u64)
                as usize,
        }
    }
}

/// The handshake deadline: `MONARCH_HANDSHAKE_TIMEOUT_MS` if set to a
/// positive integer, else [`DEFAULT_HANDSHAKE_TIMEOUT`].
pub fn handshake_timeout() -> Duration {
    setting(HANDSHAKE_TIMEOUT_VAR)
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_HANDSHAKE_TIMEOUT)
}

/// A positive integer setting, None when unset or invalid.
fn setting(var: &str) -> Option<u64> {
    std::env::var(var)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|&n| n > 0)
}

/// The soft limit on open descriptors of this process.
fn open_file_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit to the pointer given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 1024;
    }
    lim.rlim_cur
}

/// The first characters of a long name, for an error message.
fn shorten(name: &str) -> String {
    const SHOWN: usize = 64;
    match name.char_indices().nth(SHOWN) {
        Some((i, _)) => format!("{}...", &name[..i]),
        None => name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn names_are_checked_for_length_characters_and_emptiness() {
        check_name("name", "trainer_0.é").unwrap();
        check_name("name", &"a".repeat(MAX_NAME_LEN)).unwrap();
        for bad in [
            String::new(),
            "a".repeat(MAX_NAME_LEN + 1),
            "a".repeat(1 << 21),
            "a\0b".into(),
            "line\nbreak".into(),
            "\u{7f}".into(),
        ] {
            let e = check_name("actor name", &bad).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidArgument);
            assert!(e.message.starts_with("actor name"), "{}", e.message);
            assert!(e.message.len() < 200, "{}", e.message);
        }
    }

    #[test]
    fn long_error_messages_are_cut_at_a_character_boundary() {
        assert_eq!(bounded_message("short"), "short");
        let long = "é".repeat(MAX_ERROR_MESSAGE_LEN);
        let cut = bounded_message(&long);
        assert!(cut.len() <= MAX_ERROR_MESSAGE_LEN, "{}", cut.len());
        assert!(cut.ends_with("more bytes cut)"));
    }

    #[test]
    fn handshake_limits_are_positive_and_fit_the_open_file_limit() {
        let l = HandshakeLimits::from_env();
        assert!(!l.timeout.is_zero());
        assert!(l.max_pending >= 1 && l.max_per_source >= 1);
        if std::env::var(MAX_PENDING_HANDSHAKES_VAR).is_err() {
            assert!(l.max_pending as u64 <= open_file_limit().max(4) / 4);
        }
    }

    #[test]
    fn payloads_over_the_frame_limit_are_refused_without_reading_them() {
        check_payload(&[b"ab", b""]).unwrap();
        let many = vec![&b""[..]; MAX_PARTS + 1];
        let e = check_payload(&many).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
        // Only the lengths are read: 4,097 views of one 1 MiB buffer.
        let mib = vec![0u8; 1 << 20];
        let over = vec![&mib[..]; (max_frame_payload() >> 20) as usize + 1];
        let e = check_payload(&over).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
        assert!(e.message.contains(MAX_FRAME_PAYLOAD_VAR), "{}", e.message);
    }

    #[test]
    fn mesh_sizes_above_the_limit_are_refused() {
        check_mesh_size(8, 8).unwrap();
        let e = check_mesh_size(9, 8).unwrap_err();
        assert!(e.contains(MAX_MESH_SIZE_VAR), "{e}");
        assert!(max_mesh_size() >= 1);
        let e = check_local_procs(1 << 40).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
        assert!(e.message.contains(MAX_MESH_SIZE_VAR), "{}", e.message);
    }
}
