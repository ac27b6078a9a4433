//! Procs started from a warm template: a *zygote* process that has already
//! started its language runtime and loaded libmonarch, and forks one child
//! per proc on request.
//!
//! The controller side ([`Zygote`]) starts the template by running the
//! bootstrap command with `MONARCH_ZYGOTE_FD` naming its end of a socket
//! pair. The template calls [`serve`] while it is still single-threaded and
//! before it creates any runtime. [`serve`] returns in each forked child,
//! which has then become the proc: the controller's environment and working
//! directory of the moment of the request, its own output pipes, every other
//! descriptor closed, `PR_SET_PDEATHSIG` tied to the zygote. The template
//! process itself is started like any child (it dies with the controller), so
//! when the controller dies the zygote dies and takes its children along.
//!
//! The zygote reaps its children (a pidfd each, polled with the control
//! socket) and reports each exit status to the controller, which completes
//! the proc's [`Child::exit`] as the exec path's reaper does.
//!
//! Protocol (`SOCK_SEQPACKET`, one message per packet):
//! - fork request: `F`, then NUL-terminated strings: the working directory
//!   and each `KEY=VALUE` of the proc's environment; the proc's stdout and
//!   stderr ride along as `SCM_RIGHTS` (none: inherit the zygote's);
//! - `P` pid (i32 LE): forked; `E` text: refused, e.g. the template has
//!   threads; `X` pid, wait status (i32 LE each): a child exited.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use crate::completion::Completion;
use crate::error::{Error, ErrorKind, Result};
use crate::process::{Child, ExitInfo, SpawnOpts};

/// Environment variable naming the template's end of the control socket.
pub const ENV_ZYGOTE_FD: &str = "MONARCH_ZYGOTE_FD";
/// Set to `1` in a spawn's environment: the bootstrap command can serve as
/// a zygote, so the procs are forked from one.
pub const ENV_ZYGOTE: &str = "MONARCH_ZYGOTE";
/// Set to `0` in the controller's environment: always exec.
pub const ENV_USE_ZYGOTE: &str = "MONARCH_USE_ZYGOTE";

/// The largest request accepted (environment and working directory).
const MAX_REQUEST: usize = 1 << 20;

/// A proc to fork: its address, its Ready gate, what runs when it exits.
pub struct NewProc {
    /// The address it will listen on.
    pub addr: String,
    /// Completes when it says Ready (or fails when it exits first).
    pub ready: Completion<Result<()>>,
    /// Runs once it has exited.
    pub on_exit: OnExit,
}

/// What runs when a forked proc has exited.
pub type OnExit = Box<dyn FnOnce(Arc<Child>, ExitInfo) + Send>;

/// Output pipes given to a forked proc: the read ends, kept here.
pub type Output = Option<(std::process::ChildStdout, std::process::ChildStderr)>;

struct Pending {
    addr: String,
    ready: Completion<Result<()>>,
    on_exit: OnExit,
    reply: mpsc::Sender<Forked>,
}

/// The template's answer to one request; a refusal gives `on_exit` back.
type Forked = std::result::Result<Arc<Child>, (Error, OnExit)>;

#[derive(Default)]
struct Shared {
    /// The request whose reply is awaited (one at a time, see `fork`).
    pending: Option<Pending>,
    /// Forked procs not yet reported exited, by pid.
    running: HashMap<i32, (Arc<Child>, OnExit)>,
    /// The zygote is gone: no more forks.
    dead: bool,
}

/// A running template process and the procs forked from it.
pub struct Zygote {
    /// The bootstrap command and the startup environment it was started with.
    key: Vec<OsString>,
    sock: OwnedFd,
    /// One request in flight at a time.
    requests: Mutex<()>,
    shared: Arc<Mutex<Shared>>,
    process: Arc<Child>,
}

/// Whether a spawn with this environment asks for a zygote and the
/// controller allows it.
pub fn wanted(env: &[(String, String)]) -> bool {
    env.iter().any(|(k, v)| k == ENV_ZYGOTE && v == "1")
        && std::env::var(ENV_USE_ZYGOTE).map_or(true, |v| v != "0")
}

