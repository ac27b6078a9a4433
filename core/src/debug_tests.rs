//! The debug registry's protocol between real runtimes over TCP: a
//! debuggee opens a session and waits in a read, a client lists it, reads
//! its output and sends the line that answers the read; the session ends.
//! At the crate's top: it drives meshes and the runtime.

use std::time::{Duration, Instant};

use crate::debug_protocol as proto;
use crate::geometry::Shape;
use crate::mesh::{ActorMesh, CallMode};
use crate::runtime::Runtime;
use crate::value::PointValue;
use crate::wire::ActorMeshRef;

const SECRET: &str = "debug-test-secret-0123456789abcdef";
const WAIT: Duration = Duration::from_secs(30);

fn runtime() -> Runtime {
    Runtime::listen_tcp(
        "tcp:127.0.0.1:0",
        std::net::IpAddr::from([127, 0, 0, 1]),
        SECRET.to_string(),
    )
    .expect("listen on 127.0.0.1")
}

/// The registry of `ctl`, as seen from `rt`.
fn registry(rt: &Runtime, ctl: &Runtime) -> ActorMesh {
    let r = ActorMeshRef {
        name: "monarch_debug".into(),
        key: proto::DEBUG_ACTOR.into(),
        procs: vec![ctl.addr().to_string()],
        shape: Shape::dense(Vec::new(), Vec::new()).unwrap(),
    };
    ActorMesh::from_ref(rt, &r.encode()).unwrap()
}

fn start(m: &ActorMesh, method: &str, parts: &[&str]) -> crate::future::Future {
    let parts: Vec<&[u8]> = parts.iter().map(|p| p.as_bytes()).collect();
    m.call(method, &parts, CallMode::One).unwrap().unwrap()
}

fn finish(f: crate::future::Future) -> Result<Vec<String>, String> {
    assert!(f.wait(Some(WAIT)), "the registry did not answer");
    match f.take().unwrap().unwrap().values.remove(0) {
        PointValue::Ok(p) => Ok(p
            .iter()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect()),
        PointValue::Err { message, .. } => Err(message),
    }
}

fn call(m: &ActorMesh, method: &str, parts: &[&str]) -> Result<Vec<String>, String> {
    finish(start(m, method, parts))
}

#[test]
fn a_read_waits_for_the_clients_line() {
    let ctl = runtime();
    let debuggee = runtime();
    let client = runtime();
    let from_debuggee = registry(&debuggee, &ctl);
    let from_client = registry(&client, &ctl);

    let id = call(
        &from_debuggee,
        proto::OPEN,
        &["trainer", "1", "gpus=1", "h", "7"],
    )
    .unwrap();
    let id = id[0].clone();
    let read = start(
        &from_debuggee,
        proto::READ,
        &[&id, "> f.py(3)g()\n(Pdb) ", "f.py:3 (g)"],
    );
    // The read arrives on its own connection: wait until it is listed.
    let deadline = Instant::now() + WAIT;
    let row = loop {
        let rows = call(&from_client, proto::LIST, &[]).unwrap();
        if rows.len() == 1 && rows[0].ends_with(proto::WAITING) {
            break rows[0].clone();
        }
        assert!(
            Instant::now() < deadline,
            "the session never waited: {rows:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(
        row.split('\t').collect::<Vec<_>>(),
        [
            id.as_str(),
            "trainer",
            "1",
            "gpus=1",
            "h",
            "f.py:3 (g)",
            "waiting"
        ]
    );
    assert!(
        !read.wait(Some(Duration::ZERO)),
        "a read is answered by a line"
    );

    let out = call(&from_client, proto::OUTPUT, &[&id, "0"]).unwrap();
    assert_eq!(out[1], proto::WAITING);
    assert_eq!(out[2], "> f.py(3)g()\n(Pdb) ");
    call(&from_client, proto::INPUT, &[&id, "p x"]).unwrap();
    assert_eq!(finish(read).unwrap(), ["p x"]);
    // Output since the last input: nothing yet, and the debuggee runs.
    let out = call(&from_client, proto::OUTPUT, &[&id, proto::SINCE_INPUT]).unwrap();
    assert_eq!((out[1].as_str(), out[2].as_str()), (proto::RUNNING, ""));

    // A line sent while it runs is kept for its next read.
    call(&from_client, proto::INPUT, &[&id, "continue"]).unwrap();
    let next = call(
        &from_debuggee,
        proto::READ,
        &[&id, "1\n(Pdb) ", "f.py:3 (g)"],
    );
    assert_eq!(next.unwrap(), ["continue"]);
    call(&from_debuggee, proto::CLOSE, &[&id, "bye\n"]).unwrap();
    let out = call(&from_client, proto::OUTPUT, &[&id, proto::SINCE_INPUT]).unwrap();
    assert_eq!(
        (out[1].as_str(), out[2].as_str()),
        (proto::ENDED, "1\n(Pdb) bye\n")
    );
    assert!(call(&from_client, proto::LIST, &[]).unwrap().is_empty());
    assert!(call(&from_client, proto::INPUT, &[&id, "p x"])
        .unwrap_err()
        .contains("no debug session"));
}

#[test]
fn bad_requests_are_answered_with_errors() {
    let ctl = runtime();
    let client = runtime();
    let m = registry(&client, &ctl);
    let e = call(&m, "frobnicate", &[]).unwrap_err();
    assert!(e.contains("unknown debug request"), "{e}");
    let e = call(&m, proto::OUTPUT, &["x", "0"]).unwrap_err();
    assert!(e.contains("bad debug session id"), "{e}");
    let e = call(&m, proto::READ, &["99", "", ""]).unwrap_err();
    assert!(e.contains("no debug session 99"), "{e}");
    let id = call(&m, proto::OPEN, &["a", "0", "", "h", "1"]).unwrap();
    let e = call(&m, proto::OUTPUT, &[&id[0], "not-a-number"]).unwrap_err();
    assert!(e.contains("bad output cursor"), "{e}");
}
