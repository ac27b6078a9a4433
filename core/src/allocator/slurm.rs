//! The SLURM allocator: start one host agent per node with `srun` and
//! gather the addresses the agents report.
//!
//! One `srun` process does everything: inside an allocation (`SLURM_JOB_ID`
//! set, e.g. under `salloc` or `sbatch`) it starts a job step there; outside
//! one it asks SLURM for a new allocation of `nodes` nodes and starts the
//! step in it. The step runs one task per node, each the agent command (e.g.
//! `monarch host --listen 0.0.0.0:0`). Each agent prints
//! `MONARCH_HOST_READY <ip>:<port>` on stdout once it listens; `srun
//! --label` prefixes every line with the task number, so the addresses come
//! back in task order (task i runs on the i-th node of the step).
//!
//! The job secret reaches the agents through the environment of `srun`
//! (`--export=ALL`), never through a command line.
//!
//! `srun` is a child of this process: [`SlurmAgents`] stops it on drop
//! (SIGTERM, which makes srun cancel the step and, if it made the
//! allocation, the job; SIGKILL after a grace period), and it gets SIGTERM
//! from the kernel if this process dies (`PR_SET_PDEATHSIG`), so neither
//! agents nor allocations outlive the controller.

use parking_lot::{Condvar, Mutex};
use std::collections::{BTreeMap, VecDeque};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind, Result};
use crate::host::HostMesh;
use crate::progress::{self, ProgressKind};
use crate::runtime::Runtime;

/// The line an agent prints once it listens.
pub(crate) const READY_PREFIX: &str = "MONARCH_HOST_READY ";

/// How many lines of srun's and the agents' output are kept for error
/// messages.
const TAIL_LINES: usize = 30;

/// How long [`SlurmAgents::stop`] waits for srun after SIGTERM before
/// SIGKILL. srun itself waits up to the cluster's `KillWait` for the tasks.
const STOP_GRACE: Duration = Duration::from_secs(15);

/// What to ask SLURM for.
#[derive(Debug, Clone)]
pub struct SlurmOptions {
    /// Number of nodes (one agent each). 0 means all nodes of the current
    /// allocation (`SLURM_JOB_NUM_NODES`); outside an allocation it is an
    /// error.
    pub nodes: usize,
    /// The agent command run on every node, e.g.
    /// `["/path/to/monarch", "host", "--listen", "0.0.0.0:0"]`. It must
    /// exist at that path on every node.
    pub agent_argv: Vec<String>,
    /// The srun program; `None` is `$MONARCH_SRUN` or else `srun` on PATH.
    pub srun: Option<String>,
    /// More srun options, placed before the agent command, e.g.
    /// `--partition=gpu`, `--time=1:00:00`, `--gpus-per-node=8`,
    /// `--cpus-per-task=32`.
    pub srun_args: Vec<String>,
    /// Environment added to srun's, and so to the agents' (`--export=ALL`),
    /// e.g. `MONARCH_JOB_TOKEN`.
    pub env: Vec<(String, String)>,
    /// How long to wait for every agent to be ready, including the time the
    /// job waits in the queue.
    pub timeout: Duration,
    /// The job (or step) name; `None` is `monarch-hosts`.
    pub job_name: Option<String>,
}

impl SlurmOptions {
    /// Options for `nodes` nodes, each running `agent_argv` (the host agent command).
    pub fn new(nodes: usize, agent_argv: Vec<String>) -> SlurmOptions {
        SlurmOptions {
            nodes,
            agent_argv,
            srun: None,
            srun_args: Vec::new(),
            env: Vec::new(),
            timeout: Duration::from_secs(300),
            job_name: None,
        }
    }

