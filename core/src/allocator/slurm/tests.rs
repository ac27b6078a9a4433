//! Tests of `slurm`.

use super::*;

#[test]
fn parses_ready_lines() {
    let mut s = Seen::default();
    on_task_line(&mut s, "1: MONARCH_HOST_READY 127.0.0.1:4001");
    on_task_line(&mut s, "0: MONARCH_HOST_READY 10.0.0.2:4000");
    on_task_line(&mut s, "0: MONARCH_HOST_READY 10.0.0.2:9999"); // first wins
    on_task_line(&mut s, "0: some log line");
    on_task_line(&mut s, "MONARCH_HOST_READY 1.2.3.4:5"); // no label
    assert_eq!(
        s.ready.values().cloned().collect::<Vec<_>>(),
        vec!["10.0.0.2:4000", "127.0.0.1:4001"]
    );
    assert!(s.malformed.is_none());
    on_task_line(&mut s, "2: MONARCH_HOST_READY nonsense");
    assert!(s.malformed.is_some());
}

#[test]
fn parses_srun_lines() {
    let mut s = Seen::default();
    on_srun_line(&mut s, "srun: job 42 queued and waiting for resources");
    assert_eq!(s.job_id.as_deref(), Some("42"));
    assert!(s.pending);
    on_srun_line(&mut s, "srun: job 42 has been allocated resources");
    assert!(!s.pending);
    on_srun_line(&mut s, "srun: error: n2: task 1: Exited with exit code 3");
    on_srun_line(&mut s, "srun: error: n1: tasks 0-1: Killed");
    on_srun_line(&mut s, "srun: error: n3: task 4-5: Killed");
    on_srun_line(&mut s, "srun: launching StepId=5.0 on host n7, 1 tasks: 6");
    assert_eq!(s.step_id.as_deref(), Some("5.0"));
    assert_eq!(s.nodes.get(&6).map(String::as_str), Some("n7"));
    on_srun_line(
        &mut s,
        "srun: Job 7 step creation temporarily disabled, retrying (Requested nodes are busy)",
    );
    assert!(s.pending);
    assert!(!on_srun_line(&mut s, "srun: defined options"));
    assert!(!on_srun_line(&mut s, "srun: nodes               : 2"));
    assert!(!on_srun_line(&mut s, "srun: end of defined options"));
    assert!(on_srun_line(
        &mut s,
        "srun: error: Unable to allocate resources"
    ));
    assert_eq!(
        s.ended.get(&1).map(String::as_str),
        Some("Exited with exit code 3")
    );
    assert_eq!(s.ended.get(&4).map(String::as_str), Some("Killed"));
    assert_eq!(s.ended.get(&5).map(String::as_str), Some("Killed"));
}

#[test]
fn command_line() {
    let mut o = SlurmOptions::new(2, vec!["monarch".into(), "host".into()]);
    o.srun = Some("/usr/bin/srun".into());
    o.srun_args = vec!["--partition=debug".into()];
    let argv = o.command().unwrap();
    assert_eq!(argv[0], "/usr/bin/srun");
    assert!(argv.contains(&"--nodes=2".to_string()));
    assert!(argv.contains(&"--label".to_string()));
    assert_eq!(
        &argv[argv.len() - 3..],
        &["--partition=debug", "monarch", "host"]
    );
    o.agent_argv.clear();
    assert!(o.command().is_err());
}

#[test]
fn the_queue_state_follows_srun() {
    let mut s = Seen::default();
    assert_eq!(queue_state(&s), "submitted");
    on_srun_line(&mut s, "srun: job 12 queued and waiting for resources");
    assert_eq!(queue_state(&s), "job 12 PENDING (waiting for resources)");
    on_srun_line(&mut s, "srun: job 12 has been allocated resources");
    assert_eq!(queue_state(&s), "job 12 allocated");
    on_srun_line(&mut s, "srun: launching StepId=12.0 on host n1, 1 tasks: 0");
    assert_eq!(queue_state(&s), "job 12 RUNNING, host agents starting");
}
