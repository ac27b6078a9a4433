//! The SLURM allocator against a real SLURM cluster (scripts/slurm/up.sh:
//! slurmctld and two slurmd daemons on this machine, nodes n1 and n2).
//!
//! `make test` runs these inside `scripts/slurm/with-cluster.sh`, which sets
//! `MONARCH_SLURM_TEST=1` and `SLURM_CONF`. Without `MONARCH_SLURM_TEST`
//! the cluster tests print a note and pass (a plain `cargo test` has no
//! cluster); with it, a missing cluster is a failure.
//!
//! The agent here is a stand-in shell command that prints the READY line
//! the way `monarch host` does: these tests are about srun, the gathering
//! of READY lines, errors and cleanup. Running real agents and a job across
//! them is in bindings/python/tests/test_slurm.py.

use parking_lot::{Mutex, MutexGuard};
use std::process::Command;
use std::time::{Duration, Instant};

use monarch_core::allocator::slurm::{SlurmAgents, SlurmOptions};
use monarch_core::ErrorKind;

/// The cluster has two one-CPU nodes: run one allocation at a time.
static CLUSTER: Mutex<()> = Mutex::new(());

fn cluster() -> Option<MutexGuard<'static, ()>> {
    if std::env::var("MONARCH_SLURM_TEST").as_deref() != Ok("1") {
        eprintln!("MONARCH_SLURM_TEST is not 1: no SLURM cluster, test not run (see scripts/slurm/with-cluster.sh)");
        return None;
    }
    let guard = CLUSTER.lock();
    let ping = Command::new("scontrol")
        .arg("ping")
        .output()
        .expect("MONARCH_SLURM_TEST=1 but scontrol cannot run");
    assert!(
        ping.status.success() && String::from_utf8_lossy(&ping.stdout).contains("UP"),
        "MONARCH_SLURM_TEST=1 but slurmctld does not answer: {}",
        String::from_utf8_lossy(&ping.stdout)
    );
    Some(guard)
}

/// A stand-in agent: prints READY with a port made from its task number,
/// then waits to be stopped. With `secret_dir`, it first writes the
/// `MONARCH_JOB_TOKEN` it got to `<secret_dir>/token.<task>`.
fn fake_agent_to(secret_dir: Option<&std::path::Path>) -> Vec<String> {
    let save = match secret_dir {
        Some(d) => format!(
            "printf %s \"$MONARCH_JOB_TOKEN\" > '{}'/token.$SLURM_PROCID; ",
            d.display()
        ),
        None => String::new(),
    };
    vec![
        "sh".into(),
        "-c".into(),
        format!(
            "{save}echo \"MONARCH_HOST_READY 127.0.0.1:$((21000 + SLURM_PROCID))\"; \
             echo \"node $SLURMD_NODENAME\"; exec sleep 613.25"
        ),
    ]
}

fn fake_agent() -> Vec<String> {
    fake_agent_to(None)
}

fn tempdir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("monarch-slurm-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn opts(nodes: usize, agent: Vec<String>) -> SlurmOptions {
    let mut o = SlurmOptions::new(nodes, agent);
    o.timeout = Duration::from_secs(60);
    o
}

