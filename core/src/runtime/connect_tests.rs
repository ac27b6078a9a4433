//! Connections between two real runtimes over TCP: threads that need the
//! same new peer at once share one connection, a spare connection ending
//! is not taken for the loss of its peer, and two procs connecting to each
//! other at once lose nothing.

use std::sync::{Arc, Barrier};
use std::time::Duration;

use super::Runtime;

/// A strong job secret shared by the runtimes of these tests.
const SECRET: &str = "963426a44c97c326d01712b788b2bae60175264812e293e1e82dde5b80ee7cf3";

fn agent(secret: &str) -> Runtime {
    Runtime::listen_tcp(
        "tcp:127.0.0.1:0",
        std::net::IpAddr::from([127, 0, 0, 1]),
        secret.to_string(),
    )
    .expect("listen on 127.0.0.1")
}

#[test]
fn threads_connecting_to_one_new_peer_share_one_connection() {
    let a = agent(SECRET);
    let b = agent(SECRET);
    let threads = 16;
    let start = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let inner = a.inner.clone();
            let to = b.addr().to_string();
            let start = start.clone();
            std::thread::spawn(move || {
                start.wait();
                inner.conn_to(&to).expect("connect to b")
            })
        })
        .collect();
    let conns: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    for c in &conns[1..] {
        assert!(
            Arc::ptr_eq(c, &conns[0]),
            "two threads made two connections to one peer"
        );
    }
    // Nothing was closed under either side: both still see each other.
    std::thread::sleep(Duration::from_millis(100));
    assert!(!conns[0].is_closed());
    assert!(a.is_connected(b.addr()));
    assert!(b.is_connected(a.addr()), "b lost its connection from a");
    a.shutdown();
    b.shutdown();
}

#[test]
fn a_spare_connection_ending_is_not_the_loss_of_its_peer() {
    let a = agent(SECRET);
    let b = agent(SECRET);
    a.serve_builtin(super::AGENT_ACTOR);
    // b waits for an answer from a (b connects to a).
    let fut = b.call_agent(a.addr(), "question", &[]).expect("call");
    let mut ev = a
        .next_event(Some(Duration::from_secs(10)))
        .expect("a gets the call");
    // Meanwhile a also connects to b, as when both sides connect at once:
    // a keeps sending on the connection it has and reads this spare one.
    let spare = a.inner.connect_now(b.addr()).expect("second connection");
    assert!(!spare.is_closed(), "a keeps a live connection to b");
    std::thread::sleep(Duration::from_millis(200));
    // b's call still gets a's answer: the spare's end did not fail it.
    ev.reply(Ok(&[b"answer"])).expect("a answers");
    assert!(fut.wait(Some(Duration::from_secs(10))), "answer never came");
    let vm = fut.take().expect("ready").expect("a value mesh");
    let v = &vm.values[0];
    assert!(
        !v.is_err(),
        "b failed the call when a spare connection ended: {v:?}"
    );
    assert_eq!(v.parts(), [b"answer".to_vec()]);
    assert!(b.is_connected(a.addr()));
    a.shutdown();
    b.shutdown();
}

#[test]
fn procs_connecting_to_each_other_at_once_lose_nothing() {
    // Each side may register the other's connection before its own: both
    // connections must then stay open, whichever each side sends on.
    for round in 0..20 {
        let a = agent(SECRET);
        let b = agent(SECRET);
        a.serve_builtin(super::AGENT_ACTOR);
        b.serve_builtin(super::AGENT_ACTOR);
        let start = Arc::new(Barrier::new(2));
        let connect = |from: &Runtime, to: &Runtime| {
            let inner = from.inner.clone();
            let to = to.addr().to_string();
            let start = start.clone();
            std::thread::spawn(move || {
                start.wait();
                inner.conn_to(&to).map(|_| ())
            })
        };
        let (ab, ba) = (connect(&a, &b), connect(&b, &a));
        ab.join().unwrap().expect("a connects to b");
        ba.join().unwrap().expect("b connects to a");
        for (from, to) in [(&a, &b), (&b, &a)] {
            let fut = from.call_agent(to.addr(), "question", &[]).expect("call");
            let mut ev = to
                .next_event(Some(Duration::from_secs(10)))
                .unwrap_or_else(|e| panic!("round {round}: the call never arrived: {e:?}"));
            ev.reply(Ok(&[b"answer"])).expect("answer");
            assert!(
                fut.wait(Some(Duration::from_secs(10))),
                "round {round}: the answer never came"
            );
            let vm = fut.take().expect("ready").expect("a value mesh");
            assert_eq!(vm.values[0].parts(), [b"answer".to_vec()], "round {round}");
        }
        a.shutdown();
        b.shutdown();
    }
}
