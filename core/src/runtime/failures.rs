//! What a failure sets off across the parts of the runtime: a proc lost
//! (it exited, its connection or its host was lost, or it stopped
//! answering heartbeats) fails the reply slots it owed, is recorded in
//! `Supervision` and reported to its mesh's owner; an actor failing here
//! is reported to the proc that spawned it; a supervision event goes to
//! its owner (an actor's event queue or the top level). Also the
//! heartbeat rounds that find hung procs.
//!
//! The decisions on each part's own state are that part's methods
//! (`Supervision`, `Heartbeat`, `RemoteProcs`, `Children`, `Peers`,
//! `ReplyPorts`); this file only connects them.

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::remote::{self, RemoteProc};
use super::supervise::{failure_report, Supervision};
use super::{heartbeat, ActorState, Answer, Event, EventKind, Inner, Runtime};
use crate::error::{Error, ErrorKind};
use crate::process::{Child, ExitInfo};
use crate::supervision::{FailureCause, SupervisionEvent};
use crate::value::PointValue;
use crate::wire::{Envelope, Kind};

/// Losing procs and connections.
impl Inner {
    /// Whether proc `addr`'s end is expected (it, or this runtime, is
    /// being stopped): then it is no failure.
    pub(super) fn is_stopping(&self, addr: &str) -> bool {
        self.lifecycle.is_shutting_down() || self.supervision.is_stopping(addr)
    }

    /// A new proc was started at `addr`: whatever listened there before
    /// has ended (the OS reuses ports), so its exit, failures, stop, lost
    /// connection and heartbeats are not the new one's.
    pub(super) fn new_proc_at(&self, addr: &str) {
        self.children.remove_exited(addr);
        self.remote.remove_ended(addr);
        self.forget_peer_state(addr);
    }

    /// A host agent is called at `addr`: if a proc that has ended listened
    /// there before, forget it (as [`Inner::new_proc_at`]).
    pub(super) fn forget_ended_proc(&self, addr: &str) {
        let child = self.children.remove_exited(addr);
        let remote = self.remote.remove_ended(addr);
        if child || remote {
            tracing::debug!(%addr, "a host agent at an ended proc's address");
            self.forget_peer_state(addr);
        }
    }

    fn forget_peer_state(&self, addr: &str) {
        self.supervision.forget_proc(addr);
        self.peers.forget_lost(&[addr.to_string()]);
        self.heartbeat.forget(addr);
    }

    /// A local child exited (the reaper thread calls this).
    pub(super) fn child_exited(&self, child: &Child, exit: &ExitInfo) {
        tracing::debug!(addr = %child.addr, %exit, "proc exited");
        // A proc that was killed could not remove its socket file; nothing
        // listens there any more. Removed before its loss is reported.
        if let Ok(path) = super::unix_path(&child.addr) {
            let _ = std::fs::remove_file(path);
        }
        // A proc that never said Ready may have failed because this
        // process could not take its connection: say why.
        let why = if child.ready.is_ready() {
            String::new()
        } else {
            self.setup_errors.explain(&child.addr)
        };
        child.ready.complete(Err(Error::new(
            ErrorKind::ProcFailed,
            format!("proc {} {exit} before it was ready{why}", child.addr),
        )));
        self.children.take_ready(&child.addr, false);
        // Recorded first, so a call made once this one failed fails at once.
        self.child_failed(child, exit, &why);
        self.fail_peer_slots(&child.addr, &format!("proc {} {exit}{why}", child.addr));
    }

    /// A child proc has exited (`why`: what is known of the cause, or ""):
    /// unless it was being stopped, its rank of every proc mesh holding it
    /// has failed (idempotent).
    fn child_failed(&self, child: &Child, exit: &ExitInfo, why: &str) {
        if self.is_stopping(&child.addr) {
            return;
        }
        let (cause, code) = if self.heartbeat.is_lost(&child.addr) {
            (FailureCause::HeartbeatLost, 0)
        } else {
            match exit {
                ExitInfo::Code(c) => (FailureCause::ExitCode, *c),
                ExitInfo::Signal(s) => (FailureCause::Signal, *s),
            }
        };
        let how = if cause == FailureCause::HeartbeatLost {
            format!(
                "stopped answering heartbeats for {:?} and was killed",
                heartbeat::timeout()
            )
        } else {
            format!("{exit}{why}")
        };
        self.proc_failed(&child.addr, cause, code, &how);
    }

