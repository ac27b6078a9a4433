//! The Kubernetes allocator without a cluster: pod names, resolving with
//! retries (a resolver standing in for cluster DNS), and attaching a real
//! agent found through the system resolver.

use std::cell::Cell;
use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use super::*;
use crate::runtime::AGENT_ACTOR;

fn opts(replicas: usize) -> KubernetesOptions {
    let mut o = KubernetesOptions::new("agents", "agents-svc", replicas, 26600);
    o.namespace = Some("train".into());
    o
}

#[test]
fn pod_names_follow_the_statefulset_ordinals() {
    assert_eq!(
        opts(3).pod_names().unwrap(),
        [
            "agents-0.agents-svc.train.svc.cluster.local",
            "agents-1.agents-svc.train.svc.cluster.local",
            "agents-2.agents-svc.train.svc.cluster.local",
        ]
    );
    let mut o = opts(1);
    o.cluster_domain = "corp.example".into();
    assert_eq!(
        o.pod_names().unwrap(),
        ["agents-0.agents-svc.train.svc.corp.example"]
    );
}

#[test]
fn names_that_are_not_dns_labels_are_refused() {
    for bad in ["", "Agents", "a_b", "-a", "a-", "a.b", &"x".repeat(64)] {
        let mut o = opts(1);
        o.statefulset = bad.to_string();
        let e = o.pod_names().unwrap_err();
        assert!(e.message.contains("statefulset"), "{bad:?}: {e}");
    }
    let e = opts(0).pod_names().unwrap_err();
    assert!(e.message.contains("at least one replica"), "{e}");
}

#[test]
fn pods_are_resolved_in_order_once_each_has_a_record() {
    let names = opts(3).pod_names().unwrap();
    let calls = Cell::new(0usize);
    let records: HashMap<&str, Vec<IpAddr>> = HashMap::from([
        (names[0].as_str(), vec!["10.0.0.7".parse().unwrap()]),
        (
            names[1].as_str(),
            vec!["fd00::5".parse().unwrap(), "10.0.0.3".parse().unwrap()],
        ),
        (names[2].as_str(), vec!["fd00::9".parse().unwrap()]),
    ]);
    // Pod 1 becomes ready (gets a record) only on the third look.
    let resolve = |name: &str| -> std::io::Result<Vec<IpAddr>> {
        if name == names[1] {
            calls.set(calls.get() + 1);
            if calls.get() < 3 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "no such host",
                ));
            }
        }
        Ok(records[name].clone())
    };
    let addrs = resolve_all(&names, 26600, Duration::from_secs(60), &resolve).unwrap();
    assert_eq!(
        addrs,
        ["10.0.0.7:26600", "10.0.0.3:26600", "[fd00::9]:26600"]
    );
    assert_eq!(calls.get(), 3);
}

#[test]
fn pods_that_never_resolve_are_named_in_the_error() {
    let names = opts(3).pod_names().unwrap();
    let resolve = |name: &str| -> std::io::Result<Vec<IpAddr>> {
        if name.starts_with("agents-2.") {
            Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no such host",
            ))
        } else {
            Ok(vec!["10.0.0.1".parse().unwrap()])
        }
    };
    let e = resolve_all(&names, 1, Duration::from_millis(100), &resolve).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout);
    assert!(e.message.contains("1 of 3"), "{e}");
    assert!(e.message.contains(&names[2]), "{e}");
    assert!(!e.message.contains(&names[0]), "{e}");
}

#[test]
fn an_agent_found_through_the_system_resolver_is_attached() {
    const SECRET: &str = "963426a44c97c326d01712b788b2bae60175264812e293e1e82dde5b80ee7cf3";
    let agent = Runtime::listen_tcp(
        "tcp:127.0.0.1:0",
        IpAddr::from([127, 0, 0, 1]),
        SECRET.to_string(),
    )
    .unwrap();
    agent.serve_builtin(AGENT_ACTOR);
    let port: u16 = agent.addr().rsplit(':').next().unwrap().parse().unwrap();
    let answering = {
        let agent = agent.clone();
        std::thread::spawn(move || {
            while let Ok(mut ev) = agent.next_event(Some(Duration::from_secs(60))) {
                let _ = ev.reply(Ok(&[b"pod-0"]));
            }
        })
    };
    let controller = Runtime::listen_tcp(
        "tcp:127.0.0.1:0",
        IpAddr::from([127, 0, 0, 1]),
        SECRET.to_string(),
    )
    .unwrap();
    // "localhost" stands in for a pod's DNS name: the same resolver path.
    let hm = attach_names(
        &controller,
        &["localhost".to_string()],
        port,
        Duration::from_secs(60),
    )
    .expect("attach through DNS");
    assert_eq!(hm.hosts(), [format!("tcp:127.0.0.1:{port}")]);
    agent.shutdown();
    answering.join().unwrap();
    controller.shutdown();
}
