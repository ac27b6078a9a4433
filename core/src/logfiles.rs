//! Every proc's output kept in a file of its own, beside the lines
//! printed by [`crate::logs`].
//!
//! The directory is `$MONARCH_LOG_DIR` when set (`off` or empty: no files),
//! else `<tmp>/monarch-logs-<uid>/<pid>-<seconds>/` (the base made mode
//! 0700). It is printed on stderr when the first file is made:
//! `monarch: proc output is kept in DIR (one file per proc)`. A local proc's
//! file is named after its socket (`p7.log`), a proc of a host agent after
//! its address (`tcp_10.0.0.2_7001.log`). Lines keep their
//! text without colour codes; stderr lines start with `[stderr] `.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The directory of the process's proc logs (None: files are off or the
/// directory could not be made; the reason was printed once).
pub fn dir() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = match std::env::var("MONARCH_LOG_DIR") {
            Ok(v) if v.is_empty() || v == "off" => return None,
            Ok(v) => PathBuf::from(v),
            Err(_) => {
                // SAFETY: getuid cannot fail.
                let uid = unsafe { libc::getuid() };
                let secs = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                std::env::temp_dir()
                    .join(format!("monarch-logs-{uid}"))
                    .join(format!("{}-{secs}", std::process::id()))
            }
        };
        use std::os::unix::fs::DirBuilderExt;
        match std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
        {
            Ok(()) => {
                eprintln!(
                    "monarch: proc output is kept in {} (one file per proc)",
                    dir.display()
                );
                Some(dir)
            }
            Err(e) => {
                eprintln!(
                    "monarch: cannot make the proc log directory {}: {e}; proc output is not kept in files",
                    dir.display()
                );
                None
            }
        }
    })
    .as_deref()
}

/// A file name for `name` (letters, digits, `-`, `_` and `.` kept, the
/// rest `_`).
fn file_name(name: &str) -> String {
    let clean: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{}.log", clean.trim_start_matches('.'))
}

fn files() -> &'static Mutex<HashMap<String, Option<File>>> {
    static F: OnceLock<Mutex<HashMap<String, Option<File>>>> = OnceLock::new();
    F.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Append lines of proc `name`'s output (without colour codes) to its file.
pub(crate) fn keep(name: &str, stderr: bool, lines: &[&[u8]]) {
    let Some(dir) = dir() else { return };
    let mut open = files().lock();
    let file = open.entry(name.to_string()).or_insert_with(|| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(file_name(name)))
            .ok()
    });
    let Some(f) = file else { return };
    let mut buf = Vec::with_capacity(lines.iter().map(|l| l.len() + 10).sum());
    for line in lines {
        if stderr {
            buf.extend_from_slice(b"[stderr] ");
        }
        buf.extend_from_slice(&strip_colour(line));
        buf.push(b'\n');
    }
    let _ = f.write_all(&buf);
}

/// The name of the file of a local proc at `addr` (`unix:DIR/p7.sock` ->
/// `p7`).
pub(crate) fn local_name(addr: &str) -> String {
    Path::new(addr)
        .file_stem()
        .map_or_else(|| addr.to_string(), |s| s.to_string_lossy().into_owned())
}

/// `line` without its ANSI escape sequences (colours, cursor moves).
pub fn strip_colour(line: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if !line.contains(&0x1b) {
        return std::borrow::Cow::Borrowed(line);
    }
    let mut out = Vec::with_capacity(line.len());
    let mut i = 0;
    while i < line.len() {
        if line[i] == 0x1b && line.get(i + 1) == Some(&b'[') {
            // CSI: parameters and intermediates, then one final byte.
            i += 2;
            while i < line.len() && !(0x40..=0x7e).contains(&line[i]) {
                i += 1;
            }
            i += 1;
        } else if line[i] == 0x1b {
            i += 2;
        } else {
            out.push(line[i]);
            i += 1;
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_make_safe_file_names() {
        assert_eq!(file_name("p7"), "p7.log");
        assert_eq!(file_name("tcp:10.0.0.2:7001"), "tcp_10.0.0.2_7001.log");
        assert_eq!(file_name("../x"), "_x.log");
        assert_eq!(local_name("unix:/tmp/m/p7.sock"), "p7");
    }
}