/// Variables read when a process starts (the interpreter's and the dynamic
/// linker's): a zygote serves only spawns that agree with it on them.
fn acts_at_startup(key: &[u8]) -> bool {
    key.starts_with(b"PYTHON") || key.starts_with(b"LD_") || key.starts_with(b"MALLOC_")
}

/// The environment a child started now would get: ours with `extra` on top.
pub fn child_environment(extra: &[(String, String)]) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| !extra.iter().any(|(e, _)| OsString::from(e) == *k))
        .collect();
    env.extend(extra.iter().map(|(k, v)| (k.into(), v.into())));
    env
}

/// The key a zygote is chosen by: the command and the startup variables.
pub fn key_of(argv: &[String], env: &[(OsString, OsString)]) -> Vec<OsString> {
    let mut startup: Vec<OsString> = env
        .iter()
        .filter(|(k, _)| acts_at_startup(k.as_bytes()))
        .map(|(k, v)| {
            let mut s = k.clone();
            s.push("=");
            s.push(v);
            s
        })
        .collect();
    startup.sort();
    argv.iter()
        .map(OsString::from)
        .chain([OsString::new()])
        .chain(startup)
        .collect()
}

fn exit_info(status: i32) -> ExitInfo {
    if libc::WIFEXITED(status) {
        ExitInfo::Code(libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        ExitInfo::Signal(libc::WTERMSIG(status))
    } else {
        ExitInfo::Code(-1)
    }
}

impl Zygote {
    /// Start the template: `argv` with `env` (the spawn's, without any
    /// proc's identity) and the control socket.
    pub fn start(
        argv: &[String],
        env: Vec<(String, String)>,
        key: Vec<OsString>,
    ) -> Result<Arc<Zygote>> {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: fds has room for the two descriptors.
        let rc = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        };
        if rc != 0 {
            return Err(Error::io(
                "cannot create the zygote socket",
                io::Error::last_os_error(),
            ));
        }
        // SAFETY: both descriptors were just created and are owned here.
        let (ours, theirs) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let mut env = env;
        env.retain(|(k, _)| k != ENV_ZYGOTE);
        env.push((ENV_ZYGOTE_FD.to_string(), theirs.as_raw_fd().to_string()));
        let opts = SpawnOpts {
            capture_output: false,
            keep_fd: Some(theirs.as_raw_fd()),
        };
        let (process, _) = crate::process::spawn_child_with(
            argv,
            env,
            "zygote".into(),
            Completion::new(None),
            opts,
            |_, _| {},
        )?;
        drop(theirs);
        let shared = Arc::new(Mutex::new(Shared::default()));
        let reader_fd = ours
            .try_clone()
            .map_err(|e| Error::io("cannot clone the zygote socket", e))?;
        let reader_shared = shared.clone();
        std::thread::Builder::new()
            .name("monarch-zygote".into())
            .spawn(move || read_reports(reader_fd, reader_shared))
            .map_err(|e| Error::io("cannot start the zygote reader", e))?;
        Ok(Arc::new(Zygote {
            key,
            sock: ours,
            requests: Mutex::new(()),
            shared,
            process,
        }))
    }

    /// The key this zygote was started for (see [`key_of`]).
    pub fn key(&self) -> &[OsString] {
        &self.key
    }

    /// Whether it can still fork.
    pub fn is_alive(&self) -> bool {
        !self.shared.lock().dead
    }

    /// Fork one proc with `env` (its whole environment), in `cwd`, its
    /// output piped here when `capture`. Waits up to `timeout` for the
    /// template to answer. On error the proc's `on_exit` is given back, so
    /// the caller can start the proc another way.
    pub fn fork(
        &self,
        env: &[(OsString, OsString)],
        cwd: &std::path::Path,
        capture: bool,
        timeout: Duration,
        proc: NewProc,
    ) -> std::result::Result<(Arc<Child>, Output), (Error, OnExit)> {
        let NewProc {
            addr,
            ready,
            on_exit,
        } = proc;
        let mut msg = vec![b'F'];
        msg.extend_from_slice(cwd.as_os_str().as_bytes());
        msg.push(0);
        for (k, v) in env {
            if k.as_bytes().contains(&0) || v.as_bytes().contains(&0) {
                continue;
            }
            msg.extend_from_slice(k.as_bytes());
            msg.push(b'=');
            msg.extend_from_slice(v.as_bytes());
            msg.push(0);
        }
        if msg.len() > MAX_REQUEST {
            return Err((
                Error::invalid("environment too large for the zygote"),
                on_exit,
            ));
        }
        let pipes = if capture {
            match (pipe(), pipe()) {
                (Ok(o), Ok(e)) => Some((o, e)),
                (Err(e), _) | (_, Err(e)) => {
                    return Err((Error::io("cannot create output pipes", e), on_exit))
                }
            }
        } else {
            None
        };
        let _one = self.requests.lock();
        let (tx, rx) = mpsc::channel();
        {
            let mut s = self.shared.lock();
            if s.dead {
                return Err((
                    Error::new(ErrorKind::Internal, "the zygote is gone"),
                    on_exit,
                ));
            }
            s.pending = Some(Pending {
                addr,
                ready,
                on_exit,
                reply: tx,
            });
        }
        let fds: Vec<RawFd> = pipes
            .iter()
            .flat_map(|((_, ow), (_, ew))| [ow.as_raw_fd(), ew.as_raw_fd()])
            .collect();
        if let Err(e) = send_with_fds(self.sock.as_raw_fd(), &msg, &fds) {
            let p = self.shared.lock().pending.take();
            let on_exit = match p {
                Some(p) => p.on_exit,
                // The reader saw the zygote go first and answered already.
                None => match rx.recv() {
                    Ok(Err((_, on_exit))) => on_exit,
                    _ => Box::new(|_, _| {}),
                },
            };
            return Err((Error::io("cannot reach the zygote", e), on_exit));
        }
        let answer = match rx.recv_timeout(timeout) {
            Ok(a) => a,
            Err(_) => {
                let unanswered = self.shared.lock().pending.take();
                match unanswered {
                    Some(p) => {
                        // No answer in time: this template is of no use.
                        self.process.kill();
                        return Err((
                            Error::new(ErrorKind::Timeout, "the zygote did not answer"),
                            p.on_exit,
                        ));
                    }
                    // Answered between the timeout and the lock.
                    None => rx.recv().unwrap_or_else(|_| {
                        Err((
                            Error::new(ErrorKind::Internal, "zygote reader is gone"),
                            Box::new(|_, _| {}),
                        ))
                    }),
                }
            }
        };
        let child = answer?;
        let output = pipes.map(|((or, _), (er, _))| (or.into(), er.into()));
        Ok((child, output))
    }

    /// Stop the template (its children die with it).
    pub fn kill(&self) {
        self.process.kill();
    }
}

