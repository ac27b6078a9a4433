//! `monarch debug`: the client of a job's debug registry
//! (`monarch_core::debug_protocol`). It joins the job as a peer holding
//! the job secret (its own runtime, on loopback TCP), calls the root
//! controller's built-in debug actor, and reads commands from stdin:
//! `list`, `attach`, `cast`, `continue`, `quit` (as upstream Monarch's
//! debugger), relaying pdb lines of an attached session.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use monarch_core::debug_protocol as proto;
use monarch_core::wire::ActorMeshRef;
use monarch_core::{ActorMesh, CallMode, PointValue, Runtime, Shape};

/// How long one request to the registry may take (it answers at once).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Between two looks at a running session's output.
const POLL: Duration = Duration::from_millis(20);
/// Between two looks at the sessions while waiting for a new one.
const WAIT_POLL: Duration = Duration::from_millis(200);
/// pdb's prompt, which ends a paused session's output.
const PROMPT: &str = "(Pdb) ";

const HELP: &str = "\
monarch_dbg commands:
  list                            list the debug sessions (also: l)
  attach ID | attach ACTOR RANK   attach to a session and type pdb commands to
                                  it; `detach` returns here (also: a)
  cast [ACTOR] ranks(R) CMD       send the pdb command CMD to the sessions of
                                  the ranks R (of ACTOR, or of every actor):
                                  ranks(3), ranks(1,4,6), ranks(0..3) (0 to 3,
                                  both ends), ranks(2:6) or ranks(::2) (Python
                                  slices, end excluded)
  continue                        clear breakpoints and continue every session
                                  (also: c)
  quit                            leave, sessions stay in place (also: q)
  help                            this message (also: h)
";

/// Where the controller is: its address and the socket directory holding
/// its secret file (None for a TCP address).
struct Target {
    addr: String,
    dir: Option<PathBuf>,
}

impl Target {
    /// Whether the controller has exited (its socket is gone).
    fn is_gone(&self) -> bool {
        match self.addr.strip_prefix("unix:") {
            Some(path) => !Path::new(path).exists(),
            None => false,
        }
    }
}

/// The options of `monarch debug`.
pub struct Args {
    controller: Option<String>,
    /// Start only once a session opens that was not open at start (the
    /// controller's own terminal runs the client this way).
    wait: bool,
}

/// Parse `monarch debug [--controller PID|DIR|ADDR]`.
pub fn parse_args(args: &[String]) -> Result<Args, String> {
    let mut controller = None;
    let mut wait = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--wait" {
            wait = true;
        } else if a == "--controller" {
            match it.next() {
                Some(v) if !v.is_empty() => controller = Some(v.clone()),
                _ => return Err("--controller needs a PID, directory or address".into()),
            }
        } else if let Some(v) = a.strip_prefix("--controller=") {
            controller = Some(v.to_string());
        } else {
            return Err(format!("unexpected argument '{a}'"));
        }
    }
    Ok(Args { controller, wait })
}

fn uid() -> u32 {
    // SAFETY: getuid has no preconditions.
    unsafe { libc::getuid() }
}

/// The socket directories of live controllers of this user.
fn live_controllers() -> Vec<(u32, PathBuf)> {
    let base = std::env::var_os("MONARCH_SOCKET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    let mine = format!("monarch-{}", uid());
    let mut out = Vec::new();
    let Ok(tops) = std::fs::read_dir(&base) else {
        return out;
    };
    for top in tops.flatten() {
        let name = top.file_name().to_string_lossy().into_owned();
        if name != mine && !name.starts_with(&format!("{mine}-")) {
            continue;
        }
        let Ok(dirs) = std::fs::read_dir(top.path()) else {
            continue;
        };
        for d in dirs.flatten() {
            let dname = d.file_name().to_string_lossy().into_owned();
            let Some(pid) = dname.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
                continue;
            };
            let alive = Path::new(&format!("/proc/{pid}")).exists();
            if alive && d.path().join("controller.sock").exists() {
                out.push((pid, d.path()));
            }
        }
    }
    out.sort();
    out
}