    /// Proc `addr` (local, or started by a host agent) has failed, `how`
    /// saying in words: unless it was being stopped, its rank of every
    /// proc mesh holding it has failed (idempotent).
    fn proc_failed(&self, addr: &str, cause: FailureCause, code: i32, how: &str) {
        if self.is_stopping(addr) {
            return;
        }
        for ev in self.supervision.proc_failed(addr, cause, code, how) {
            tracing::debug!(report = %ev.report, "supervision: proc failed");
            self.route(ev);
        }
    }

    /// The connection to `peer` ended: fail every reply slot it still owed.
    pub(super) fn peer_lost(&self, peer: &str, reason: String) {
        // When `peer` is a host agent, every proc on its host is lost too.
        for (addr, p) in self.remote.of_agent(peer) {
            if !p.exit.is_ready() {
                let how = format!("is unreachable: its host {peer} was lost ({reason})");
                self.remote_ended(&addr, &p, FailureCause::ConnectionLost, 0, &how);
            }
        }
        if let Some(p) = self.remote.get(peer) {
            // Prefer how the proc ended, as its agent reports it.
            if p.exit.wait(Some(Duration::from_millis(500))) {
                self.fail_peer_slots(peer, &p.exit.peek().unwrap_or_default());
            }
        }
        let child = self.children.get(peer);
        let why = match child {
            // Prefer the exit status to "connection closed" when we can get it.
            Some(c) if c.exit.wait(Some(Duration::from_millis(500))) => {
                if let Some(exit) = c.exit.peek() {
                    self.child_failed(&c, &exit, "");
                }
                format!(
                    "proc {peer} {}",
                    c.exit.peek().map(|e| e.to_string()).unwrap_or_default()
                )
            }
            _ => format!("lost connection to proc {peer}: {reason}"),
        };
        self.fail_peer_slots(peer, &why);
        if self.id.controller.as_deref() == Some(peer) {
            // Our controller is gone: stop, and make sure we really exit.
            tracing::warn!("controller connection lost; stopping this proc");
            self.push_event(Event::stop_proc());
            let _ = std::thread::Builder::new()
                .name("monarch-watchdog".into())
                .spawn(|| {
                    std::thread::sleep(Duration::from_secs(5));
                    // SAFETY: terminating the process is the point.
                    unsafe { libc::_exit(1) };
                });
        }
    }

    /// Fail the reply slots `peer` owed (ours and our relays'), `why`
    /// saying how it was lost.
    pub(super) fn fail_peer_slots(&self, peer: &str, why: &str) {
        self.end_debug_sessions_of(peer);
        let owed = self.ports.owed_by(peer);
        // Routes avoid lost procs; a proc being stopped (its mesh is going
        // away) is not recorded, so the set holds only failed procs of
        // meshes not yet stopped (`Peers::forget_lost`) instead of growing
        // forever.
        if !self.is_stopping(peer) {
            self.peers.mark_lost(peer);
        }
        if let Some(me) = self.me.upgrade() {
            me.relay_peer_lost(peer, why);
        }
        for o in owed {
            let value = if o.relayed {
                // A point the lost proc was to forward a cast to.
                PointValue::error(format!("{why} (it was forwarding this cast to this point)"))
            } else {
                PointValue::error(why)
            };
            self.fill(o.port, o.slot, value);
        }
    }

    /// A frame for the controller's `CONTROL_ACTOR` from the agent `peer`.
    pub(super) fn on_agent_message(&self, peer: &str, env: &Envelope, parts: &[Vec<u8>]) {
        if let Some(e) = self.remote.on_report(peer, &env.method, parts) {
            self.remote_ended(&e.addr, &e.proc, e.cause, e.code, &e.how);
            if e.cause == FailureCause::HeartbeatLost {
                // Hung, by its agent's heartbeats: failed first, then killed.
                if let Some(conn) = self.peers.get(peer) {
                    let kill = remote::kill_request(&self.id.addr, &e.addr);
                    self.buffer_small(&conn, &kill, &[e.addr.as_bytes()]);
                }
            }
        }
    }