impl Drop for Zygote {
    fn drop(&mut self) {
        self.process.kill();
    }
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: fds has room for the two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both were just created and are owned here.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Send one packet with `fds` attached.
fn send_with_fds(sock: RawFd, msg: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: msg.as_ptr() as *mut _,
        iov_len: msg.len(),
    };
    let mut cmsg = [0u64; 8];
    // SAFETY: msghdr is plain data; every pointer set below outlives the call.
    let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
    hdr.msg_iov = &mut iov;
    hdr.msg_iovlen = 1;
    if !fds.is_empty() {
        let bytes = std::mem::size_of_val(fds) as u32;
        // SAFETY: CMSG_SPACE is a pure computation.
        hdr.msg_controllen = unsafe { libc::CMSG_SPACE(bytes) } as usize;
        hdr.msg_control = cmsg.as_mut_ptr().cast();
        // SAFETY: the control buffer (64 bytes) holds one header and up to
        // eight descriptors; CMSG_FIRSTHDR points into it.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&hdr);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(bytes) as usize;
            std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(c).cast(), fds.len());
        }
    }
    loop {
        // SAFETY: hdr describes valid buffers.
        let n = unsafe { libc::sendmsg(sock, &hdr, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Receive one packet into `buf`; its length (0: the peer closed) and any
/// descriptors that came with it.
fn recv_with_fds(sock: RawFd, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut cmsg = [0u64; 8];
    // SAFETY: msghdr is plain data; every pointer set below outlives the call.
    let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
    hdr.msg_iov = &mut iov;
    hdr.msg_iovlen = 1;
    hdr.msg_control = cmsg.as_mut_ptr().cast();
    hdr.msg_controllen = std::mem::size_of_val(&cmsg);
    let n = loop {
        // SAFETY: hdr describes valid buffers.
        let n = unsafe { libc::recvmsg(sock, &mut hdr, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n as usize;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    let mut fds = Vec::new();
    // SAFETY: walking the control messages the kernel wrote into cmsg.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&hdr);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c) as *const RawFd;
                let count = ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize)
                    / std::mem::size_of::<RawFd>();
                for i in 0..count {
                    fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                }
            }
            c = libc::CMSG_NXTHDR(&hdr, c);
        }
    }
    if hdr.msg_flags & libc::MSG_TRUNC != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "zygote message too large",
        ));
    }
    Ok((n, fds))
}