/// The controller named by `--controller` (a pid, a socket directory, or
/// an address), or the only live one of this user.
fn find_target(which: Option<&str>) -> Result<Target, String> {
    let in_dir = |dir: PathBuf| Target {
        addr: format!("unix:{}/controller.sock", dir.display()),
        dir: Some(dir),
    };
    match which {
        Some(a) if a.starts_with("tcp:") => Ok(Target {
            addr: a.to_string(),
            dir: None,
        }),
        Some(a) if a.starts_with("unix:") => {
            let path = PathBuf::from(&a["unix:".len()..]);
            Ok(Target {
                addr: a.to_string(),
                dir: path.parent().map(Path::to_path_buf),
            })
        }
        Some(a) => match a.parse::<u32>() {
            Ok(pid) => live_controllers()
                .into_iter()
                .find(|(p, _)| *p == pid)
                .map(|(_, d)| in_dir(d))
                .ok_or_else(|| format!("no running controller with pid {pid} of this user")),
            Err(_) => {
                let dir = PathBuf::from(a);
                if dir.join("controller.sock").exists() {
                    Ok(in_dir(dir))
                } else {
                    Err(format!("{a} is not a controller's socket directory"))
                }
            }
        },
        None => {
            let mut all = live_controllers();
            match all.len() {
                0 => Err("no running controller of this user found (is the job running?)".into()),
                1 => Ok(in_dir(all.remove(0).1)),
                _ => Err(format!(
                    "several controllers are running; choose one with --controller PID:\n{}",
                    all.iter()
                        .map(|(p, d)| format!("  {p}  {}", d.display()))
                        .collect::<Vec<_>>()
                        .join("\n")
                )),
            }
        }
    }
}

/// The job secret: MONARCH_JOB_TOKEN, else the controller's secret file.
fn secret(t: &Target) -> Result<String, String> {
    if let Ok(s) = std::env::var(monarch_core::runtime::ENV_JOB_TOKEN) {
        if !s.is_empty() {
            return Ok(s);
        }
    }
    let Some(dir) = &t.dir else {
        return Err(
            "set MONARCH_JOB_TOKEN to the job secret to reach a controller over TCP".into(),
        );
    };
    let path = dir.join(proto::SECRET_FILE);
    std::fs::read_to_string(&path)
        .map(|s| s.trim().to_string())
        .map_err(|e| {
            format!(
                "cannot read the job secret from {} ({e}); set MONARCH_JOB_TOKEN",
                path.display()
            )
        })
}

/// A connection to the registry.
struct Registry {
    _rt: Runtime,
    mesh: ActorMesh,
}

impl Registry {
    fn connect(t: &Target) -> Result<Registry, String> {
        let secret = secret(t)?;
        let (bind, ip) = if t.addr.starts_with("tcp:") {
            ("tcp:0.0.0.0:0", monarch_core::transport::default_host_ip())
        } else {
            ("tcp:127.0.0.1:0", std::net::IpAddr::from([127, 0, 0, 1]))
        };
        let rt = Runtime::listen_tcp(bind, ip, secret).map_err(|e| e.to_string())?;
        let r = ActorMeshRef {
            name: "monarch_debug".into(),
            key: proto::DEBUG_ACTOR.into(),
            procs: vec![t.addr.clone()],
            shape: Shape::dense(Vec::new(), Vec::new()).map_err(|e| e.to_string())?,
        };
        let mesh = ActorMesh::from_ref(&rt, &r.encode()).map_err(|e| e.to_string())?;
        Ok(Registry { _rt: rt, mesh })
    }

    fn request(&self, method: &str, parts: &[&str]) -> Result<Vec<Vec<u8>>, String> {
        let parts: Vec<&[u8]> = parts.iter().map(|p| p.as_bytes()).collect();
        let fut = self
            .mesh
            .call(method, &parts, CallMode::One)
            .map_err(|e| e.to_string())?
            .ok_or("no reply future")?;
        if !fut.wait(Some(REQUEST_TIMEOUT)) {
            return Err(format!(
                "the controller did not answer '{method}' in {REQUEST_TIMEOUT:?}"
            ));
        }
        let vm = fut.take().ok_or("no reply")?.map_err(|e| e.to_string())?;
        match vm.values.into_iter().next() {
            Some(PointValue::Ok(p)) => Ok(p),
            Some(PointValue::Err { message, .. }) => Err(message),
            None => Err("empty reply".into()),
        }
    }

    fn sessions(&self) -> Result<Vec<Session>, String> {
        let mut v: Vec<Session> = self
            .request(proto::LIST, &[])?
            .iter()
            .filter_map(|row| Session::parse(&String::from_utf8_lossy(row)))
            .collect();
        v.sort_by(|a, b| (&a.actor, a.rank_num(), a.id).cmp(&(&b.actor, b.rank_num(), b.id)));
        Ok(v)
    }