    /// A remote proc is gone (`how`: in words, without the address).
    fn remote_ended(&self, addr: &str, p: &RemoteProc, cause: FailureCause, code: i32, how: &str) {
        let why = format!("proc {addr} {how}");
        // Recorded first, so a call made once this one failed fails at once.
        self.proc_failed(addr, cause, code, how);
        p.exit.complete(why.clone());
        if let Some(r) = self.children.take_ready(addr, false) {
            r.complete(Err(Error::new(ErrorKind::ProcFailed, why.clone())));
        }
        self.fail_peer_slots(addr, &why);
    }
}

/// Supervision events: raising and routing them.
impl Inner {
    /// An actor hosted here failed (its constructor raised, an endpoint
    /// raised with nobody waiting or killed it, or its supervisor did not
    /// handle a failure; `cause_text` says how): mark it failed, so later
    /// messages are refused with the report, and report it to the proc
    /// that spawned it. Returns the report.
    pub(super) fn actor_failed(
        self: &Arc<Self>,
        key: &str,
        cause: FailureCause,
        cause_text: &str,
        payload: Vec<u8>,
        caused_by: Option<SupervisionEvent>,
    ) -> String {
        let report = failure_report(&self.supervision.actor_name(key), cause_text);
        self.actors.set(key, ActorState::Failed(report.clone()));
        let here = &self.id.addr;
        match self
            .supervision
            .actor_failure(here, key, cause, &report, payload, caused_by)
        {
            Some((spawner, ev)) => self.send_supervise(&spawner, &ev),
            None => {
                tracing::error!(actor = %key, error = %report, "unhandled failure of an actor with no known owner")
            }
        }
        report
    }

    /// The binding says the actor of `ev` has failed while handling it
    /// (`cause_text`; `payload`: binding-defined, e.g. the pickled
    /// exception): the actor fails as in `actor_failed`, and the sender,
    /// when it waits (also through a reply port the binding took), gets
    /// the report as an error without parts.
    pub(super) fn fail_event(self: &Arc<Self>, ev: &mut Event, cause_text: &str, payload: &[u8]) {
        let already_failed = matches!(self.actors.state(&ev.actor), Some(ActorState::Failed(_)));
        let report = if already_failed {
            match self.actors.state(&ev.actor) {
                Some(ActorState::Failed(r)) => r,
                _ => String::new(),
            }
        } else {
            let cause = if ev.kind == EventKind::Spawn {
                FailureCause::SpawnFailed
            } else {
                FailureCause::EndpointError
            };
            self.actor_failed(&ev.actor, cause, cause_text, payload.to_vec(), None)
        };
        ev.answered = true;
        ev.count_answer(Some(&report));
        Supervision::clear_current_owner(&ev.actor);
        if let Some(to) = &ev.reply {
            let (env, parts) =
                super::dispatch::reply_envelope(to.port, to.slot, Err((&report, &[])));
            if let Err(e) = self.send(&to.peer, &env, parts, crate::conn::Defer::Never) {
                tracing::warn!(peer = %to.peer, error = %e, "cannot tell a caller that its actor failed");
            }
        }
    }

    /// A message nobody waits for could not be delivered to `key` here:
    /// tell its sender.
    pub(super) fn undeliverable(self: &Arc<Self>, sender: &str, key: &str, why: &str) {
        let ev = self.supervision.undeliverable(&self.id.addr, key, why);
        self.send_supervise(sender, &ev);
    }

    fn send_supervise(self: &Arc<Self>, to: &str, ev: &SupervisionEvent) {
        let mut env = Envelope::new(Kind::Supervise);
        env.sender = self.id.addr.clone();
        env.actor = ev.actor.clone();
        let bytes = ev.encode();
        // May run on a reading thread: never block on a full socket.
        if let Err(e) = self.send(to, &env, &[&bytes], crate::conn::Defer::Yes) {
            tracing::error!(to, error = %e, report = %ev.report, "cannot deliver a supervision event; logged here instead");
        }
    }