fn i32_at(b: &[u8], at: usize) -> Option<i32> {
    b.get(at..at + 4)
        .map(|s| i32::from_le_bytes(s.try_into().expect("4 bytes")))
}

/// The controller's reader: answers to requests and exits, until the
/// template is gone; then its procs are reported killed (they die with it).
fn read_reports(sock: OwnedFd, shared: Arc<Mutex<Shared>>) {
    let mut buf = vec![0u8; 4096];
    loop {
        let n = match recv_with_fds(sock.as_raw_fd(), &mut buf) {
            Ok((n, _)) if n > 0 => n,
            _ => break,
        };
        let msg = &buf[..n];
        match (msg[0], i32_at(msg, 1)) {
            (b'P', Some(pid)) => {
                let mut s = shared.lock();
                if let Some(p) = s.pending.take() {
                    let child = Arc::new(Child {
                        addr: p.addr,
                        pid: pid as u32,
                        ready: p.ready,
                        exit: Completion::new(None),
                    });
                    s.running.insert(pid, (child.clone(), p.on_exit));
                    let _ = p.reply.send(Ok(child));
                }
            }
            (b'E', _) => {
                let why = String::from_utf8_lossy(&msg[1..]).into_owned();
                if let Some(p) = shared.lock().pending.take() {
                    let _ = p
                        .reply
                        .send(Err((Error::new(ErrorKind::Internal, why), p.on_exit)));
                }
            }
            (b'X', Some(pid)) => {
                let status = i32_at(msg, 5).unwrap_or(-1);
                let entry = shared.lock().running.remove(&pid);
                if let Some((child, on_exit)) = entry {
                    let exit = exit_info(status);
                    child.exit.complete(exit.clone());
                    on_exit(child, exit);
                }
            }
            _ => tracing::warn!("unexpected message from the zygote"),
        }
    }
    let (pending, running) = {
        let mut s = shared.lock();
        s.dead = true;
        (s.pending.take(), std::mem::take(&mut s.running))
    };
    if let Some(p) = pending {
        let _ = p.reply.send(Err((
            Error::new(ErrorKind::Internal, "the zygote exited"),
            p.on_exit,
        )));
    }
    for (_, (child, on_exit)) in running {
        let exit = ExitInfo::Signal(libc::SIGKILL);
        child.exit.complete(exit.clone());
        on_exit(child, exit);
    }
}

/// How [`serve`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    /// In a forked child that is now a proc: go on and start it.
    Proc,
    /// In the template: the controller closed the socket; exit.
    Closed,
}

