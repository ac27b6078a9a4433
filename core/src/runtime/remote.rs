//! The controller's side of procs started by host agents on other hosts
//! (the requests and reports are in `agent_protocol`): exits and logs the
//! agents report, and what happens when a host is lost. See docs/hosts.md.
//!
//! A remote proc's exit, its host's loss and a lost heartbeat feed the same
//! supervision path as a local child's death (`proc_failed_at`).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Inner, Runtime};
use crate::completion::Completion;
use crate::error::{Error, ErrorKind, Result};
use crate::geometry::Shape;
use crate::supervision::FailureCause;
use crate::value::PointValue;
use crate::wire::{Envelope, Kind};

pub use crate::agent_protocol::{AGENT_ACTOR, CONTROL_ACTOR};
use crate::agent_protocol::{EXIT, EXIT_SIGNAL, KILL, LOG, LOG_STDERR};

pub(crate) struct RemoteProc {
    pub agent: String,
    /// How the proc ended (or that its host was lost).
    pub exit: Completion<String>,
}

#[derive(Default)]
pub(crate) struct RemoteProcs {
    procs: Mutex<HashMap<String, Arc<RemoteProc>>>,
}

impl RemoteProcs {
    pub(super) fn get(&self, addr: &str) -> Option<Arc<RemoteProc>> {
        self.procs.lock().get(addr).cloned()
    }

    fn of_agent(&self, agent: &str) -> Vec<(String, Arc<RemoteProc>)> {
        self.procs
            .lock()
            .iter()
            .filter(|(_, p)| p.agent == agent)
            .map(|(a, p)| (a.clone(), p.clone()))
            .collect()
    }

    pub(crate) fn addrs(&self) -> Vec<String> {
        self.procs.lock().keys().cloned().collect()
    }
}

impl Runtime {
    /// Call `method` of the agent at `agent` with `parts`; the future's
    /// single value is the agent's answer.
    pub(crate) fn call_agent(
        &self,
        agent: &str,
        method: &str,
        parts: &[&[u8]],
    ) -> Result<super::Future> {
        self.check_running()?;
        let shape = Shape::dense(Vec::new(), Vec::new()).expect("empty shape is valid");
        let (port, fut) = self.open_gather(shape, vec![agent.to_string()], None);
        let mut env = Envelope::new(Kind::Message);
        env.actor = AGENT_ACTOR.to_string();
        env.method = method.to_string();
        env.reply_port = port;
        env.reply_slot = 0;
        if let Err(e) = self.send(agent, &env, parts) {
            self.fill_slot(port, 0, PointValue::error(e.message.clone()));
        }
        Ok(fut)
    }

    /// Our TCP address as reachable from the host of `peer` (`tcp:IP:PORT`),
    /// opening our TCP listener the first time.
    pub(crate) fn tcp_addr_towards(&self, peer: &str) -> Result<String> {
        let crate::transport::Addr::Tcp(sa) = crate::transport::Addr::parse(peer)? else {
            return Err(Error::invalid(format!("'{peer}' is not a TCP address")));
        };
        let ip = crate::transport::local_ip_towards(&sa)?;
        let port = self.tcp_port()?;
        Ok(match ip {
            std::net::IpAddr::V6(v6) => format!("tcp:[{v6}]:{port}"),
            v4 => format!("tcp:{v4}:{port}"),
        })
    }

    fn tcp_port(&self) -> Result<u16> {
        let inner = &self.inner;
        if let Some((_, port)) = inner.tcp_listener.get() {
            return Ok(*port);
        }
        let bind = std::env::var("MONARCH_BIND_ADDR").unwrap_or_else(|_| "0.0.0.0:0".into());
        let (l, actual) = crate::transport::Listener::bind(&format!("tcp:{bind}"))?;
        let port: u16 = actual
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        let l = Arc::new(l);
        if inner.tcp_listener.set((l.clone(), port)).is_err() {
            // Another thread won the race; ours is dropped unused.
            return Ok(inner.tcp_listener.get().expect("set").1);
        }
        let acc = inner.clone();
        std::thread::Builder::new()
            .name("monarch-accept-tcp".into())
            .spawn(move || acc.accept_loop(&l))
            .map_err(|e| Error::io("cannot start accept thread", e))?;
        Ok(port)
    }