    /// A variable of srun's environment: from `env`, else this process's.
    fn var(&self, name: &str) -> Option<String> {
        self.env
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var(name).ok())
    }

    /// Whether srun will run inside an existing allocation (`SLURM_JOB_ID`
    /// set in its environment) rather than ask for one.
    pub(crate) fn in_allocation(&self) -> bool {
        self.var("SLURM_JOB_ID").is_some_and(|j| !j.is_empty())
    }

    /// The full srun command line (without the environment).
    pub fn command(&self) -> Result<Vec<String>> {
        if self.agent_argv.is_empty() {
            return Err(Error::invalid("slurm: the agent command is empty"));
        }
        let in_alloc = self.in_allocation();
        let nodes = match self.nodes {
            0 if in_alloc => self
                .var("SLURM_JOB_NUM_NODES")
                .or_else(|| self.var("SLURM_NNODES"))
                .and_then(|n| n.trim().parse::<usize>().ok())
                .filter(|n| *n > 0)
                .ok_or_else(|| {
                    Error::invalid(
                        "slurm: nodes=0 (all nodes of the allocation) but SLURM_JOB_NUM_NODES is not set",
                    )
                })?,
            0 => {
                return Err(Error::invalid(
                    "slurm: nodes must be > 0 outside an allocation (nodes=0 means all nodes of the current allocation, and SLURM_JOB_ID is not set)",
                ))
            }
            n => n,
        };
        let srun = match &self.srun {
            Some(s) => s.clone(),
            None => std::env::var("MONARCH_SRUN").unwrap_or_else(|_| "srun".to_string()),
        };
        let mut argv = vec![
            srun,
            format!("--nodes={nodes}"),
            format!("--ntasks={nodes}"),
            "--ntasks-per-node=1".to_string(),
            format!(
                "--job-name={}",
                self.job_name.as_deref().unwrap_or("monarch-hosts")
            ),
            // Task numbers in front of every output line: how READY lines
            // are told apart.
            "--label".to_string(),
            // srun then reports the job and step ids, the node of each
            // task and every task's end, even a clean one.
            "--verbose".to_string(),
            // The secret travels in the environment; make sure it is passed
            // whatever SLURM_EXPORT_ENV says.
            "--export=ALL".to_string(),
            // One agent exiting must not take the others down: losing a
            // host is a supervision event, not the end of the job.
            "--kill-on-bad-exit=0".to_string(),
        ];
        // A controller that itself runs in a job step (`srun python
        // main.py`) holds that step's CPUs: without --overlap the agents'
        // step would wait for them forever.
        if in_alloc
            && self.var("SLURM_STEP_ID").is_some_and(|s| !s.is_empty())
            && !self.srun_args.iter().any(|a| a == "--overlap")
        {
            argv.push("--overlap".to_string());
        }
        argv.extend(self.srun_args.iter().cloned());
        argv.extend(self.agent_argv.iter().cloned());
        Ok(argv)
    }
}

/// What the output readers have seen so far.
#[derive(Default)]
struct Seen {
    /// Task number -> advertised address.
    ready: BTreeMap<usize, String>,
    /// Task number -> how it ended, for tasks srun reported as ended.
    ended: BTreeMap<usize, String>,
    /// A READY line we could not parse.
    malformed: Option<String>,
    /// The job id, once srun said it.
    job_id: Option<String>,
    /// The step id (`<job>.<step>`), once srun said it.
    step_id: Option<String>,
    /// Task number -> node name, from srun's "launching" lines.
    nodes: BTreeMap<usize, String>,
    /// srun is still waiting for resources.
    pending: bool,
    /// srun is printing its option table (--verbose): kept out of the tail.
    in_options: bool,
    /// Last lines of srun's stderr and of the agents' output.
    tail: VecDeque<String>,
    /// Both pipes hit end of file (srun exited).
    eof: usize,
}

impl Seen {
    fn push_tail(&mut self, line: String) {
        if self.tail.len() == TAIL_LINES {
            self.tail.pop_front();
        }
        self.tail.push_back(line);
    }

    fn tail_text(&self) -> String {
        if self.tail.is_empty() {
            return "(srun printed nothing)".to_string();
        }
        self.tail.iter().cloned().collect::<Vec<_>>().join("\n")
    }
}

struct Shared {
    seen: Mutex<Seen>,
    changed: Condvar,
}

/// A running srun step with one host agent per node.
pub struct SlurmAgents {
    addrs: Vec<String>,
    child: Mutex<Option<std::process::Child>>,
    shared: Arc<Shared>,
    pid: u32,
    /// Inside an existing allocation: its job id.
    alloc_job: Option<String>,
}

impl std::fmt::Debug for SlurmAgents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlurmAgents")
            .field("addrs", &self.addrs)
            .field("srun_pid", &self.pid)
            .field("job_id", &self.job_id())
            .finish()
    }
}