/// Serve fork requests on `fd` (the template side, see the module docs).
/// Must be called while this process has one thread.
pub fn serve(fd: RawFd) -> Result<Served> {
    // SAFETY: fcntl on a descriptor number given to us; a bad one fails.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(Error::invalid(format!("{fd} is not an open descriptor")));
    }
    // SAFETY: getpid cannot fail.
    let me = unsafe { libc::getpid() };
    let mut buf = vec![0u8; MAX_REQUEST];
    // Forked children not yet reaped: (pid, pidfd).
    let mut kids: Vec<(i32, OwnedFd)> = Vec::new();
    loop {
        let mut polls: Vec<libc::pollfd> = std::iter::once(fd)
            .chain(kids.iter().map(|(_, p)| p.as_raw_fd()))
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: polls is a valid array of pollfd.
        let rc = unsafe { libc::poll(polls.as_mut_ptr(), polls.len() as libc::nfds_t, -1) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(Error::io("zygote poll", e));
        }
        // Exits first, so a report never follows a fork it raced with.
        let exited: Vec<usize> = (1..polls.len())
            .filter(|&i| polls[i].revents != 0)
            .collect();
        for &i in exited.iter().rev() {
            let (pid, _) = kids[i - 1];
            let mut status = 0;
            // SAFETY: pid is a child of ours not yet reaped.
            if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
                kids.remove(i - 1);
                let mut m = vec![b'X'];
                m.extend_from_slice(&pid.to_le_bytes());
                m.extend_from_slice(&status.to_le_bytes());
                let _ = send_with_fds(fd, &m, &[]);
            }
        }
        if polls[0].revents == 0 {
            continue;
        }
        let (n, fds) = match recv_with_fds(fd, &mut buf) {
            Ok(r) => r,
            Err(e) => return Err(Error::io("zygote read", e)),
        };
        if n == 0 {
            return Ok(Served::Closed);
        }
        if buf[0] != b'F' {
            continue;
        }
        let threads = std::fs::read_dir("/proc/self/task")
            .map(|d| d.count())
            .unwrap_or(0);
        if threads != 1 {
            let _ = send_with_fds(
                fd,
                format!("Ethe zygote has {threads} threads").as_bytes(),
                &[],
            );
            continue;
        }
        // SAFETY: this process has one thread (checked above), so the child
        // is a full copy of it.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            become_proc(me, &buf[1..n], fds);
            return Ok(Served::Proc);
        }
        if pid < 0 {
            let e = io::Error::last_os_error();
            let _ = send_with_fds(fd, format!("Ecannot fork: {e}").as_bytes(), &[]);
            continue;
        }
        drop(fds);
        let pidfd = match crate::process::pidfd_open(pid as u32) {
            Ok(p) => p,
            Err(e) => {
                // Its exit could not be reported: take it back.
                // SAFETY: our own child, not yet reaped.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, std::ptr::null_mut(), 0);
                }
                let _ = send_with_fds(fd, format!("Ecannot watch the child: {e}").as_bytes(), &[]);
                continue;
            }
        };
        kids.push((pid, pidfd));
        let mut m = vec![b'P'];
        m.extend_from_slice(&pid.to_le_bytes());
        let _ = send_with_fds(fd, &m, &[]);
    }
}

/// In the forked child: take the proc's output pipes, close everything
/// else, die with the zygote, take the requested environment and directory.
fn become_proc(zygote: i32, request: &[u8], fds: Vec<OwnedFd>) {
    let mut strings = request.split(|&b| b == 0);
    let cwd = strings.next().unwrap_or_default().to_vec();
    // SAFETY: single-threaded child; plain syscalls on descriptors we own.
    unsafe {
        if let [out, err] = &fds[..] {
            libc::dup2(out.as_raw_fd(), 1);
            libc::dup2(err.as_raw_fd(), 2);
        }
        libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
        std::mem::forget(fds);
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0
            || libc::getppid() != zygote
        {
            libc::_exit(1);
        }
        libc::clearenv();
    }
    for kv in strings.filter(|s| !s.is_empty()) {
        let Some(eq) = kv.iter().position(|&b| b == b'=') else {
            continue;
        };
        let (Ok(k), Ok(v)) = (CString::new(&kv[..eq]), CString::new(&kv[eq + 1..])) else {
            continue;
        };
        // SAFETY: single-threaded child; valid C strings.
        unsafe { libc::setenv(k.as_ptr(), v.as_ptr(), 1) };
    }
    if !cwd.is_empty() {
        let dir = std::path::PathBuf::from(OsString::from_vec(cwd));
        if let Err(e) = std::env::set_current_dir(&dir) {
            eprintln!("monarch: cannot enter {}: {e}", dir.display());
        }
    }
}