    /// A `Supervise` frame arrived from `peer`.
    pub(super) fn on_supervise(&self, peer: &str, parts: &[Vec<u8>]) {
        match self.supervision.received(peer, parts) {
            Ok(ev) => self.route(ev),
            Err(why) => self.trust.refused(peer, "Supervise", why),
        }
    }

    /// Deliver an event to its owner: an actor hosted here, or the top level.
    fn route(&self, ev: SupervisionEvent) {
        let owner_alive = !ev.owner.is_empty() && self.actors.is_alive(&ev.owner);
        if owner_alive {
            let bytes = ev.encode();
            self.push_event(Event {
                kind: EventKind::Supervise,
                actor: ev.owner.clone(),
                method: String::new(),
                type_name: String::new(),
                parts: vec![bytes],
                message_rank: 0,
                shape: None,
                reply: None,
                answered: false,
                rt: self.me.clone(),
                counters: None,
                taken: None,
                span: tracing::Span::none(),
            });
            return;
        }
        if !ev.owner.is_empty() {
            tracing::warn!(owner = %ev.owner, "owner of a failed mesh is gone; reporting to the top level");
        }
        self.supervision.push_top_level(ev);
        self.notifier.signal();
    }

    /// The binding answered a `Supervise` event: OK = handled; an error
    /// escalates (the owner actor fails, reported to its own owner).
    pub(super) fn supervise_answered(self: &Arc<Self>, ev: &Event, result: &Answer<'_>) {
        let Err((msg, parts)) = result else {
            return;
        };
        let cause = ev
            .parts
            .first()
            .and_then(|p| SupervisionEvent::decode(p).ok());
        let payload = parts.first().map(|p| p.to_vec()).unwrap_or_default();
        self.actor_failed(
            &ev.actor,
            FailureCause::SupervisorFailed,
            msg,
            payload,
            cause,
        );
    }

    /// Stop the procs of meshes owned by `owner` (all children of this
    /// process when None), then queue `ev`: children stop before their
    /// owner's own stop is handled.
    pub(super) fn stop_owned_then(self: &Arc<Self>, owner: Option<&str>, ev: Event) {
        let addrs: Vec<String> = match owner {
            None => self.children.addrs(),
            // The empty key is the top level's: no actor owns its meshes.
            Some("") => Vec::new(),
            Some(o) => self.supervision.procs_owned_by(o),
        };
        let live = self.children.running_among(addrs);
        if live.is_empty() {
            self.push_event(ev);
            return;
        }
        let me = self.clone();
        let started = std::thread::Builder::new()
            .name("monarch-stop".into())
            .spawn(move || {
                Runtime { inner: me.clone() }.stop_procs(&live, super::STOP_CHILDREN_GRACE);
                me.push_event(ev);
            });
        if let Err(e) = started {
            tracing::error!(error = %e, "cannot start a stop thread");
        }
    }
}

/// Heartbeat rounds.
impl Inner {
    /// Start probing the procs this process started (once; no-op when off).
    pub(super) fn start_heartbeat(self: &Arc<Self>) {
        let Some(t) = heartbeat::timeout() else {
            return;
        };
        if !self.heartbeat.claim_start() {
            return;
        }
        let weak = Arc::downgrade(self);
        let r = std::thread::Builder::new()
            .name("monarch-heartbeat".into())
            .spawn(move || heartbeat_loop(weak, t));
        if let Err(e) = r {
            tracing::error!(error = %e, "cannot start the heartbeat thread");
            self.heartbeat.start_failed();
        }
    }

