//! Starting and reaping the OS processes behind local procs.
//!
//! Children are forked from one long-lived "spawner" thread because
//! `PR_SET_PDEATHSIG` fires when the *thread* that forked a child exits, not
//! the process: forking from a short-lived caller thread (a Python thread,
//! say) would kill the child when that thread ends.

use parking_lot::Mutex;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};

use crate::completion::Completion;
use crate::error::{Error, ErrorKind, Result};

mod reaper;

/// A pidfd of process `pid` (`pidfd_open(2)`, Linux 5.3): readable once
/// the process has exited, and never names another process after that,
/// as a pid may.
pub fn pidfd_open(pid: u32) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: a plain syscall; its result is checked before use.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new descriptor, owned here.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as std::os::fd::RawFd) })
}

/// How a child process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExitInfo {
    /// Exited with this status code.
    Code(i32),
    /// Killed by this signal.
    Signal(i32),
}

impl std::fmt::Display for ExitInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExitInfo::Code(c) => write!(f, "exited with code {c}"),
            ExitInfo::Signal(s) => write!(f, "killed by signal {s} ({})", signal_name(*s)),
        }
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGTERM => "SIGTERM",
        libc::SIGABRT => "SIGABRT",
        libc::SIGINT => "SIGINT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGILL => "SIGILL",
        _ => "signal",
    }
}

/// One local child process hosting a proc.
pub struct Child {
    /// The address the proc listens on.
    pub addr: String,
    /// The process id.
    pub pid: u32,
    /// Completes when the proc reports Ready (Ok) or exits first (Err).
    pub ready: Completion<Result<()>>,
    /// Completes when the process has exited and been reaped.
    pub exit: Completion<ExitInfo>,
}

impl Child {
    /// Send SIGKILL unless the child is already reaped (its pid may then
    /// belong to someone else).
    pub fn kill(&self) {
        if !self.exit.is_ready() {
            // SAFETY: plain syscall on a pid we spawned and have not reaped.
            unsafe { libc::kill(self.pid as libc::pid_t, libc::SIGKILL) };
        }
    }
}

type Job = Box<dyn FnOnce() + Send>;

fn spawner() -> &'static Mutex<mpsc::Sender<Job>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("monarch-spawner".into())
            .spawn(move || {
                for job in rx {
                    job();
                }
            })
            .expect("start spawner thread");
        Mutex::new(tx)
    })
}

/// Run `spawn` (which forks, e.g. `Command::spawn`) on the long-lived
/// spawner thread, so a `PR_SET_PDEATHSIG` set in its `pre_exec` fires when
/// this process exits, not when the calling thread does.
pub(crate) fn spawn_on_spawner<T: Send + 'static>(
    spawn: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<std::io::Result<T>> {
    let (tx, rx) = mpsc::channel();
    let job: Job = Box::new(move || {
        let _ = tx.send(spawn());
    });
    spawner()
        .lock()
        .send(job)
        .map_err(|_| Error::new(ErrorKind::Internal, "spawner thread is gone"))?;
    rx.recv()
        .map_err(|_| Error::new(ErrorKind::Internal, "spawner thread is gone"))
}

/// Extra choices for [`spawn_child_with`].
#[derive(Debug, Default, Clone, Copy)]
pub struct SpawnOpts {
    /// Pipe the child's stdout and stderr to us (else they are inherited).
    pub capture_output: bool,
    /// A descriptor the child inherits under the same number.
    pub keep_fd: Option<std::os::fd::RawFd>,
}

/// The child's output pipes, when captured.
pub type Output = Option<(std::process::ChildStdout, std::process::ChildStderr)>;