/// The zygotes of one runtime, one per bootstrap command and startup
/// environment.
#[derive(Default)]
pub struct Zygotes {
    list: Mutex<Vec<Arc<Zygote>>>,
}

impl Zygotes {
    /// The running zygote for `key`, started with `argv` and `env` when
    /// there is none; `None` when it cannot start (the caller execs).
    pub fn get_or_start(
        &self,
        argv: &[String],
        env: &[(String, String)],
        key: Vec<OsString>,
    ) -> Option<Arc<Zygote>> {
        let mut list = self.list.lock();
        list.retain(|z| z.is_alive());
        if let Some(z) = list.iter().find(|z| z.key() == key.as_slice()) {
            return Some(z.clone());
        }
        match Zygote::start(argv, env.to_vec(), key) {
            Ok(z) => {
                list.push(z.clone());
                Some(z)
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot start a zygote; starting procs with exec");
                None
            }
        }
    }

    /// Stop every zygote (their remaining children die with them).
    pub fn stop_all(&self) {
        for z in self.list.lock().drain(..) {
            z.kill();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn the_key_holds_the_command_and_only_the_startup_variables() {
        let env = |v: &str| {
            vec![
                (OsString::from("PYTHONPATH"), OsString::from(v)),
                (OsString::from("TERM"), OsString::from("xterm")),
                (OsString::from("HOME"), OsString::from("/h")),
                (OsString::from("MONARCH_PROC_RANK"), OsString::from("3")),
            ]
        };
        let argv = [
            "python".to_string(),
            "-m".into(),
            "monarch._bootstrap".into(),
        ];
        assert_eq!(key_of(&argv, &env("/a")), key_of(&argv, &env("/a")));
        assert_ne!(key_of(&argv, &env("/a")), key_of(&argv, &env("/b")));
        let mut other = env("/a");
        other[1].1 = "4".into();
        other[2].1 = "/elsewhere".into();
        assert_eq!(key_of(&argv, &env("/a")), key_of(&argv, &other));
        assert_ne!(key_of(&argv, &env("/a")), key_of(&argv[..2], &env("/a")));
        other[3].1 = "4".into();
        assert_eq!(key_of(&argv, &env("/a")), key_of(&argv, &other));
    }

    #[test]
    fn wait_statuses_read_as_exits() {
        assert_eq!(exit_info(7 << 8), ExitInfo::Code(7));
        assert_eq!(exit_info(libc::SIGKILL), ExitInfo::Signal(libc::SIGKILL));
    }

    #[test]
    fn a_packet_carries_its_descriptors() {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: fds has room for the two descriptors.
        let rc = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        };
        assert_eq!(rc, 0);
        // SAFETY: both were just created and are owned here.
        let (a, b) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let (r, w) = pipe().unwrap();
        send_with_fds(a.as_raw_fd(), b"Fhello", &[w.as_raw_fd()]).unwrap();
        drop(w);
        let mut buf = [0u8; 64];
        let (n, got) = recv_with_fds(b.as_raw_fd(), &mut buf).unwrap();
        assert_eq!(&buf[..n], b"Fhello");
        assert_eq!(got.len(), 1);
        std::fs::File::from(got.into_iter().next().unwrap())
            .write_all(b"through")
            .unwrap();
        let mut out = String::new();
        std::fs::File::from(r).read_to_string(&mut out).unwrap();
        assert_eq!(out, "through");
        drop(a);
        assert_eq!(recv_with_fds(b.as_raw_fd(), &mut buf).unwrap().0, 0);
    }

    #[test]
    fn serving_a_closed_descriptor_is_refused() {
        assert!(serve(-1).is_err());
    }
}