    /// One round over local children: kill hung ones (their exit is then
    /// reported as HeartbeatLost), probe the others.
    fn heartbeat_round(&self, timeout: Duration) {
        let children: Vec<_> = self.children.all();
        let agents = self.remote.agents_running();
        self.heartbeat.retain(|addr| {
            children
                .iter()
                .any(|c| c.addr == addr && !c.exit.is_ready())
                || self.remote.is_live(addr)
                || agents.contains(addr)
        });
        let ready = children
            .iter()
            .filter(|c| !c.exit.is_ready() && c.ready.peek().is_some_and(|r| r.is_ok()))
            .map(|c| c.addr.clone());
        let checked = self.heartbeat.check(ready, timeout);
        for addr in &checked.hung {
            if let Some(c) = children.iter().find(|c| &c.addr == addr) {
                tracing::warn!(addr = %c.addr, ?timeout, "proc stopped answering heartbeats; killing it");
                c.kill();
            }
        }
        self.probe(&checked.live);
    }

    /// One round over the host agents that started procs still running:
    /// each agent probes its own procs and reports the hung ones (as an
    /// exit with cause HeartbeatLost), so here only the agents are probed.
    /// An agent silent for `timeout` (hung, or behind a cut link) can
    /// neither watch nor kill its procs: they are declared failed with
    /// cause HeartbeatLost.
    fn remote_heartbeat_round(&self, timeout: Duration) {
        let agents = self.remote.agents_running();
        if agents.is_empty() {
            return;
        }
        let checked = self.heartbeat.check(agents, timeout);
        self.probe(&checked.live);
        for agent in checked.hung {
            tracing::warn!(%agent, ?timeout, "host agent stopped answering heartbeats; failing its procs");
            let how = format!(
                "is unreachable: its host agent {agent} stopped answering heartbeats for \
                 {timeout:?} (hung, or its host is cut off)"
            );
            for (addr, p) in self.remote.of_agent(&agent) {
                if !p.exit.is_ready() && !self.children.is_starting(&addr) {
                    if let Some(conn) = self.peers.get(&agent) {
                        let kill = remote::kill_request(&self.id.addr, &addr);
                        self.buffer_small(&conn, &kill, &[addr.as_bytes()]);
                    }
                    self.remote_ended(&addr, &p, FailureCause::HeartbeatLost, 0, &how);
                }
            }
        }
    }

    /// Send a heartbeat to each of `addrs` that is connected.
    fn probe(&self, addrs: &[String]) {
        let mut env = Envelope::new(Kind::Heartbeat);
        env.sender = self.id.addr.clone();
        for addr in addrs {
            if let Some(conn) = self.peers.get(addr) {
                self.buffer_small(&conn, &env, &[]);
            }
        }
    }
}

impl Runtime {
    /// For a host agent: probe the procs at `addrs` (started by this
    /// agent, each connected to it: a proc connects to its agent,
    /// `ENV_AGENT`, before it says Ready) and return those newly declared
    /// hung: silent for the heartbeat timeout. A proc not connected (still
    /// starting) is not checked. Empty while heartbeats are off
    /// (`MONARCH_HEARTBEAT_TIMEOUT_MS=0`).
    pub fn check_heartbeats(&self, addrs: &[String]) -> Vec<String> {
        let Some(timeout) = heartbeat::timeout() else {
            return Vec::new();
        };
        let inner = &self.inner;
        inner.heartbeat.record();
        let connected: Vec<String> = addrs
            .iter()
            .filter(|a| inner.peers.contains(a))
            .cloned()
            .collect();
        inner.heartbeat.retain(|a| addrs.iter().any(|x| x == a));
        let checked = inner.heartbeat.check(connected, timeout);
        inner.probe(&checked.live);
        checked.hung
    }

    /// The heartbeat timeout (None: heartbeats are off), read once from
    /// `MONARCH_HEARTBEAT_TIMEOUT_MS`, and the interval of the probes.
    pub fn heartbeat_timing() -> Option<(Duration, Duration)> {
        heartbeat::timeout().map(|t| (t, heartbeat::interval(t)))
    }
}

fn heartbeat_loop(rt: Weak<Inner>, timeout: Duration) {
    let every = heartbeat::interval(timeout);
    loop {
        std::thread::sleep(every);
        let Some(inner) = rt.upgrade() else { return };
        if inner.lifecycle.is_stopped() {
            return;
        }
        inner.heartbeat_round(timeout);
        inner.remote_heartbeat_round(timeout);
    }
}
