//! Supervision in the runtime: which meshes this process owns (and which
//! actor of it owns each), which procs and actors have failed, and where a
//! failure goes (see docs/supervision.md).
//!
//! - A proc started by this process that exits without being asked to (or
//!   is declared hung by the heartbeat) fails its proc mesh's rank; an
//!   event goes to the mesh's owner.
//! - An actor hosted here whose endpoint raised with nobody waiting is
//!   marked failed and reported to the proc that spawned it (a `Supervise`
//!   frame), which records it and routes it to the mesh's owner.
//! - A message with nobody waiting that cannot be delivered is reported
//!   back to its sender the same way (cause `Undeliverable`).
//! - Routing: an event for a mesh owned by an actor hosted here becomes an
//!   event of kind `Supervise` in that actor's queue (its binding answers
//!   OK = handled, error = escalate: the owner fails and is reported to its
//!   own owner, with the first failure as cause). An event for a mesh owned
//!   by the process's top level (the controller's main program) waits in a
//!   queue pulled with `Runtime::next_supervision_event`.
//! - Calls to any view that contains a failed proc or actor fail at once.

use parking_lot::{Condvar, Mutex};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{ActorState, Event, EventKind, Inner, Runtime};
use crate::error::{Error, ErrorKind, Result};
use crate::process::{Child, ExitInfo};
use crate::supervision::{FailureCause, SupervisionEvent};
use crate::wire::{Envelope, Kind};

thread_local! {
    /// The actor whose event this thread is handling (set when
    /// `next_event` hands one out): meshes spawned by this thread while it
    /// handles it are owned by that actor.
    static OWNER: RefCell<String> = const { RefCell::new(String::new()) };
}

struct ProcMeshEntry {
    name: String,
    procs: Arc<Vec<String>>,
    owner: String,
}

struct ActorMeshEntry {
    name: String,
    procs: Vec<String>,
    owner: String,
}

/// An actor hosted here: who spawned it (where its failures go).
struct Hosted {
    spawner: String,
    rank: u64,
}

#[derive(Default)]
pub(super) struct Supervision {
    proc_meshes: Mutex<Vec<ProcMeshEntry>>,
    actor_meshes: Mutex<HashMap<String, ActorMeshEntry>>,
    hosted: Mutex<HashMap<String, Hosted>>,
    /// Set once anything failed (fast path of `check_dests`).
    any_failed: AtomicBool,
    /// Failed procs: address -> report.
    failed_procs: Mutex<HashMap<String, String>>,
    /// Failed actors: (actor key, proc address) -> report.
    failed_actors: Mutex<HashMap<(String, String), String>>,
    /// Procs being stopped on purpose: their exit is no failure.
    stopping: Mutex<HashSet<String>>,
    /// Events for the top level (`next_supervision_event`).
    queue: Mutex<VecDeque<SupervisionEvent>>,
    cv: Condvar,
    next_id: AtomicU64,
    next_mesh: AtomicU64,
}

