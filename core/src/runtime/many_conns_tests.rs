//! A runtime with more connections than `EPOLL_ABOVE` (a controller's):
//! its threads sleep on the epoll set of connections, read what it
//! reports, and still notice a connection that ends.

use std::time::{Duration, Instant};

use super::io::EPOLL_ABOVE;
use super::{Runtime, AGENT_ACTOR};

const SECRET: &str = "963426a44c97c326d01712b788b2bae60175264812e293e1e82dde5b80ee7cf3";

fn agent() -> Runtime {
    Runtime::listen_tcp(
        "tcp:127.0.0.1:0",
        std::net::IpAddr::from([127, 0, 0, 1]),
        SECRET.to_string(),
    )
    .expect("listen on 127.0.0.1")
}

/// Answer every call with this runtime's address until it is shut down.
fn answer_forever(rt: &Runtime) -> std::thread::JoinHandle<()> {
    let inner = rt.inner.clone();
    let me = Runtime { inner };
    std::thread::spawn(move || {
        while let Ok(mut ev) = me.next_event(Some(Duration::from_secs(60))) {
            let addr = me.addr().to_string();
            let _ = ev.reply(Ok(&[addr.as_bytes()]));
        }
    })
}

#[test]
fn calls_to_many_peers_are_read_through_the_epoll_set() {
    let controller = agent();
    let n = EPOLL_ABOVE + 8;
    let agents: Vec<Runtime> = (0..n).map(|_| agent()).collect();
    let answering: Vec<_> = agents
        .iter()
        .map(|a| {
            a.serve_builtin(AGENT_ACTOR);
            answer_forever(a)
        })
        .collect();
    for round in 0..3 {
        let futs: Vec<_> = agents
            .iter()
            .map(|a| controller.call_agent(a.addr(), "who", &[]).expect("call"))
            .collect();
        assert!(controller.inner.peers.poller.len() > EPOLL_ABOVE);
        // Waited for in reverse: most waits start with their reply
        // already read, or park on the set until it comes.
        for (a, fut) in agents.iter().zip(futs).rev() {
            assert!(
                fut.wait(Some(Duration::from_secs(60))),
                "round {round}: no answer from {}",
                a.addr()
            );
            let vm = fut.take().expect("ready").expect("a value mesh");
            assert_eq!(vm.values[0].parts(), [a.addr().as_bytes().to_vec()]);
        }
    }
    // A peer going away is noticed through the set too.
    let gone = agents[n / 2].addr().to_string();
    agents[n / 2].shutdown();
    let deadline = Instant::now() + Duration::from_secs(60);
    while controller.is_connected(&gone) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        !controller.is_connected(&gone),
        "the lost peer went unnoticed"
    );
    assert_eq!(controller.inner.peers.poller.len(), n - 1);
    for a in &agents {
        a.shutdown();
    }
    for t in answering {
        t.join().expect("answering thread");
    }
    controller.shutdown();
}