impl SlurmAgents {
    /// Start srun and wait until every agent printed its READY line. On any
    /// failure srun is stopped before this returns, and the error says what
    /// srun and the agents printed last.
    pub fn start(opts: &SlurmOptions) -> Result<SlurmAgents> {
        let argv = opts.command()?;
        let nodes = argv
            .iter()
            .find_map(|a| a.strip_prefix("--ntasks="))
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or(opts.nodes);
        let env = opts.env.clone();
        let spawn_argv = argv.clone();
        let spawned = crate::process::spawn_on_spawner(move || {
            let parent = std::process::id() as libc::pid_t;
            let mut cmd = Command::new(&spawn_argv[0]);
            cmd.args(&spawn_argv[1..])
                .envs(env)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            // SAFETY: between fork and exec only async-signal-safe calls
            // (prctl, getppid, _exit).
            unsafe {
                cmd.pre_exec(move || {
                    // SIGTERM, not SIGKILL: srun then cancels the step (and
                    // the job it made) instead of leaving them to time out.
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    if libc::getppid() != parent {
                        libc::_exit(1);
                    }
                    Ok(())
                });
            }
            cmd.spawn()
        })?;
        let mut child = spawned.map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::new(
                    ErrorKind::Io,
                    format!(
                        "slurm: cannot run {:?}: not found (is SLURM installed and srun on PATH? set MONARCH_SRUN to its path)",
                        argv[0]
                    ),
                )
            } else {
                Error::io(&format!("slurm: cannot run {:?}", argv[0]), e)
            }
        })?;
        let shared = Arc::new(Shared {
            seen: Mutex::new(Seen::default()),
            changed: Condvar::new(),
        });
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        let pid = child.id();
        spawn_reader(stdout.into(), shared.clone(), false)?;
        spawn_reader(stderr.into(), shared.clone(), true)?;
        let agents = SlurmAgents {
            addrs: Vec::new(),
            child: Mutex::new(Some(child)),
            shared,
            pid,
            alloc_job: opts
                .in_allocation()
                .then(|| opts.var("SLURM_JOB_ID"))
                .flatten(),
        };
        tracing::info!(srun = ?argv, "slurm: starting {nodes} host agents");
        agents.gather(nodes, opts.timeout)
    }

    fn gather(mut self, nodes: usize, timeout: Duration) -> Result<SlurmAgents> {
        enum Failed {
            Malformed(String),
            EndedEarly(usize, String),
            SrunExited,
            TimedOut,
        }
        let deadline = Instant::now() + timeout;
        let shared = self.shared.clone();
        let progress = progress::start(
            ProgressKind::SlurmAllocation,
            "SLURM allocation",
            nodes as u64,
        );
        let mut seen = shared.seen.lock();
        let failed = loop {
            progress.set_state(&queue_state(&seen));
            progress.set_done(seen.ready.len() as u64);
            if let Some(line) = &seen.malformed {
                break Failed::Malformed(line.clone());
            }
            if let Some((task, how)) = seen.ended.iter().find(|(t, _)| !seen.ready.contains_key(t))
            {
                break Failed::EndedEarly(*task, how.clone());
            }
            if seen.ready.len() >= nodes {
                self.addrs = seen.ready.values().take(nodes).cloned().collect();
                drop(seen);
                tracing::info!(addrs = ?self.addrs, "slurm: host agents ready");
                return Ok(self);
            }
            if seen.eof >= 2 {
                break Failed::SrunExited;
            }
            let now = Instant::now();
            if now >= deadline {
                break Failed::TimedOut;
            }
            // Woken by srun's output, and each second for the time waited.
            let tick = (deadline - now).min(Duration::from_secs(1));
            shared.changed.wait_for(&mut seen, tick);
        };
        progress.finish();
        let (ready, pending) = (seen.ready.len(), seen.pending);
        drop(seen);
        // Stop srun first, then read what it and the agents said last: the
        // output of a task that failed may still be on its way.
        let status = if matches!(failed, Failed::SrunExited) {
            self.wait_exit(Duration::from_secs(5))
        } else {
            self.stop();
            None
        };
        let seen = {
            let deadline = Instant::now() + Duration::from_secs(2);
            let mut seen = shared.seen.lock();
            while seen.eof < 2 && Instant::now() < deadline {
                shared
                    .changed
                    .wait_for(&mut seen, Duration::from_millis(100));
            }
            seen
        };
        let tail = seen.tail_text();
        let job = seen.job_id.clone();
        drop(seen);
        let out = "srun and agent output (last lines)";
        Err(match failed {
            Failed::Malformed(line) => Error::new(
                ErrorKind::ProcFailed,
                format!("slurm: an agent printed a malformed READY line: {line:?}; {out}:\n{tail}"),
            ),
            Failed::EndedEarly(task, how) => Error::new(
                ErrorKind::ProcFailed,
                format!(
                    "slurm: the host agent of task {task} ended before it was ready ({how}); {ready} of {nodes} agents ready; {out}:\n{tail}"
                ),
            ),
            Failed::SrunExited => Error::new(
                ErrorKind::ProcFailed,
                format!(
                    "slurm: srun {} before all host agents were ready ({ready} of {nodes}); {out}:\n{tail}",
                    describe_status(status)
                ),
            ),
            Failed::TimedOut => {
                let state = match (job, pending) {
                    (Some(j), true) => format!("job {j} was still waiting for resources"),
                    (None, true) => "the job was still waiting for resources".to_string(),
                    (Some(j), false) => format!("job {j}"),
                    (None, false) => "no job id seen".to_string(),
                };
                Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "slurm: timed out after {:.1} s waiting for {nodes} host agents ({ready} ready; {state}); {out}:\n{tail}",
                        timeout.as_secs_f64()
                    ),
                )
            }
        })
    }

    /// The agents' advertised addresses (`ip:port`), in task order.
    pub fn addrs(&self) -> &[String] {
        &self.addrs
    }

    /// The SLURM job id (as srun reported it, or the allocation's).
    pub fn job_id(&self) -> Option<String> {
        let seen = self.shared.seen.lock();
        seen.job_id.clone().or_else(|| self.alloc_job.clone())
    }

    /// The step id `<job>.<step>` of the agents, as srun reported it.
    pub fn step_id(&self) -> Option<String> {
        let seen = self.shared.seen.lock();
        seen.step_id.clone()
    }

    /// Whether the agents run in an allocation that existed before (so
    /// stopping them ends only their step, not the job).
    pub fn in_existing_allocation(&self) -> bool {
        self.alloc_job.is_some()
    }

    /// The process id of srun.
    pub fn srun_pid(&self) -> u32 {
        self.pid
    }

    /// The node name of each agent, in task order (as srun reported them;
    /// empty if it did not).
    pub fn nodes(&self) -> Vec<String> {
        let seen = self.shared.seen.lock();
        seen.nodes.values().cloned().collect()
    }

    /// Tasks srun reported as ended (task number -> how), e.g. an agent
    /// that was killed.
    pub fn ended_tasks(&self) -> BTreeMap<usize, String> {
        let seen = self.shared.seen.lock();
        seen.ended.clone()
    }

    /// Whether srun is still running.
    pub fn is_running(&self) -> bool {
        let mut child = self.child.lock();
        match child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Stop the agents: SIGTERM to srun (it signals the tasks and ends the
    /// step, and the job if it made it), SIGKILL after a grace period.
    /// Returns once srun has exited. Idempotent.
    pub fn stop(&self) {
        let running = {
            let mut child = self.child.lock();
            match child.as_mut() {
                Some(c) => matches!(c.try_wait(), Ok(None)),
                None => false,
            }
        };
        if running {
            // SAFETY: plain syscall on our unreaped child.
            unsafe { libc::kill(self.pid as libc::pid_t, libc::SIGTERM) };
            if self.wait_exit(STOP_GRACE).is_none() {
                tracing::warn!(
                    pid = self.pid,
                    "slurm: srun still running after SIGTERM: SIGKILL"
                );
                self.kill();
                self.wait_exit(Duration::from_secs(10));
                self.scancel();
            }
        }
    }

    /// After srun had to be SIGKILLed: cancel its step (inside an
    /// allocation) or its job (one srun made), so no agent outlives it.
    fn scancel(&self) {
        let target = {
            let seen = self.shared.seen.lock();
            if self.alloc_job.is_some() {
                seen.step_id.clone()
            } else {
                seen.job_id.clone()
            }
        };
        if let Some(target) = target {
            let scancel = std::env::var("MONARCH_SCANCEL").unwrap_or_else(|_| "scancel".into());
            let status = Command::new(&scancel)
                .arg(&target)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            tracing::warn!(?status, "slurm: scancel {target}");
        }
    }

    fn kill(&self) {
        let mut child = self.child.lock();
        if let Some(c) = child.as_mut() {
            let _ = c.kill();
        }
    }

    /// Wait up to `timeout` for srun to exit; its status, or None if it is
    /// still running.
    fn wait_exit(&self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        let mut sleep = Duration::from_millis(1);
        loop {
            {
                let mut child = self.child.lock();
                match child.as_mut().map(|c| c.try_wait()) {
                    Some(Ok(Some(status))) => return Some(status),
                    Some(Ok(None)) => {}
                    _ => return None,
                }
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(sleep);
            sleep = (sleep * 2).min(Duration::from_millis(50));
        }
    }
}

impl Drop for SlurmAgents {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A host mesh on SLURM nodes: the agents srun started, attached.
///
/// Dropping it (or [`SlurmJob::stop`]) stops the agents, and with them
/// every proc they started; the [`HostMesh`] and proc meshes obtained from
/// it then fail like meshes of lost hosts.
pub struct SlurmJob {
    agents: SlurmAgents,
    mesh: HostMesh,
}

impl std::fmt::Debug for SlurmJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlurmJob")
            .field("agents", &self.agents)
            .finish()
    }
}

impl SlurmJob {
    /// Start the agents (see [`SlurmAgents::start`]) with this runtime's
    /// job secret in their environment (`MONARCH_JOB_TOKEN`), and attach
    /// them as a host mesh of dimension `hosts`, in task (node) order.
    pub fn start(rt: &Runtime, opts: &SlurmOptions) -> Result<SlurmJob> {
        let mut opts = opts.clone();
        opts.env.retain(|(k, _)| k != "MONARCH_JOB_TOKEN");
        opts.env
            .push(("MONARCH_JOB_TOKEN".to_string(), rt.job_token().to_string()));
        let agents = SlurmAgents::start(&opts)?;
        // On failure `agents` is dropped here, which stops srun.
        let mesh = HostMesh::attach(rt, agents.addrs()).map_err(|e| {
            Error::new(
                e.kind,
                format!(
                    "slurm: agents started ({}) but attaching them failed: {}",
                    agents.addrs().join(", "),
                    e.message
                ),
            )
        })?;
        Ok(SlurmJob { agents, mesh })
    }

    /// The host mesh of the job's agents.
    pub fn host_mesh(&self) -> &HostMesh {
        &self.mesh
    }

    /// The srun step behind it.
    pub fn agents(&self) -> &SlurmAgents {
        &self.agents
    }

    /// Stop the agents (and their procs) and end the step, and the job if
    /// srun made it. Idempotent; also done on drop.
    pub fn stop(&self) {
        self.agents.stop();
    }
}

fn describe_status(status: Option<ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(s) => match (s.code(), s.signal()) {
            (Some(c), _) => format!("exited with code {c}"),
            (None, Some(sig)) => format!("was killed by signal {sig}"),
            _ => "exited".to_string(),
        },
        None => "closed its output".to_string(),
    }
}