impl Inner {
    fn new_event_id(&self) -> u64 {
        self.sup.next_id.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The owner of meshes spawned by the calling thread now.
    pub(super) fn current_owner() -> String {
        OWNER.with(|o| o.borrow().clone())
    }

    pub(super) fn set_current_owner(actor: &str) {
        OWNER.with(|o| {
            let mut o = o.borrow_mut();
            if o.as_str() != actor {
                o.clear();
                o.push_str(actor);
            }
        });
    }

    /// Forget the owner if it is `actor` (its event was answered).
    pub(super) fn clear_current_owner(actor: &str) {
        OWNER.with(|o| {
            let mut o = o.borrow_mut();
            if o.as_str() == actor {
                o.clear();
            }
        });
    }

    pub(super) fn register_proc_mesh(&self, procs: Arc<Vec<String>>) -> String {
        let name = format!(
            "procs.{}",
            self.sup.next_mesh.fetch_add(1, Ordering::Relaxed)
        );
        self.sup.proc_meshes.lock().push(ProcMeshEntry {
            name: name.clone(),
            procs,
            owner: Self::current_owner(),
        });
        name
    }

    pub(super) fn register_actor_mesh(&self, key: &str, name: &str, procs: &[String]) {
        self.sup.actor_meshes.lock().insert(
            key.to_string(),
            ActorMeshEntry {
                name: name.to_string(),
                procs: procs.to_vec(),
                owner: Self::current_owner(),
            },
        );
    }

    pub(super) fn record_hosted(&self, key: &str, spawner: &str, rank: u64) {
        self.sup.hosted.lock().insert(
            key.to_string(),
            Hosted {
                spawner: spawner.to_string(),
                rank,
            },
        );
    }

    /// Err when a destination of a message to actor `key` has failed.
    pub(super) fn check_dests<'a>(
        &self,
        key: &str,
        name: &str,
        dests: impl Iterator<Item = (usize, &'a String)>,
    ) -> Result<()> {
        if !self.sup.any_failed.load(Ordering::Acquire) {
            return Ok(());
        }
        let procs = self.sup.failed_procs.lock();
        let actors = self.sup.failed_actors.lock();
        // The failed procs and this mesh's failed actors, by address (few),
        // so each point costs one lookup and no allocation.
        let mut failed: HashMap<&str, &str> = actors
            .iter()
            .filter(|((k, _), _)| k == key)
            .map(|((_, a), why)| (a.as_str(), why.as_str()))
            .collect();
        failed.extend(procs.iter().map(|(a, why)| (a.as_str(), why.as_str())));
        if failed.is_empty() {
            return Ok(());
        }
        for (rank, addr) in dests {
            if let Some(why) = failed.get(addr.as_str()) {
                return Err(Error::new(
                    ErrorKind::ProcFailed,
                    format!(
                        "supervision: actor mesh '{name}' has failed at rank {rank} of this view \
                         (actor {key} on proc {addr}): {why}"
                    ),
                ));
            }
        }
        Ok(())
    }

    pub(super) fn mark_stopping(&self, addrs: &[String]) {
        self.sup.stopping.lock().extend(addrs.iter().cloned());
    }

    pub(super) fn is_stopping(&self, addr: &str) -> bool {
        self.shutting_down.load(Ordering::SeqCst) || self.sup.stopping.lock().contains(addr)
    }

    /// A child proc has exited: unless it was being stopped, its rank of
    /// every proc mesh holding it has failed (idempotent).
    pub(super) fn proc_failed(&self, child: &Child, exit: &ExitInfo) {
        if self.is_stopping(&child.addr) {
            return;
        }
        let (cause, code) = if self.heartbeat_lost(&child.addr) {
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
                super::heartbeat::timeout()
            )
        } else {
            exit.to_string()
        };
        self.proc_failed_at(&child.addr, cause, code, &how);
    }

    /// Proc `addr` (local, or started by a host agent) has failed, `how`
    /// saying in words: unless it was being stopped, its rank of every
    /// proc mesh holding it has failed (idempotent).
    pub(super) fn proc_failed_at(&self, addr: &str, cause: FailureCause, code: i32, how: &str) {
        if self.is_stopping(addr) {
            return;
        }
        let report = format!("proc {} {how}", addr);
        {
            // Once per proc (the reaper and a reader may both get here).
            let mut failed = self.sup.failed_procs.lock();
            if failed.contains_key(addr) {
                return;
            }
            failed.insert(addr.to_string(), report.clone());
        }
        self.sup.any_failed.store(true, Ordering::Release);
        let hosted_meshes: Vec<String> = self
            .sup
            .actor_meshes
            .lock()
            .values()
            .filter(|m| m.procs.iter().any(|p| p == addr))
            .map(|m| format!("'{}'", m.name))
            .collect();
        let events: Vec<SupervisionEvent> = self
            .sup
            .proc_meshes
            .lock()
            .iter()
            .filter_map(|m| {
                let rank = m.procs.iter().position(|p| *p == addr)?;
                let mut report = format!("{report} (rank {rank} of proc mesh '{}')", m.name);
                if !hosted_meshes.is_empty() {
                    report.push_str(&format!(
                        "; actor meshes on it: {}",
                        hosted_meshes.join(", ")
                    ));
                }
                Some(SupervisionEvent {
                    mesh: m.name.clone(),
                    ranks: vec![rank as u64],
                    proc: addr.to_string(),
                    owner: m.owner.clone(),
                    cause,
                    code,
                    report,
                    ..Default::default()
                })
            })
            .collect();
        for mut ev in events {
            ev.id = self.new_event_id();
            tracing::debug!(report = %ev.report, "supervision: proc failed");
            self.route(ev);
        }
    }

    /// An actor hosted here failed with nobody waiting (an endpoint raised
    /// under broadcast, or its supervisor did not handle a failure): mark it
    /// failed and report it to the proc that spawned it.
    pub(super) fn actor_failed(
        self: &Arc<Self>,
        key: &str,
        cause: FailureCause,
        report: &str,
        payload: Vec<u8>,
        caused_by: Option<SupervisionEvent>,
    ) {
        self.actors.set(key, ActorState::Failed(report.to_string()));
        let (spawner, rank) = match self.sup.hosted.lock().get(key) {
            Some(h) => (h.spawner.clone(), h.rank),
            None => {
                tracing::error!(actor = %key, error = %report, "unhandled failure of an actor with no known owner");
                return;
            }
        };
        let ev = SupervisionEvent {
            id: self.new_event_id(),
            mesh_key: key.to_string(),
            ranks: vec![rank],
            proc: self.addr.clone(),
            actor: key.to_string(),
            cause,
            report: report.to_string(),
            caused_by: caused_by.map(Box::new),
            payload,
            ..Default::default()
        };
        self.send_supervise(&spawner, &ev);
    }