    /// Output of session `id` after `cursor`: (next cursor, state, text).
    fn output(&self, id: u64, cursor: &str) -> Result<(String, String, String), String> {
        let p = self.request(proto::OUTPUT, &[&id.to_string(), cursor])?;
        let s = |i: usize| {
            p.get(i)
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default()
        };
        Ok((s(0), s(1), s(2)))
    }

    /// Wait until session `id` stops running; its output from `cursor` on.
    fn follow(&self, id: u64, mut cursor: String) -> Result<String, String> {
        let mut all = String::new();
        loop {
            let (next, state, text) = self.output(id, &cursor)?;
            all.push_str(&text);
            cursor = next;
            if state != proto::RUNNING {
                return Ok(all);
            }
            std::thread::sleep(POLL);
        }
    }
}

fn emit(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

struct Session {
    id: u64,
    actor: String,
    rank: String,
    coords: String,
    host: String,
    location: String,
    state: String,
}

impl Session {
    fn parse(row: &str) -> Option<Session> {
        let f: Vec<&str> = row.split('\t').collect();
        if f.len() != proto::FIELDS.len() {
            return None;
        }
        Some(Session {
            id: f[0].parse().ok()?,
            actor: f[1].into(),
            rank: f[2].into(),
            coords: f[3].into(),
            host: f[4].into(),
            location: f[5].into(),
            state: f[6].into(),
        })
    }

    fn rank_num(&self) -> u64 {
        self.rank.parse().unwrap_or(u64::MAX)
    }
}

fn print_table(sessions: &[Session]) {
    if sessions.is_empty() {
        println!("no debug sessions");
        return;
    }
    let head = ["ID", "Actor", "Rank", "Coords", "Host", "Location", "State"];
    let rows: Vec<[String; 7]> = sessions
        .iter()
        .map(|s| {
            [
                s.id.to_string(),
                s.actor.clone(),
                s.rank.clone(),
                s.coords.clone(),
                s.host.clone(),
                s.location.clone(),
                s.state.clone(),
            ]
        })
        .collect();
    let mut w = head.map(str::len);
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let cells: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<width$}", width = w[i]))
            .collect();
        println!("{}", cells.join("  ").trim_end());
    };
    line(head.to_vec());
    for r in &rows {
        line(r.iter().map(String::as_str).collect());
    }
}

/// The ranks of `ranks(SPEC)`: `n`, `a..b` (both ends), `a..=b`,
/// `a:b[:step]` (a Python slice), separated by commas.
fn parse_ranks(spec: &str) -> Result<Vec<std::ops::RangeInclusive<u64>>, String> {
    let num = |s: &str| {
        s.trim()
            .parse::<u64>()
            .map_err(|_| format!("bad rank '{}' in ranks({spec})", s.trim()))
    };
    let mut out = Vec::new();
    for item in spec.split(',').map(str::trim) {
        if item.is_empty() {
            return Err(format!("empty item in ranks({spec})"));
        }
        if let Some((a, b)) = item.split_once("..") {
            let b = b.strip_prefix('=').unwrap_or(b);
            out.push(num(a)?..=num(b)?);
        } else if item.contains(':') {
            let f: Vec<&str> = item.split(':').collect();
            if f.len() > 3 {
                return Err(format!("bad slice '{item}' in ranks({spec})"));
            }
            let start = if f[0].trim().is_empty() {
                0
            } else {
                num(f[0])?
            };
            let stop = if f[1].trim().is_empty() {
                u64::MAX
            } else {
                num(f[1])?
            };
            let step = match f.get(2) {
                Some(s) if !s.trim().is_empty() => num(s)?,
                _ => 1,
            };
            if step == 0 {
                return Err(format!("slice step 0 in ranks({spec})"));
            }
            if stop == u64::MAX && step == 1 {
                out.push(start..=u64::MAX);
            } else {
                // An open end with a step: ranks up to a bound no job reaches.
                let stop = stop.min(start.saturating_add(1 << 20));
                out.extend((start..stop).step_by(step as usize).map(|r| r..=r));
            }
        } else {
            let n = num(item)?;
            out.push(n..=n);
        }
    }
    Ok(out)
}