    /// Expect a proc at `addr` started by the agent `agent`: sends to it
    /// wait until it reports Ready (or its agent reports its exit).
    pub(crate) fn expect_remote(&self, addr: &str, agent: &str) {
        let ready: Completion<Result<()>> =
            Completion::with_pump(None, Some(self.inner.pump.clone()));
        self.inner.children.expect_ready(addr, ready);
        self.inner.remote.procs.lock().insert(
            addr.to_string(),
            Arc::new(RemoteProc {
                agent: agent.to_string(),
                exit: Completion::new(None),
            }),
        );
        self.inner.start_heartbeat();
    }

    /// Ask remote procs to stop; ask their agents to kill those still
    /// running after `grace`. Returns when all have exited (or their hosts
    /// are gone).
    pub(crate) fn stop_remote(&self, addrs: &[String], grace: Duration) {
        let procs: Vec<(String, Arc<RemoteProc>)> = addrs
            .iter()
            .filter_map(|a| self.inner.remote.get(a).map(|p| (a.clone(), p)))
            .collect();
        for (addr, p) in &procs {
            if p.exit.is_ready() {
                continue;
            }
            let connected = self.inner.peers.contains(addr);
            if connected {
                let mut env = Envelope::new(Kind::StopProc);
                env.sender = self.inner.addr.clone();
                let _ = self.send(addr, &env, &[]);
            }
        }
        let deadline = Instant::now() + grace;
        let mut by_agent: HashMap<String, Vec<String>> = HashMap::new();
        for (addr, p) in &procs {
            let left = deadline.saturating_duration_since(Instant::now());
            if !p.exit.wait(Some(left)) {
                by_agent
                    .entry(p.agent.clone())
                    .or_default()
                    .push(addr.clone());
            }
        }
        for (agent, addrs) in &by_agent {
            let parts: Vec<&[u8]> = addrs.iter().map(|a| a.as_bytes()).collect();
            if let Ok(f) = self.call_agent(agent, KILL, &parts) {
                f.wait(Some(Duration::from_secs(10)));
            }
        }
        for (_, p) in &procs {
            p.exit.wait(Some(Duration::from_secs(10)));
        }
    }
}

impl Inner {
    /// A frame for [`CONTROL_ACTOR`] from an agent.
    pub(super) fn on_agent_message(&self, peer: &str, env: &Envelope, parts: &[Vec<u8>]) {
        let text = |i: usize| {
            parts
                .get(i)
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .unwrap_or_default()
        };
        match env.method.as_str() {
            EXIT => {
                let addr = text(0);
                let how = text(1);
                let Some(p) = self.remote.get(&addr) else {
                    return;
                };
                if p.agent != peer {
                    tracing::warn!(%peer, %addr, "exit report from an agent that does not own the proc");
                    return;
                }
                let n = text(3).parse::<i32>().unwrap_or(-1);
                let cause = match text(2).as_str() {
                    EXIT_SIGNAL => FailureCause::Signal,
                    _ => FailureCause::ExitCode,
                };
                self.remote_ended(&addr, &p, cause, n, &how);
            }
            LOG => {
                let rank = text(1).parse::<u64>().ok();
                let stderr = parts
                    .get(2)
                    .is_some_and(|s| s.as_slice() == LOG_STDERR.as_bytes());
                let line = parts.get(3).map(|l| l.as_slice()).unwrap_or_default();
                crate::logs::emit(rank, stderr, line);
            }
            other => tracing::warn!(%peer, method = other, "unknown agent report; ignored"),
        }
    }