/// Follow one of srun's output pipes on the tokio thread
/// ([`crate::background`]).
fn spawn_reader(pipe: std::os::fd::OwnedFd, shared: Arc<Shared>, is_stderr: bool) -> Result<()> {
    let at_end = shared.clone();
    let on_lines = move |lines: &[&[u8]]| {
        let mut seen = shared.seen.lock();
        for buf in lines {
            let line = String::from_utf8_lossy(buf);
            let line = line.trim_end_matches('\r').to_string();
            let keep = if is_stderr {
                tracing::debug!("{line}");
                on_srun_line(&mut seen, &line)
            } else {
                tracing::info!("agent {line}");
                on_task_line(&mut seen, &line);
                true
            };
            if keep {
                seen.push_tail(line);
            }
        }
        drop(seen);
        shared.changed.notify_all();
    };
    let on_end = move || {
        at_end.seen.lock().eof += 1;
        at_end.changed.notify_all();
    };
    crate::background::for_each_line(pipe, on_lines, on_end)
}

/// A line of the tasks' stdout, `<task>: <text>` (srun --label).
fn on_task_line(seen: &mut Seen, line: &str) {
    let Some((task, text)) = line.split_once(": ") else {
        return;
    };
    let Ok(task) = task.trim().parse::<usize>() else {
        return;
    };
    let Some(addr) = text.trim().strip_prefix(READY_PREFIX.trim_end()) else {
        return;
    };
    let addr = addr.trim();
    if !valid_addr(addr) {
        seen.malformed = Some(line.to_string());
        return;
    }
    seen.ready.entry(task).or_insert_with(|| addr.to_string());
}