/// `cast [ACTOR] ranks(SPEC) CMD` -> (actor, ranks, command).
type CastArgs = (Option<String>, Vec<std::ops::RangeInclusive<u64>>, String);

fn parse_cast(rest: &str) -> Result<CastArgs, String> {
    let usage = "usage: cast [ACTOR] ranks(RANKS) COMMAND";
    let start = rest.find("ranks(").ok_or(usage)?;
    let actor = rest[..start].trim();
    let after = &rest[start + "ranks(".len()..];
    let close = after.find(')').ok_or(usage)?;
    let ranks = parse_ranks(&after[..close])?;
    let cmd = after[close + 1..].trim();
    if cmd.is_empty() {
        return Err(usage.into());
    }
    let actor = (!actor.is_empty()).then(|| actor.to_string());
    Ok((actor, ranks, cmd.to_string()))
}

fn read_line(prompt: &str) -> Option<String> {
    print!("{prompt}");
    let _ = std::io::stdout().flush();
    let mut line = String::new();
    match std::io::stdin().lock().read_line(&mut line) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(line.trim_end_matches(['\n', '\r']).to_string()),
    }
}

/// Attach to session `s`: relay lines until `detach`, end of input or the
/// session ends.
fn attach(reg: &Registry, s: &Session) -> Result<(), String> {
    println!(
        "Attached to debug session {} ({} rank {}, host {}); `detach` to leave",
        s.id, s.actor, s.rank, s.host
    );
    let mut cursor = proto::SINCE_INPUT.to_string();
    loop {
        let (next, state, text) = reg.output(s.id, &cursor)?;
        emit(&text);
        cursor = next;
        if state == proto::ENDED {
            println!("Debug session {} ended", s.id);
            return Ok(());
        }
        if state == proto::RUNNING {
            std::thread::sleep(POLL);
            continue;
        }
        let Some(line) = read_line("") else {
            break;
        };
        if line.trim() == "detach" {
            break;
        }
        reg.request(proto::INPUT, &[&s.id.to_string(), &line])?;
    }
    println!("Detached from debug session {}", s.id);
    Ok(())
}

/// Send `cmd` to each of `targets`, wait until each has handled it, and
/// return what each printed (without its next prompt).
fn cast(reg: &Registry, targets: &[&Session], cmd: &str) -> Result<Vec<String>, String> {
    for s in targets {
        reg.request(proto::INPUT, &[&s.id.to_string(), cmd])?;
    }
    let mut out = Vec::new();
    for s in targets {
        let text = reg.follow(s.id, proto::SINCE_INPUT.into())?;
        out.push(text.strip_suffix(PROMPT).unwrap_or(&text).to_string());
    }
    Ok(out)
}

