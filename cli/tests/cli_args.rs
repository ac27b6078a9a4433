//! The `monarch` command line: help texts and exit codes.

use std::process::{Command, Output};

fn monarch(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_monarch"))
        .args(args)
        .env_remove("MONARCH_CONTROLLER")
        .output()
        .expect("run monarch")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn top_level_help_lists_the_commands() {
    for args in [&["--help"][..], &["-h"], &["help"]] {
        let o = monarch(args);
        assert!(o.status.success(), "{args:?}: {}", o.status);
        let out = stdout(&o);
        assert!(out.contains("Usage: monarch <COMMAND>"), "{out}");
        assert!(out.contains("worker"), "{out}");
        assert!(out.contains("host"), "{out}");
    }
}

#[test]
fn worker_help_describes_the_builtin_actors() {
    for args in [
        &["worker", "--help"][..],
        &["worker", "-h"],
        &["help", "worker"],
    ] {
        let o = monarch(args);
        assert!(o.status.success(), "{args:?}: {}", o.status);
        let out = stdout(&o);
        assert!(out.contains("Usage: monarch worker"), "{out}");
        for word in ["echo", "counter", "bad", "incr", "MONARCH_CONTROLLER"] {
            assert!(out.contains(word), "worker help lacks '{word}':\n{out}");
        }
    }
}

#[test]
fn usage_errors_exit_non_zero_with_a_message() {
    let o = monarch(&[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("missing command"), "{}", stderr(&o));

    let o = monarch(&["frobnicate"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("unknown command 'frobnicate'"));

    let o = monarch(&["worker", "--bogus"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("unexpected argument '--bogus'"));
}

#[test]
fn worker_without_a_controller_refuses_to_start() {
    let o = monarch(&["worker"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("MONARCH_CONTROLLER is not set"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn host_needs_listen_and_a_secret() {
    let o = monarch(&["host"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--listen"), "{}", stderr(&o));
    let o = Command::new(env!("CARGO_BIN_EXE_monarch"))
        .args(["host", "--listen", "127.0.0.1:0"])
        .env_remove("MONARCH_JOB_TOKEN")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no job secret"), "{}", stderr(&o));
    let o = monarch(&["host", "--help"]);
    assert!(o.status.success());
    assert!(stdout(&o).contains("MONARCH_HOST_READY"));
    for word in ["--tls-cert", "--tls-key", "--tls-ca", "MONARCH_TLS_CA"] {
        assert!(stdout(&o).contains(word), "host help lacks '{word}'");
    }
}

#[test]
fn version() {
    let o = monarch(&["--version"]);
    assert!(o.status.success());
    assert!(stdout(&o).starts_with("monarch "));
}

#[test]
fn worker_plugin_option_needs_a_path() {
    for args in [&["worker", "--plugin"][..], &["worker", "--plugin="]] {
        let o = monarch(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(
            stderr(&o).contains("--plugin needs a PATH"),
            "{}",
            stderr(&o)
        );
    }
    let o = monarch(&["worker", "--help"]);
    assert!(stdout(&o).contains("--plugin PATH"), "{}", stdout(&o));
}

#[test]
fn worker_with_a_plugin_but_no_controller_refuses_to_start() {
    let o = monarch(&["worker", "--plugin", "/nonexistent/lib.so"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("MONARCH_CONTROLLER is not set"));
}

#[test]
fn secret_prints_a_fresh_strong_secret() {
    let o = monarch(&["secret", "--help"]);
    assert!(o.status.success());
    assert!(
        stdout(&o).contains("Usage: monarch secret"),
        "{}",
        stdout(&o)
    );
    assert!(stdout(&monarch(&["--help"])).contains("secret"));
    let a = monarch(&["secret"]);
    let b = monarch(&["secret"]);
    assert!(a.status.success() && b.status.success());
    let (a, b) = (stdout(&a), stdout(&b));
    let a = a.trim_end();
    assert_eq!(a.len(), 64, "{a}");
    assert!(a.chars().all(|c| c.is_ascii_hexdigit()), "{a}");
    assert_ne!(a, b.trim_end(), "two runs print the same secret");
    monarch_core::secret::check(a, "monarch secret").expect("its own secret is strong");
    let o = monarch(&["secret", "extra"]);
    assert_eq!(o.status.code(), Some(2));
}

/// `monarch host` with `secret` in MONARCH_JOB_TOKEN: (ready address or
/// None, stderr when it exited).
fn host_with_secret(secret: &str) -> (Option<String>, String) {
    use std::io::{BufRead, BufReader};
    let mut p = Command::new(env!("CARGO_BIN_EXE_monarch"))
        .args(["host", "--listen", "127.0.0.1:0"])
        .env_remove("MONARCH_CONTROLLER")
        .env("MONARCH_JOB_TOKEN", secret)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(p.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    if let Some(addr) = line.strip_prefix("MONARCH_HOST_READY ") {
        // SAFETY: signalling the agent we started.
        unsafe { libc::kill(p.id() as i32, libc::SIGTERM) };
        assert!(p.wait().unwrap().success());
        return (Some(addr.trim().to_string()), String::new());
    }
    let out = p.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{line}");
    (None, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn host_refuses_a_weak_secret_and_takes_one_from_monarch_secret() {
    for weak in ["password", "hosts-e2e-test-secret", "0123456789abcdef"] {
        let (ready, err) = host_with_secret(weak);
        assert!(ready.is_none(), "an agent started with secret {weak:?}");
        assert!(
            err.contains("MONARCH_JOB_TOKEN")
                && err.contains("too weak")
                && err.contains("monarch secret"),
            "{err}"
        );
    }
    let strong = stdout(&monarch(&["secret"])).trim_end().to_string();
    let (ready, err) = host_with_secret(&strong);
    assert!(
        ready.is_some(),
        "the agent refused `monarch secret`'s secret: {err}"
    );
}

#[test]
fn trace_merge_checks_its_arguments() {
    let o = monarch(&["trace", "--help"]);
    assert!(o.status.success());
    assert!(stdout(&o).contains("Usage: monarch trace merge -o OUT.json PART..."));
    for (args, want) in [
        (&["trace"][..], "missing subcommand"),
        (&["trace", "split"], "unknown subcommand 'split'"),
        (&["trace", "merge", "a.jsonl"], "-o OUT is required"),
        (&["trace", "merge", "-o"], "-o needs a path"),
        (
            &["trace", "merge", "-o", "x.json"],
            "no part file or directory given",
        ),
    ] {
        let o = monarch(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(stderr(&o).contains(want), "{args:?}: {}", stderr(&o));
    }
    let dir = std::env::temp_dir().join(format!("monarch-trace-args-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("out.json");
    let missing = dir.join("missing.jsonl");
    let o = monarch(&[
        "trace",
        "merge",
        "-o",
        out.to_str().unwrap(),
        missing.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("no such part file or directory"),
        "{}",
        stderr(&o)
    );
    assert!(!out.exists());
    std::fs::write(dir.join("1.jsonl"), "{\"ph\":\"X\"}\n").unwrap();
    let o = monarch(&[
        "trace",
        "merge",
        "--output",
        out.to_str().unwrap(),
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("1 events from 1 part files"),
        "{}",
        stdout(&o)
    );
    assert!(std::fs::read_to_string(&out)
        .unwrap()
        .starts_with("{\"traceEvents\":["));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn debug_help_and_bad_targets() {
    for args in [&["debug", "--help"][..], &["help", "debug"]] {
        let o = monarch(args);
        assert!(o.status.success(), "{args:?}: {}", o.status);
        assert!(
            stdout(&o).contains("Usage: monarch debug"),
            "{}",
            stdout(&o)
        );
    }
    let o = monarch(&["debug", "--bogus"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("unexpected argument '--bogus'"),
        "{}",
        stderr(&o)
    );
    // No such controller: a clear error, exit status 1.
    let o = monarch(&["debug", "--controller", "4294967295"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no running controller with pid 4294967295"),
        "{}",
        stderr(&o)
    );
    let o = monarch(&["debug", "--controller", "/nonexistent/dir"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("is not a controller's socket directory"),
        "{}",
        stderr(&o)
    );
}