/// `ip:port` or `[ipv6]:port` or `host:port` with a port in 1..65535.
fn valid_addr(addr: &str) -> bool {
    let Some((host, port)) = addr.rsplit_once(':') else {
        return false;
    };
    !host.is_empty()
        && !host.contains(char::is_whitespace)
        && port.parse::<u16>().is_ok_and(|p| p > 0)
}

/// A line of srun's own stderr (with --verbose): job and step ids, the node
/// of each task, ended tasks. Returns whether the line is worth keeping for
/// error messages.
fn on_srun_line(seen: &mut Seen, line: &str) -> bool {
    if line.starts_with("srun: defined options") {
        seen.in_options = true;
    }
    if seen.in_options {
        if line.starts_with("srun: end of defined options") {
            seen.in_options = false;
        }
        return false;
    }
    if line.starts_with("srun: debug") {
        return false;
    }
    // "srun: job 12 queued and waiting for resources"
    // "srun: job 12 has been allocated resources"
    // "srun: jobid 12: nodes(2):`n[1-2]', cpu counts: 1(x2)"
    let job = line
        .strip_prefix("srun: job ")
        .or_else(|| line.strip_prefix("srun: jobid "));
    if let Some(rest) = job {
        let id: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        if !id.is_empty() {
            let what = &rest[id.len()..];
            seen.job_id = Some(id);
            if what.starts_with(" queued") {
                seen.pending = true;
            } else if what.contains("allocated") || what.starts_with(':') {
                seen.pending = false;
            }
        }
    }
    // "srun: Job 7 step creation temporarily disabled, retrying (Requested
    // nodes are busy)": inside an allocation, the step waits for CPUs.
    if line.contains("step creation temporarily disabled") {
        seen.pending = true;
    }
    // "srun: launching StepId=5.0 on host n1, 1 tasks: 0"
    if let Some(pos) = line.find("launching StepId=") {
        let rest = &line[pos + "launching StepId=".len()..];
        if let Some((step, rest)) = rest.split_once(" on host ") {
            seen.step_id = Some(step.to_string());
            if let (Some((host, _)), Some((_, tasks))) =
                (rest.split_once(','), rest.rsplit_once(": "))
            {
                for t in tasks
                    .split(',')
                    .filter_map(|t| t.trim().parse::<usize>().ok())
                {
                    seen.nodes.insert(t, host.trim().to_string());
                }
            }
        }
        seen.pending = false;
    }
    // "srun: launch/slurm: _task_finish: n2: task 1: Completed"
    // "srun: error: n2: task 1: Exited with exit code 3"
    // "srun: error: n1: tasks 0-1: Killed"
    for marker in [": task ", ": tasks "] {
        let Some(pos) = line.find(marker) else {
            continue;
        };
        let rest = &line[pos + marker.len()..];
        if let Some((nums, how)) = rest.split_once(": ") {
            for part in nums.split(',') {
                let (a, b) = part.split_once('-').unwrap_or((part, part));
                if let (Ok(a), Ok(b)) = (a.trim().parse::<usize>(), b.trim().parse::<usize>()) {
                    for t in a..=b.min(a + 100_000) {
                        seen.ended
                            .entry(t)
                            .or_insert_with(|| how.trim().to_string());
                    }
                }
            }
        }
    }
    true
}

/// What a job is doing, in words, for its progress line: its id and queue
/// state as srun reports them.
fn queue_state(seen: &Seen) -> String {
    let job = seen
        .job_id
        .as_deref()
        .map(|j| format!("job {j} "))
        .unwrap_or_default();
    match (seen.pending, seen.job_id.is_some()) {
        (true, _) => format!("{job}PENDING (waiting for resources)"),
        (false, true) if !seen.nodes.is_empty() => format!("{job}RUNNING, host agents starting"),
        (false, true) => format!("{job}allocated"),
        (false, false) => "submitted".to_string(),
    }
}

#[cfg(test)]
mod tests;
