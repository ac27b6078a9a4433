//! The controller's side of procs started by host agents on other hosts
//! (the requests and reports are in `agent_protocol`; see docs/hosts.md):
//! `RemoteProcs` holds those procs and reads the exits and logs their
//! agents report; `Runtime` calls agents, expects their procs and stops
//! them. A remote proc's exit, its host's loss and a lost heartbeat feed
//! the same supervision path as a local child's death (`failures`).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Runtime;
use crate::completion::Completion;
use crate::error::{Error, ErrorKind, Result};
use crate::geometry::Shape;
use crate::supervision::FailureCause;
use crate::value::PointValue;
use crate::wire::{Envelope, Kind};

pub use crate::agent_protocol::{AGENT_ACTOR, CONTROL_ACTOR};
use crate::agent_protocol::{EXIT, EXIT_SIGNAL, HUNG, KILL, LOG, LOG_STDERR};

/// A proc started by a host agent.
pub(crate) struct RemoteProc {
    /// The agent's address.
    pub agent: String,
    /// How the proc ended (or that its host was lost).
    pub exit: Completion<String>,
}

/// The procs started by host agents, by address.
#[derive(Default)]
pub(crate) struct RemoteProcs {
    procs: Mutex<HashMap<String, Arc<RemoteProc>>>,
}

/// A proc's exit, as its agent reported it.
pub(super) struct RemoteExit {
    pub(super) addr: String,
    pub(super) proc: Arc<RemoteProc>,
    pub(super) cause: FailureCause,
    pub(super) code: i32,
    /// In words, without the address.
    pub(super) how: String,
}

impl RemoteProcs {
    pub(super) fn get(&self, addr: &str) -> Option<Arc<RemoteProc>> {
        self.procs.lock().get(addr).cloned()
    }

    /// Expect proc `addr`, started by the agent at `agent`.
    fn insert(&self, addr: &str, agent: &str) {
        self.procs.lock().insert(
            addr.to_string(),
            Arc::new(RemoteProc {
                agent: agent.to_string(),
                exit: Completion::new(None),
            }),
        );
    }

    /// Forget proc `addr` if it has ended; whether there was one.
    pub(super) fn remove_ended(&self, addr: &str) -> bool {
        let mut procs = self.procs.lock();
        let ended = procs.get(addr).is_some_and(|p| p.exit.is_ready());
        if ended {
            procs.remove(addr);
        }
        ended
    }

    /// The procs started by the agent at `agent`.
    pub(super) fn of_agent(&self, agent: &str) -> Vec<(String, Arc<RemoteProc>)> {
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

    /// The agents that have procs still running.
    pub(super) fn agents_running(&self) -> std::collections::HashSet<String> {
        self.procs
            .lock()
            .values()
            .filter(|p| !p.exit.is_ready())
            .map(|p| p.agent.clone())
            .collect()
    }

    /// Whether `addr` is a remote proc that has not ended.
    pub(super) fn is_live(&self, addr: &str) -> bool {
        self.get(addr).is_some_and(|p| !p.exit.is_ready())
    }

    /// For a remote proc known to be gone, the error a send gets at once.
    pub(super) fn dead_error(&self, addr: &str) -> Option<Error> {
        let p = self.get(addr)?;
        let why = p.exit.peek()?;
        Some(Error::new(ErrorKind::ProcFailed, why))
    }

    /// A report from the agent at `peer` (a frame for [`CONTROL_ACTOR`]):
    /// a log line is written out here; a proc's exit, or that it hung, is
    /// returned.
    pub(super) fn on_report(
        &self,
        peer: &str,
        method: &str,
        parts: &[Vec<u8>],
    ) -> Option<RemoteExit> {
        let text = |i: usize| {
            parts
                .get(i)
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .unwrap_or_default()
        };
        match method {
            EXIT => {
                let addr = text(0);
                let how = text(1);
                let p = self.get(&addr)?;
                if p.agent != peer {
                    tracing::warn!(%peer, %addr, "exit report from an agent that does not own the proc");
                    return None;
                }
                let code = text(3).parse::<i32>().unwrap_or(-1);
                let cause = match text(2).as_str() {
                    EXIT_SIGNAL => FailureCause::Signal,
                    _ => FailureCause::ExitCode,
                };
                Some(RemoteExit {
                    addr,
                    proc: p,
                    cause,
                    code,
                    how,
                })
            }
            HUNG => {
                let addr = text(0);
                let p = self.get(&addr)?;
                if p.agent != peer || p.exit.is_ready() {
                    return None;
                }
                Some(RemoteExit {
                    addr,
                    proc: p,
                    cause: FailureCause::HeartbeatLost,
                    code: 0,
                    how: text(1),
                })
            }
            LOG => {
                let rank = text(1).parse::<u64>().ok();
                let stderr = parts
                    .get(2)
                    .is_some_and(|s| s.as_slice() == LOG_STDERR.as_bytes());
                let lines: Vec<&[u8]> = parts.iter().skip(3).map(|l| l.as_slice()).collect();
                let name = text(0);
                crate::logs::emit_lines(&name, rank, stderr, &lines);
                None
            }
            other => {
                tracing::warn!(%peer, method = other, "unknown agent report; ignored");
                None
            }
        }
    }
}

/// The request asking an agent to kill proc `addr`, from `sender`.
pub(super) fn kill_request(sender: &str, addr: &str) -> Envelope {
    let mut kill = Envelope::new(Kind::Message);
    kill.sender = sender.to_string();
    kill.actor = AGENT_ACTOR.to_string();
    kill.method = KILL.to_string();
    kill.part_sizes = vec![addr.len() as u64];
    kill
}

impl Runtime {
    /// Call `method` of the agent at `agent` with `parts`; the future's
    /// single value is the agent's answer.
    pub fn call_agent(&self, agent: &str, method: &str, parts: &[&[u8]]) -> Result<super::Future> {
        self.check_running()?;
        // An ended proc recorded at this address was an earlier listener
        // on the port the agent has now.
        self.inner.forget_ended_proc(agent);
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
        self.inner.listeners.tcp_port()
    }

    /// Expect a proc at `addr` started by the agent `agent`: sends to it
    /// wait until it reports Ready (or its agent reports its exit).
    /// `watch` follows its start.
    pub(crate) fn expect_remote(&self, addr: &str, agent: &str, watch: super::StartWatch) {
        let ready: Completion<Result<()>> =
            Completion::with_pump(None, Some(self.inner.pump.clone()));
        self.inner.new_proc_at(addr);
        self.inner.children.expect_ready(addr, ready, watch);
        self.inner.remote.insert(addr, agent);
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
                env.sender = self.inner.id.addr.clone();
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
