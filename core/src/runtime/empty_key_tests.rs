//! A peer's frame naming the empty actor key is refused with an error
//! answer: it never becomes an event, so it can neither spawn an actor ""
//! nor stop one (whose stop would stand for the top level's meshes).

use std::time::Duration;

use super::Runtime;
use crate::geometry::Shape;
use crate::wire::{Envelope, Kind};

/// A strong job secret shared by the runtimes of these tests.
const SECRET: &str = "b567ed81415f72099357f8ffcc3f58683e59ec5840de4fa83df981b5da8e9aae";

fn agent(secret: &str) -> Runtime {
    Runtime::listen_tcp(
        "tcp:127.0.0.1:0",
        std::net::IpAddr::from([127, 0, 0, 1]),
        secret.to_string(),
    )
    .expect("listen on 127.0.0.1")
}

/// Send `kind` for actor "" from `from` to `to`; the one answer's error.
fn forged_answer(from: &Runtime, to: &Runtime, kind: Kind) -> String {
    let shape = Shape::dense(Vec::new(), Vec::new()).expect("empty shape is valid");
    let (port, fut) = from.open_gather(shape, vec![to.addr().to_string()], None);
    let mut env = Envelope::new(kind);
    env.actor = String::new();
    env.type_name = "Forged".into();
    env.method = "m".into();
    env.reply_port = port;
    env.reply_slot = 0;
    from.send(to.addr(), &env, &[]).expect("send");
    assert!(
        fut.wait(Some(Duration::from_secs(10))),
        "{kind:?} for the empty key was never answered"
    );
    let vm = fut.take().expect("ready").expect("a value mesh");
    let v = &vm.values[0];
    assert!(v.is_err(), "{kind:?} for the empty key succeeded: {v:?}");
    format!("{v:?}")
}

#[test]
fn frames_for_the_empty_actor_key_are_refused() {
    let peer = agent(SECRET);
    let victim = agent(SECRET);
    for kind in [Kind::SpawnActor, Kind::StopActor, Kind::Message] {
        let why = forged_answer(&peer, &victim, kind);
        assert!(why.contains("empty key"), "{kind:?}: {why}");
        assert!(
            victim.next_event(Some(Duration::from_millis(200))).is_err(),
            "{kind:?} for the empty key became an event"
        );
    }
    assert!(
        victim.is_connected(peer.addr()),
        "the connection was dropped"
    );
    peer.shutdown();
    victim.shutdown();
}