/// Run one command line; Ok(false) to leave (`quit`, or `continue` when
/// `leave_on_continue`).
fn command(reg: &Registry, line: &str, leave_on_continue: bool) -> Result<bool, String> {
    let line = line.trim();
    let (word, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
    let rest = rest.trim();
    match word {
        "" => {}
        "h" | "help" => print!("{HELP}"),
        "l" | "list" => print_table(&reg.sessions()?),
        "q" | "quit" | "exit" | "detach" => return Ok(false),
        "a" | "attach" => {
            let sessions = reg.sessions()?;
            let args: Vec<&str> = rest.split_whitespace().collect();
            let found = match args.as_slice() {
                [id] => {
                    let id: u64 = id.parse().map_err(|_| format!("bad session id '{id}'"))?;
                    sessions.iter().find(|s| s.id == id)
                }
                [actor, rank] => sessions
                    .iter()
                    .find(|s| s.actor == *actor && s.rank == *rank),
                _ => return Err("usage: attach ID | attach ACTOR RANK".into()),
            };
            let s = found.ok_or_else(|| format!("no debug session {rest} (see `list`)"))?;
            attach(reg, s)?;
        }
        "cast" => {
            let (actor, ranks, cmd) = parse_cast(rest)?;
            let sessions = reg.sessions()?;
            let targets: Vec<&Session> = sessions
                .iter()
                .filter(|s| actor.as_ref().is_none_or(|a| *a == s.actor))
                .filter(|s| ranks.iter().any(|r| r.contains(&s.rank_num())))
                .collect();
            if targets.is_empty() {
                return Err("no debug session matches (see `list`)".into());
            }
            for (s, text) in targets.iter().zip(cast(reg, &targets, &cmd)?) {
                for line in text.lines() {
                    println!("[{} {}] {line}", s.actor, s.rank);
                }
            }
        }
        "c" | "continue" => {
            let sessions = reg.sessions()?;
            let all: Vec<&Session> = sessions.iter().collect();
            cast(reg, &all, "clear")?;
            for s in &all {
                reg.request(proto::INPUT, &[&s.id.to_string(), "continue"])?;
            }
            println!("Continued {} session(s)", all.len());
            if leave_on_continue {
                return Ok(false);
            }
        }
        other => return Err(format!("unknown command '{other}' (try `help`)")),
    }
    Ok(true)
}

/// Wait until a session that is not in `before` waits for input; the
/// sessions then, or None once the controller cannot be reached (it
/// exited).
fn wait_for_new(reg: &Registry, before: &[Session]) -> Option<Vec<Session>> {
    let seen: std::collections::HashSet<u64> = before.iter().map(|s| s.id).collect();
    loop {
        std::thread::sleep(WAIT_POLL);
        let now = reg.sessions().ok()?;
        if now
            .iter()
            .any(|s| !seen.contains(&s.id) && s.state == proto::WAITING)
        {
            return Some(now);
        }
    }
}

/// `monarch debug`.
pub fn run(args: &Args) -> ExitCode {
    if args.wait {
        // Run by the controller on its terminal: die with the thread that
        // started this process.
        // SAFETY: prctl with PR_SET_PDEATHSIG and a signal number has no
        // memory effects.
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    }
    let target = match find_target(args.controller.as_deref()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("monarch debug: {e}");
            return ExitCode::from(1);
        }
    };
    let reg = match Registry::connect(&target) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("monarch debug: {e}");
            return ExitCode::from(1);
        }
    };
    // Reach the controller now: a wrong secret or a dead job fails here.
    let sessions = match reg.sessions() {
        Ok(s) => s,
        Err(e) => {
            eprintln!(
                "monarch debug: cannot reach the controller at {}: {e}",
                target.addr
            );
            return ExitCode::from(1);
        }
    };
    let sessions = if args.wait {
        match wait_for_new(&reg, &sessions) {
            Some(s) => s,
            None => return ExitCode::from(3),
        }
    } else {
        sessions
    };
    println!("************************ MONARCH DEBUGGER ************************");
    println!(
        "Controller {}: {} debug session(s).",
        target.addr,
        sessions.len()
    );
    println!("Enter 'help' for a list of commands, 'list' to show the sessions.");
    if args.wait {
        print_table(&sessions);
    }
    while let Some(line) = read_line("monarch_dbg> ") {
        match command(&reg, &line, args.wait) {
            Ok(true) => {}
            Ok(false) => return ExitCode::SUCCESS,
            Err(_) if target.is_gone() => {
                println!("The controller has exited.");
                return ExitCode::SUCCESS;
            }
            Err(e) => println!("error: {e}"),
        }
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranks(spec: &str) -> Vec<u64> {
        let r = parse_ranks(spec).unwrap();
        (0..10)
            .filter(|n| r.iter().any(|x| x.contains(n)))
            .collect()
    }

    #[test]
    fn rank_sets() {
        assert_eq!(ranks("0..3"), [0, 1, 2, 3]);
        assert_eq!(ranks("2..=3"), [2, 3]);
        assert_eq!(ranks("1,4,6"), [1, 4, 6]);
        assert_eq!(ranks("5"), [5]);
        assert_eq!(ranks("2:5"), [2, 3, 4]);
        assert_eq!(ranks("::3"), [0, 3, 6, 9]);
        assert_eq!(ranks("7:"), [7, 8, 9]);
        assert!(parse_ranks("x").is_err());
        assert!(parse_ranks("1::0").is_err());
        assert!(parse_ranks("").is_err());
    }

    #[test]
    fn cast_commands() {
        let (a, r, c) = parse_cast("ranks(0..1) bt").unwrap();
        assert_eq!((a, c), (None, "bt".to_string()));
        assert_eq!(r, vec![0..=1]);
        let (a, _, c) = parse_cast("Trainer ranks(1) p x + 1").unwrap();
        assert_eq!((a.as_deref(), c.as_str()), (Some("Trainer"), "p x + 1"));
        assert!(parse_cast("ranks(1)").is_err());
        assert!(parse_cast("bt").is_err());
    }
}