/// Start `argv` with `env` added, as a child that dies with this process;
/// also returns the output pipes when `opts` captures them. `on_exit`
/// runs on the reaper thread after the child has been reaped.
pub fn spawn_child_with(
    argv: &[String],
    env: Vec<(String, String)>,
    addr: String,
    ready: Completion<Result<()>>,
    opts: SpawnOpts,
    on_exit: impl FnOnce(Arc<Child>, ExitInfo) + Send + 'static,
) -> Result<(Arc<Child>, Output)> {
    if argv.is_empty() {
        return Err(Error::invalid("bootstrap command is empty"));
    }
    let argv = argv.to_vec();
    let (tx, rx) = mpsc::channel();
    let job: Job = Box::new(move || {
        let parent = std::process::id() as libc::pid_t;
        let mut cmd = Command::new(&argv[0]);
        let out = || {
            if opts.capture_output {
                Stdio::piped()
            } else {
                Stdio::inherit()
            }
        };
        cmd.args(&argv[1..])
            .envs(env)
            .stdin(Stdio::null())
            .stdout(out())
            .stderr(out());
        let keep_fd = opts.keep_fd;
        // SAFETY: the closure runs between fork and exec and only makes
        // async-signal-safe calls (prctl, getppid, _exit, signal, fcntl).
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The parent may have died before prctl took effect.
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
                // A terminal's Ctrl-C goes to the whole process group: the
                // procs ignore it (the disposition survives exec), and
                // their controller decides what happens to them.
                if libc::signal(libc::SIGINT, libc::SIG_IGN) == libc::SIG_ERR {
                    return Err(std::io::Error::last_os_error());
                }
                // Let the child inherit this one descriptor.
                if let Some(fd) = keep_fd {
                    if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let _ = tx.send(cmd.spawn());
    });
    spawner()
        .lock()
        .send(job)
        .map_err(|_| Error::new(ErrorKind::Internal, "spawner thread is gone"))?;
    let mut child = rx
        .recv()
        .map_err(|_| Error::new(ErrorKind::Internal, "spawner thread is gone"))?
        .map_err(|e| Error::io(&format!("cannot start {:?}", "bootstrap command"), e))?;
    let output = match (child.stdout.take(), child.stderr.take()) {
        (Some(o), Some(e)) => Some((o, e)),
        _ => None,
    };
    let info = Arc::new(Child {
        addr,
        pid: child.id(),
        ready,
        exit: Completion::new(None),
    });
    reaper::watch(child, info.clone(), Box::new(on_exit))?;
    Ok((info, output))
}

/// A private directory for this runtime's Unix sockets, removed on drop.
pub struct SocketDir {
    /// The directory.
    pub path: PathBuf,
    /// A private parent made with `mkdtemp` when the shared one could not be
    /// trusted; removed with `path`.
    private_root: Option<PathBuf>,
}

impl SocketDir {
    /// Create `<base>/monarch-<uid>/<pid>-<random>` with mode 0700, after
    /// removing directories left by processes that no longer exist. The base
    /// is `$MONARCH_SOCKET_DIR`, else `/tmp`.
    pub fn create(random: &str) -> Result<SocketDir> {
        let base = std::env::var_os("MONARCH_SOCKET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/tmp"));
        Self::create_in(&base, random)
    }

    /// `create` under `base`. A `monarch-<uid>` that is not a directory of
    /// ours with mode 0700 (another local user may have made it first) is
    /// left alone: the sockets go to a fresh private `mkdtemp` directory
    /// instead, with a warning naming both.
    pub(crate) fn create_in(base: &Path, random: &str) -> Result<SocketDir> {
        use std::os::unix::fs::DirBuilderExt;
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() };
        let shared = base.join(format!("monarch-{uid}"));
        match std::fs::DirBuilder::new().mode(0o700).create(&shared) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(Error::io(&format!("cannot create {}", shared.display()), e)),
        }
        let (root, private_root) = match untrusted_reason(&shared, uid) {
            None => {
                remove_stale(&shared);
                (shared, None)
            }
            Some(why) => {
                let private = make_private_dir(base, uid)?;
                tracing::warn!(
                    shared = %shared.display(),
                    private = %private.display(),
                    "socket directory {} {why}; using {} instead",
                    shared.display(),
                    private.display()
                );
                (private.clone(), Some(private))
            }
        };
        let path = root.join(format!("{}-{}", std::process::id(), random));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(|e| Error::io(&format!("cannot create {}", path.display()), e))?;
        Ok(SocketDir { path, private_root })
    }
}

/// Why `dir` cannot hold our sockets: not a real directory, not ours, or
/// open to others. `None` when it can.
fn untrusted_reason(dir: &Path, uid: libc::uid_t) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(e) => return Some(format!("cannot be examined ({e})")),
    };
    if !meta.file_type().is_dir() {
        return Some("is not a directory".into());
    }
    if meta.uid() != uid {
        return Some(format!("is owned by uid {}, not {uid}", meta.uid()));
    }
    if meta.mode() & 0o777 != 0o700 {
        return Some(format!("has mode {:o}, not 700", meta.mode() & 0o777));
    }
    None
}

/// A new directory `<base>/monarch-<uid>-XXXXXX` of mode 0700.
fn make_private_dir(base: &Path, uid: libc::uid_t) -> Result<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let template = base.join(format!("monarch-{uid}-XXXXXX"));
    let mut bytes = template.as_os_str().as_bytes().to_vec();
    bytes.push(0);
    // SAFETY: `bytes` is a NUL-terminated template that mkdtemp fills in place.
    let made = unsafe { libc::mkdtemp(bytes.as_mut_ptr().cast()) };
    if made.is_null() {
        return Err(Error::io(
            &format!("cannot create {}", template.display()),
            std::io::Error::last_os_error(),
        ));
    }
    bytes.pop();
    Ok(PathBuf::from(std::ffi::OsStr::from_bytes(&bytes)))
}

impl Drop for SocketDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
        if let Some(root) = &self.private_root {
            let _ = std::fs::remove_dir_all(root);
        }
    }
}