    /// A remote proc is gone (`how`: in words, without the address).
    pub(super) fn remote_ended(
        &self,
        addr: &str,
        p: &RemoteProc,
        cause: FailureCause,
        code: i32,
        how: &str,
    ) {
        let why = format!("proc {addr} {how}");
        let why = why.as_str();
        // Recorded first, so a call made once this one failed fails at once.
        self.proc_failed_at(addr, cause, code, how);
        p.exit.complete(why.to_string());
        if let Some(r) = self.children.take_ready(addr) {
            r.complete(Err(Error::new(ErrorKind::ProcFailed, why.to_string())));
        }
        self.fail_peer_slots(addr, why);
    }

    /// `peer` is gone: when it is a host agent, every proc on its host is
    /// lost with it.
    pub(super) fn remote_peer_lost(&self, peer: &str, reason: &str) {
        for (addr, p) in self.remote.of_agent(peer) {
            if !p.exit.is_ready() {
                let how = format!("is unreachable: its host {peer} was lost ({reason})");
                self.remote_ended(&addr, &p, FailureCause::ConnectionLost, 0, &how);
            }
        }
    }

    /// Whether `addr` is a remote proc that has not ended.
    pub(super) fn remote_is_live(&self, addr: &str) -> bool {
        self.remote.get(addr).is_some_and(|p| !p.exit.is_ready())
    }

    /// Heartbeats for remote procs, as for local children (see
    /// `heartbeat.rs`): probe those that said Ready; one silent for
    /// `timeout` (hung, or behind a cut link) is declared failed with
    /// cause HeartbeatLost, and its agent is asked to kill it.
    pub(super) fn remote_heartbeat_round(&self, timeout: Duration) {
        let running: Vec<(String, Arc<RemoteProc>)> = self
            .remote
            .procs
            .lock()
            .iter()
            .filter(|(_, p)| !p.exit.is_ready())
            .map(|(a, p)| (a.clone(), p.clone()))
            .collect();
        let targets: Vec<(String, Arc<RemoteProc>)> = running
            .into_iter()
            .filter(|(a, _)| !self.children.is_starting(a))
            .collect();
        if targets.is_empty() {
            return;
        }
        let now = Instant::now();
        let mut live = Vec::new();
        let mut lost = Vec::new();
        {
            let mut seen = self.hb.seen.lock();
            for (addr, p) in targets {
                let last = *seen.entry(addr.clone()).or_insert(now);
                if now.duration_since(last) > timeout {
                    if self.hb.lost.lock().insert(addr.clone()) {
                        lost.push((addr, p));
                    }
                } else {
                    live.push(addr);
                }
            }
        }
        let conn_of = |addr: &str| self.peers.get(addr);
        let mut hb = Envelope::new(Kind::Heartbeat);
        hb.sender = self.addr.clone();
        for addr in live {
            if let Some(conn) = conn_of(&addr) {
                self.buffer_small(&conn, &hb);
            }
        }
        for (addr, p) in lost {
            tracing::warn!(%addr, ?timeout, "remote proc stopped answering heartbeats; asking its agent to kill it");
            if let Some(conn) = conn_of(&p.agent) {
                let mut kill = Envelope::new(Kind::Message);
                kill.sender = self.addr.clone();
                kill.actor = AGENT_ACTOR.to_string();
                kill.method = KILL.to_string();
                kill.part_sizes = vec![addr.len() as u64];
                let mut fbb = flatbuffers::FlatBufferBuilder::with_capacity(256);
                let header = kill.encode(&mut fbb);
                if conn.try_buffer(header, &[addr.as_bytes()]).is_some()
                    && !self
                        .deferred
                        .swap(true, std::sync::atomic::Ordering::SeqCst)
                {
                    self.io.kick.signal();
                }
            }
            let how = format!(
                "stopped answering heartbeats for {timeout:?} (hung, or its host is cut off)"
            );
            self.remote_ended(&addr, &p, FailureCause::HeartbeatLost, 0, &how);
        }
    }

    /// For a remote proc known to be gone, the error a send gets at once.
    pub(super) fn remote_dead(&self, addr: &str) -> Option<Error> {
        let p = self.remote.get(addr)?;
        let why = p.exit.peek()?;
        Some(Error::new(ErrorKind::ProcFailed, why))
    }
}
