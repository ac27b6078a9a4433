//! With tracing off (no `MONARCH_TRACE`, `MONARCH_LOG` at its default), the
//! subscriber's maximum level is WARN: every INFO span site of the runtime
//! stops at `tracing`'s first check (one atomic load and a branch), never
//! builds a span nor evaluates its fields; and a run writes no trace.

use monarch_core::{CallMode, ProcMesh, Runtime, Shape};
use tracing::level_filters::LevelFilter;

mod common;
use common::{wait, worker_argv};

/// Upper bound for any single wait; only there to turn a hang into a failure.
const HANG: std::time::Duration = std::time::Duration::from_secs(60);

#[test]
fn spans_are_off_at_the_first_check_without_a_trace() {
    // SAFETY: changed before any thread of this test binary (one test) starts.
    unsafe {
        std::env::remove_var("MONARCH_TRACE");
        std::env::remove_var("MONARCH_LOG");
    }
    monarch_core::trace::install_subscriber();
    assert_eq!(LevelFilter::current(), LevelFilter::WARN);
    let span = tracing::info_span!(target: "monarch_core::runtime", "send", msg = 1u64);
    assert!(span.is_disabled());

    let rt = Runtime::new().expect("controller runtime");
    let pm = ProcMesh::spawn(
        &rt,
        Shape::new(&[("gpus", 1)]).unwrap(),
        &worker_argv(),
        &[],
    )
    .unwrap();
    let (am, ready) = pm.spawn_actors("echo", "echo", &[]).unwrap();
    assert!(wait(&ready).values.iter().all(|v| !v.is_err()));
    let f = am.call("echo", &[b"x"], CallMode::All).unwrap().unwrap();
    assert_eq!(wait(&f).values.len(), 1);
    rt.shutdown();
    assert!(monarch_core::trace::trace_path().is_none());
}