fn remove_stale(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        // SAFETY: signal 0 only checks for existence.
        let alive = unsafe { libc::kill(pid, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
        if !alive {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A scratch base directory, removed at the end of the test.
    struct Base(PathBuf);
    impl Drop for Base {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn scratch_base(tag: &str) -> Base {
        let p = std::env::temp_dir().join(format!("sockdir-test-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Base(p)
    }

    fn shared_of(base: &Path) -> PathBuf {
        // SAFETY: getuid cannot fail.
        base.join(format!("monarch-{}", unsafe { libc::getuid() }))
    }

    #[test]
    fn socket_dir_uses_the_shared_directory_when_it_is_ours() {
        let base = scratch_base("ours");
        let dir = SocketDir::create_in(&base.0, "abcd").unwrap();
        assert_eq!(dir.path.parent(), Some(shared_of(&base.0).as_path()));
        assert!(dir.private_root.is_none());
    }

    #[test]
    fn socket_dir_falls_back_when_the_shared_one_is_open_or_not_ours() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let base = scratch_base("hostile");
        let shared = shared_of(&base.0);
        std::fs::create_dir(&shared).unwrap();
        // Another user's directory that lets anyone in: mode 0777, and owned
        // by nobody where the test may chown (as root).
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
        let shared_c = std::ffi::CString::new(shared.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid path; failure (not root) leaves the mode check.
        let chowned = unsafe { libc::chown(shared_c.as_ptr(), 65534, 65534) } == 0;
        let dir = SocketDir::create_in(&base.0, "abcd").unwrap();
        let private = dir.private_root.clone().expect("a private directory");
        assert_ne!(dir.path.parent(), Some(shared.as_path()));
        assert_eq!(dir.path.parent(), Some(private.as_path()));
        let meta = std::fs::metadata(&private).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o700);
        // SAFETY: getuid cannot fail.
        assert_eq!(meta.uid(), unsafe { libc::getuid() });
        drop(dir);
        assert!(!private.exists(), "the private directory is removed");
        if chowned {
            // Ours but 0777 is refused too, not only another owner's.
            std::fs::remove_dir(&shared).unwrap();
            std::fs::create_dir(&shared).unwrap();
            std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).unwrap();
            let dir = SocketDir::create_in(&base.0, "abcd").unwrap();
            assert!(dir.private_root.is_some());
        }
    }

    #[test]
    fn children_ignore_sigint() {
        // A terminal's Ctrl-C reaches the whole process group; a child
        // sending SIGINT to itself stands in for it.
        let argv = ["/bin/sh", "-c", "kill -INT $$; exit 7"].map(String::from);
        let (child, _) = spawn_child_with(
            &argv,
            Vec::new(),
            String::new(),
            Completion::new(None),
            SpawnOpts::default(),
            |_, _| {},
        )
        .expect("spawn /bin/sh");
        assert!(
            child.exit.wait(Some(Duration::from_secs(30))),
            "child never exited"
        );
        assert_eq!(child.exit.take(), Some(ExitInfo::Code(7)));
    }

    /// The names of this process's threads.
    fn thread_names() -> Vec<String> {
        std::fs::read_dir("/proc/self/task")
            .expect("/proc/self/task")
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .map(|n| n.trim_end().to_string())
            .collect()
    }

    #[test]
    fn exits_are_reaped_through_pidfds_by_one_thread() {
        use std::sync::mpsc;
        let (tx, rx) = mpsc::channel();
        let mut children = Vec::new();
        for code in 0..12 {
            // Each lives until killed, so all twelve are alive at once.
            let argv = ["/bin/sh", "-c", "exec sleep 600"].map(String::from);
            let tx = tx.clone();
            let (child, _) = spawn_child_with(
                &argv,
                Vec::new(),
                format!("child-{code}"),
                Completion::new(None),
                SpawnOpts::default(),
                move |c, exit| {
                    let _ = tx.send((c.addr.clone(), exit));
                },
            )
            .expect("spawn /bin/sh");
            children.push(child);
        }
        // Twelve children, yet no reaper thread of their own.
        let names = thread_names();
        assert!(
            !names.iter().any(|n| n.starts_with("monarch-reaper-")),
            "a thread per child: {names:?}"
        );
        assert_eq!(
            names.iter().filter(|n| *n == "monarch-reaper").count(),
            1,
            "{names:?}"
        );
        for c in &children {
            c.kill();
        }
        let mut seen = Vec::new();
        for _ in 0..children.len() {
            let (addr, exit) = rx
                .recv_timeout(Duration::from_secs(60))
                .expect("an exit was never reported");
            assert_eq!(exit, ExitInfo::Signal(libc::SIGKILL), "{addr}");
            seen.push(addr);
        }
        seen.sort();
        let mut want: Vec<String> = (0..12).map(|c| format!("child-{c}")).collect();
        want.sort();
        assert_eq!(seen, want);
        for c in &children {
            assert_eq!(c.exit.take(), Some(ExitInfo::Signal(libc::SIGKILL)));
        }
    }
}