    /// A message nobody waits for could not be delivered to `key` here:
    /// tell its sender.
    pub(super) fn undeliverable(self: &Arc<Self>, sender: &str, key: &str, why: &str) {
        let ev = SupervisionEvent {
            id: self.new_event_id(),
            mesh_key: key.to_string(),
            proc: self.addr.clone(),
            actor: key.to_string(),
            cause: FailureCause::Undeliverable,
            report: why.to_string(),
            ..Default::default()
        };
        self.send_supervise(sender, &ev);
    }

    fn send_supervise(self: &Arc<Self>, to: &str, ev: &SupervisionEvent) {
        let mut env = Envelope::new(Kind::Supervise);
        env.sender = self.addr.clone();
        env.actor = ev.actor.clone();
        let bytes = ev.encode();
        // May run on a reading thread: never block on a full socket.
        if let Err(e) = self.send(to, &env, &[&bytes], crate::conn::Defer::Yes) {
            tracing::error!(to, error = %e, report = %ev.report, "cannot deliver a supervision event; logged here instead");
        }
    }

    /// A `Supervise` frame arrived from `peer`.
    pub(super) fn on_supervise(&self, peer: &str, parts: &[Vec<u8>]) {
        let Some(mut ev) = parts.first().and_then(|p| SupervisionEvent::decode(p).ok()) else {
            tracing::warn!(%peer, "malformed supervision event dropped");
            return;
        };
        ev.proc = peer.to_string();
        let entry = self
            .sup
            .actor_meshes
            .lock()
            .get(&ev.mesh_key)
            .map(|m| (m.name.clone(), m.owner.clone(), m.procs.clone()));
        match entry {
            Some((name, owner, procs)) => {
                ev.mesh = name;
                ev.owner = owner;
                if let Some(r) = procs.iter().position(|p| p == peer) {
                    ev.ranks = vec![r as u64];
                }
            }
            None => {
                ev.mesh = ev
                    .mesh_key
                    .rsplit_once('.')
                    .map(|(n, _)| n.to_string())
                    .unwrap_or_else(|| ev.mesh_key.clone());
            }
        }
        if ev.cause != FailureCause::Undeliverable {
            self.sup.failed_actors.lock().insert(
                (ev.mesh_key.clone(), peer.to_string()),
                format!("actor {} failed: {}", ev.actor, summary(&ev.report)),
            );
            self.sup.any_failed.store(true, Ordering::Release);
        }
        let rank = ev.ranks.first().map(|r| r.to_string()).unwrap_or_default();
        ev.report = format!(
            "actor mesh '{}' rank {rank} (actor {} on proc {peer}) {}:\n{}",
            ev.mesh,
            ev.actor,
            ev.cause_text(),
            ev.report
        );
        self.route(ev);
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
            });
            return;
        }
        if !ev.owner.is_empty() {
            tracing::warn!(owner = %ev.owner, "owner of a failed mesh is gone; reporting to the top level");
        }
        self.sup.queue.lock().push_back(ev);
        self.sup.cv.notify_all();
        self.notifier.signal();
    }

    /// The binding answered a `Supervise` event: OK = handled; an error
    /// escalates (the owner actor fails, reported to its own owner).
    pub(super) fn supervise_answered(self: &Arc<Self>, ev: &Event, result: &super::Answer<'_>) {
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
            Some(o) => self
                .sup
                .proc_meshes
                .lock()
                .iter()
                .filter(|m| m.owner == o)
                .flat_map(|m| m.procs.iter().cloned())
                .collect(),
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

    pub(super) fn wake_supervision_waiters(&self) {
        let _q = self.sup.queue.lock();
        self.sup.cv.notify_all();
    }
}

impl Inner {
    /// See [`Runtime::next_supervision_event`].
    pub(super) fn next_supervision_event(
        &self,
        timeout: Option<Duration>,
    ) -> Result<SupervisionEvent> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let sup = &self.sup;
        let mut q = sup.queue.lock();
        loop {
            if let Some(ev) = q.pop_front() {
                return Ok(ev);
            }
            if self.stopped.load(Ordering::SeqCst) {
                return Err(Error::new(ErrorKind::Stopped, "runtime was shut down"));
            }
            match deadline {
                None => sup.cv.wait(&mut q),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(Error::new(ErrorKind::Timeout, "no supervision event"));
                    }
                    sup.cv.wait_for(&mut q, left);
                }
            }
        }
    }

    /// Whether a supervision event is waiting for the top level.
    pub(super) fn has_supervision_event(&self) -> bool {
        !self.sup.queue.lock().is_empty()
    }
}

/// The last non-empty line (of a traceback: the exception itself).
fn summary(s: &str) -> &str {
    s.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
}