fn squeue() -> String {
    let out = Command::new("squeue")
        .args(["-h", "-o", "%i %j %T"])
        .output()
        .expect("run squeue");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The queue empties (jobs may take a moment to leave COMPLETING).
fn assert_queue_drains() {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let q = squeue();
        if q.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "jobs left in the queue: {q}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// No stand-in agent (its `sleep 613.25`, a duration nothing else uses) is
/// left running.
fn assert_no_agents_left() {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = Command::new("pgrep")
            .args(["-f", "^sleep 613[.]25$"])
            .output()
            .expect("run pgrep");
        let left = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "agent processes left: {left}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn gathers_one_agent_per_node_and_cleans_up() {
    let Some(_c) = cluster() else { return };
    let token = "s3cret-token-for-test";
    let dir = tempdir("token");
    let mut o = opts(2, fake_agent_to(Some(&dir)));
    o.env.push(("MONARCH_JOB_TOKEN".into(), token.into()));
    let agents = SlurmAgents::start(&o).expect("start agents");
    // Both agents got the secret through the environment ...
    for t in 0..2 {
        let got = std::fs::read_to_string(dir.join(format!("token.{t}"))).unwrap();
        assert_eq!(got, token, "task {t}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(agents.addrs(), ["127.0.0.1:21000", "127.0.0.1:21001"]);
    assert_eq!(agents.nodes(), ["n1", "n2"]);
    assert!(agents.job_id().is_some());
    assert!(!agents.in_existing_allocation());
    // ... and is in no command line: not srun's, not the agents'.
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", agents.srun_pid())).unwrap();
    assert!(!String::from_utf8_lossy(&cmdline).contains(token));
    let ps = Command::new("ps").args(["-eo", "args"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&ps.stdout).contains(token));
    // The job is running.
    let q = squeue();
    assert!(
        q.contains("monarch-hosts") && q.contains("RUNNING"),
        "squeue: {q}"
    );
    assert!(agents.is_running());
    drop(agents);
    assert_queue_drains();
    assert_no_agents_left();
}

#[test]
fn missing_srun_is_a_clear_error() {
    // Needs no cluster.
    let mut o = opts(2, fake_agent());
    o.srun = Some("/nonexistent/bin/srun".into());
    let e = SlurmAgents::start(&o).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Io);
    assert!(
        e.message.contains("not found") && e.message.contains("SLURM"),
        "{}",
        e.message
    );
}

#[test]
fn zero_nodes_outside_an_allocation_is_invalid() {
    let mut o = opts(0, fake_agent());
    o.env.push(("SLURM_JOB_ID".into(), String::new()));
    if std::env::var_os("SLURM_JOB_ID").is_some() {
        return; // the test itself runs inside an allocation
    }
    let e = SlurmAgents::start(&o).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument, "{}", e.message);
}

#[test]
fn refused_allocation_is_reported() {
    let Some(_c) = cluster() else { return };
    // The cluster has two nodes: three cannot be had.
    let t = Instant::now();
    let e = SlurmAgents::start(&opts(3, fake_agent())).unwrap_err();
    assert_eq!(e.kind, ErrorKind::ProcFailed, "{}", e.message);
    assert!(
        e.message.contains("srun exited with code")
            && e.message.contains("Unable to allocate resources"),
        "{}",
        e.message
    );
    assert!(
        t.elapsed() < Duration::from_secs(30),
        "took {:?}",
        t.elapsed()
    );
    assert_queue_drains();
}

#[test]
fn agent_dying_before_ready_is_reported() {
    let Some(_c) = cluster() else { return };
    let agent = vec![
        "sh".into(),
        "-c".into(),
        "echo 'agent cannot bind: boom' >&2; exit 3".into(),
    ];
    let e = SlurmAgents::start(&opts(2, agent)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::ProcFailed, "{}", e.message);
    assert!(e.message.contains("exit code 3"), "{}", e.message);
    assert!(e.message.contains("boom"), "{}", e.message);
    assert_queue_drains();
}

#[test]
fn one_agent_dying_while_the_other_waits_fails_fast() {
    let Some(_c) = cluster() else { return };
    // Task 1 exits (cleanly!) without READY; task 0 is ready and waits.
    let agent = vec![
        "sh".into(),
        "-c".into(),
        "if [ \"$SLURM_PROCID\" = 1 ]; then exit 0; fi; echo 'MONARCH_HOST_READY 127.0.0.1:21000'; exec sleep 613.25".into(),
    ];
    let mut o = opts(2, agent);
    o.timeout = Duration::from_secs(120);
    let t = Instant::now();
    let e = SlurmAgents::start(&o).unwrap_err();
    assert_eq!(e.kind, ErrorKind::ProcFailed, "{}", e.message);
    assert!(
        e.message.contains("task 1 ended before it was ready"),
        "{}",
        e.message
    );
    // Well before the 120 s timeout.
    assert!(
        t.elapsed() < Duration::from_secs(60),
        "took {:?}",
        t.elapsed()
    );
    assert_queue_drains();
    assert_no_agents_left();
}

#[test]
fn timeout_stops_srun_and_the_job() {
    let Some(_c) = cluster() else { return };
    let agent = vec!["sh".into(), "-c".into(), "exec sleep 613.25".into()];
    let mut o = opts(2, agent);
    o.timeout = Duration::from_secs(3);
    let e = SlurmAgents::start(&o).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout, "{}", e.message);
    assert!(e.message.contains("0 ready"), "{}", e.message);
    assert_queue_drains();
    assert_no_agents_left();
}

#[test]
fn malformed_ready_line_is_an_error() {
    let Some(_c) = cluster() else { return };
    let agent = vec![
        "sh".into(),
        "-c".into(),
        "echo 'MONARCH_HOST_READY not-an-address'; exec sleep 613.25".into(),
    ];
    let e = SlurmAgents::start(&opts(2, agent)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::ProcFailed, "{}", e.message);
    assert!(e.message.contains("malformed READY line"), "{}", e.message);
    assert_queue_drains();
    assert_no_agents_left();
}

/// A 2-node allocation without a shell (`salloc --no-shell`): its job id.
fn salloc_two_nodes(name: &str) -> String {
    let out = Command::new("salloc")
        .args(["--no-shell", "--nodes=2", &format!("--job-name={name}")])
        .output()
        .expect("run salloc");
    let text = String::from_utf8_lossy(&out.stderr).to_string();
    let job: String = text
        .split("Granted job allocation ")
        .nth(1)
        .map(|r| r.chars().take_while(|c| c.is_ascii_digit()).collect())
        .unwrap_or_default();
    assert!(!job.is_empty(), "salloc said: {text}");
    job
}

#[test]
fn inside_an_existing_allocation_only_the_step_ends() {
    let Some(_c) = cluster() else { return };
    let job = salloc_two_nodes("monarch-test-alloc");
    let mut o = opts(0, fake_agent()); // 0: all nodes of the allocation
    o.env.push(("SLURM_JOB_ID".into(), job.clone()));
    o.env.push(("SLURM_JOB_NUM_NODES".into(), "2".into()));
    let agents = SlurmAgents::start(&o).expect("start agents in the allocation");
    assert_eq!(agents.addrs().len(), 2);
    assert!(agents.in_existing_allocation());
    assert_eq!(agents.job_id().as_deref(), Some(job.as_str()));
    assert!(
        agents
            .step_id()
            .is_some_and(|s| s.starts_with(&format!("{job}."))),
        "{:?}",
        agents.step_id()
    );
    drop(agents);
    assert_no_agents_left();
    // The allocation itself is still there ...
    let q = squeue();
    assert!(q.contains(&job) && q.contains("RUNNING"), "squeue: {q}");
    // ... until its owner cancels it.
    Command::new("scancel").arg(&job).status().unwrap();
    assert_queue_drains();
}

#[test]
fn controller_inside_a_step_overlaps_it() {
    let Some(_c) = cluster() else { return };
    let job = salloc_two_nodes("monarch-test-step");
    // A step holding every CPU of the allocation, as `srun python main.py`
    // would for the controller.
    let mut step = Command::new("srun")
        .args([
            &format!("--jobid={job}"),
            "--nodes=2",
            "--ntasks=2",
            "sleep",
            "613.25",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !Command::new("squeue")
        .args(["-h", "-s", "-j", &job])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains(&format!("{job}.0")))
        .unwrap_or(false)
    {
        assert!(Instant::now() < deadline, "the holding step did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut o = opts(2, fake_agent());
    o.timeout = Duration::from_secs(30);
    o.env.push(("SLURM_JOB_ID".into(), job.clone()));
    o.env.push(("SLURM_STEP_ID".into(), "0".into()));
    assert!(o.command().unwrap().contains(&"--overlap".to_string()));
    let agents = SlurmAgents::start(&o);
    let _ = step.kill();
    let _ = step.wait();
    let agents = agents.expect("agents next to the controller's step");
    assert_eq!(agents.addrs().len(), 2);
    drop(agents);
    Command::new("scancel").arg(&job).status().unwrap();
    assert_queue_drains();
    assert_no_agents_left();
}

/// Run as a separate process by `controller_death_cancels_the_job`: start
/// agents, say so, and wait to be killed.
#[test]
fn child_controller_for_death_test() {
    if std::env::var("MONARCH_SLURM_CHILD").as_deref() != Ok("1") {
        return;
    }
    let agents = SlurmAgents::start(&opts(2, fake_agent())).expect("start agents");
    println!("CHILD_READY {}", agents.addrs().join(","));
    std::thread::sleep(Duration::from_secs(600));
}

#[test]
fn controller_death_cancels_the_job() {
    let Some(_c) = cluster() else { return };
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_controller_for_death_test",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("MONARCH_SLURM_CHILD", "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = lines
        .by_ref()
        .map_while(|l| l.ok())
        .find(|l| l.contains("CHILD_READY"));
    assert!(ready.is_some(), "the child controller never got its agents");
    assert!(squeue().contains("RUNNING"));
    // SIGKILL: no destructor runs; srun gets SIGTERM from PR_SET_PDEATHSIG.
    child.kill().unwrap();
    child.wait().unwrap();
    assert_queue_drains();
    assert_no_agents_left();
}
