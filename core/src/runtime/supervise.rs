//! `Supervision`: which meshes this process owns (and which actor of it
//! owns each), which procs and actors have failed, and the events for the
//! process's top level (see docs/supervision.md).
//!
//! - A proc started by this process that exits without being asked to (or
//!   is declared hung by the heartbeat) fails its proc mesh's rank: one
//!   event per proc mesh holding it ([`Supervision::proc_failed`]).
//! - An actor hosted here whose endpoint raised with nobody waiting is
//!   marked failed and reported to the proc that spawned it (a `Supervise`
//!   frame, [`Supervision::actor_failure`]), which records it and routes it
//!   to the mesh's owner ([`Supervision::received`]).
//! - A message with nobody waiting that cannot be delivered is reported
//!   back to its sender the same way (cause `Undeliverable`).
//! - Routing: an event for a mesh owned by an actor hosted here becomes an
//!   event of kind `Supervise` in that actor's queue (its binding answers
//!   OK = handled, error = escalate: the owner fails and is reported to its
//!   own owner, with the first failure as cause). An event for a mesh owned
//!   by the process's top level (the controller's main program) waits in a
//!   queue pulled with `Runtime::next_supervision_event`.
//! - Calls to any view that contains a failed proc or actor fail at once
//!   ([`Supervision::check_dests`]).
//!
//! What a failure sets off in the other parts of the runtime (reply ports,
//! the event queue, sending the frame) is in `failures`.

use parking_lot::{Condvar, Mutex};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind, Result};
use crate::supervision::{FailureCause, SupervisionEvent};
use crate::wire::ActorMeshRef;

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
    /// Every proc of it was stopped on purpose: the OS may give their
    /// ports to new procs, whose failures are not this mesh's.
    stopped: bool,
}

struct ActorMeshEntry {
    name: String,
    procs: Vec<String>,
    owner: String,
    /// Its procs were stopped (see `ProcMeshEntry::stopped`).
    stopped: bool,
}

/// A copy of the records introspection reads (`Supervision::records`).
pub(super) struct Records {
    /// (name, procs, stopped) of each proc mesh, in spawn order.
    pub(super) proc_meshes: Vec<(String, Arc<Vec<String>>, bool)>,
    /// (key, name, procs) of each actor mesh.
    pub(super) actor_meshes: Vec<(String, String, Vec<String>)>,
    pub(super) failed_procs: HashMap<String, String>,
    pub(super) failed_actors: HashMap<(String, String), String>,
    pub(super) stopping: HashSet<String>,
}

/// An actor hosted here: who spawned it (where its failures go), and its
/// point in the mesh it was spawned into (its name in failure reports).
struct Hosted {
    spawner: String,
    rank: u64,
    shape: Option<Arc<[u8]>>,
}

/// The supervision state of this process: owned meshes, failures, procs
/// being stopped on purpose, and the top level's event queue.
#[derive(Default)]
pub(super) struct Supervision {
    proc_meshes: Mutex<Vec<ProcMeshEntry>>,
    actor_meshes: Mutex<HashMap<String, ActorMeshEntry>>,
    hosted: Mutex<HashMap<String, Hosted>>,
    /// Actor meshes this process sent one-way messages to (key -> the
    /// mesh): the procs that may report such a message undeliverable.
    sent_one_way: Mutex<HashMap<String, Arc<ActorMeshRef>>>,
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

impl Supervision {
    fn new_event_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The owner of meshes spawned by the calling thread now.
    fn current_owner() -> String {
        OWNER.with(|o| o.borrow().clone())
    }

    /// Make `actor` ("" = the top level) the owner of meshes the calling
    /// thread spawns from now on.
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

    /// Record a proc mesh spawned by the calling thread's owner; returns
    /// its name for supervision reports.
    pub(super) fn register_proc_mesh(&self, procs: Arc<Vec<String>>) -> String {
        let name = format!("procs.{}", self.next_mesh.fetch_add(1, Ordering::Relaxed));
        self.proc_meshes.lock().push(ProcMeshEntry {
            name: name.clone(),
            procs,
            owner: Self::current_owner(),
            stopped: false,
        });
        name
    }

    /// Record an actor mesh spawned by the calling thread's owner.
    pub(super) fn register_actor_mesh(&self, key: &str, name: &str, procs: &[String]) {
        self.actor_meshes.lock().insert(
            key.to_string(),
            ActorMeshEntry {
                name: name.to_string(),
                procs: procs.to_vec(),
                owner: Self::current_owner(),
                stopped: false,
            },
        );
    }

    /// Actor `key` is spawned here by `spawner` at `rank` of the mesh
    /// whose encoded Shape is `shape`.
    pub(super) fn record_hosted(
        &self,
        key: &str,
        spawner: &str,
        rank: u64,
        shape: Option<Arc<[u8]>>,
    ) {
        self.hosted.lock().insert(
            key.to_string(),
            Hosted {
                spawner: spawner.to_string(),
                rank,
                shape,
            },
        );
    }

    /// The proc that spawned actor `key` hosted here.
    pub(super) fn spawner_of(&self, key: &str) -> Option<String> {
        self.hosted.lock().get(key).map(|h| h.spawner.clone())
    }

    /// This process sends a one-way message (nobody waits for an answer)
    /// to actor mesh `mesh`: its procs may report it undeliverable.
    pub(super) fn note_one_way(&self, mesh: &Arc<ActorMeshRef>) {
        let mut sent = self.sent_one_way.lock();
        if !sent.contains_key(&mesh.key) {
            sent.insert(mesh.key.clone(), mesh.clone());
        }
    }

    /// Whether `peer` may report on actor mesh `key`: for a failure, `key`
    /// is a mesh this process spawned and `peer` one of its procs; for an
    /// undeliverable message, one this process sent one-way messages to.
    fn may_report(&self, peer: &str, key: &str, cause: FailureCause) -> bool {
        if cause == FailureCause::Undeliverable {
            return self
                .sent_one_way
                .lock()
                .get(key)
                .is_some_and(|m| m.procs.iter().any(|p| p == peer));
        }
        self.actor_meshes
            .lock()
            .get(key)
            .is_some_and(|m| !m.stopped && m.procs.iter().any(|p| p == peer))
    }

    /// How failure reports name actor `key` hosted here: its mesh's name
    /// and its point, e.g. `trainers{'gpus': 1/4}`.
    pub(super) fn actor_name(&self, key: &str) -> String {
        let mesh = key.rsplit_once('.').map_or(key, |(name, _)| name);
        let hosted = self.hosted.lock();
        let Some(h) = hosted.get(key) else {
            return mesh.to_string();
        };
        let point = h
            .shape
            .as_deref()
            .and_then(|b| crate::wire::decode_shape(b).ok())
            .map(|s| point_text(&s, h.rank))
            .unwrap_or_default();
        format!("{mesh}{point}")
    }

    /// The procs of meshes owned by `owner`.
    pub(super) fn procs_owned_by(&self, owner: &str) -> Vec<String> {
        self.proc_meshes
            .lock()
            .iter()
            .filter(|m| m.owner == owner && !m.stopped)
            .flat_map(|m| m.procs.iter().cloned())
            .collect()
    }

    /// Err when a destination of a message to actor `key` has failed.
    pub(super) fn check_dests<'a>(
        &self,
        key: &str,
        name: &str,
        dests: impl Iterator<Item = (usize, &'a String)>,
    ) -> Result<()> {
        if !self.any_failed.load(Ordering::Acquire) {
            return Ok(());
        }
        let procs = self.failed_procs.lock();
        let actors = self.failed_actors.lock();
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
                        "{}\n(supervision: actor mesh '{name}' has failed at rank {rank} of this view, \
                         actor {key} on proc {addr})",
                        why.trim_end()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// What introspection shows of the meshes and failures recorded here.
    pub(super) fn records(&self) -> Records {
        Records {
            proc_meshes: self
                .proc_meshes
                .lock()
                .iter()
                .map(|m| (m.name.clone(), m.procs.clone(), m.stopped))
                .collect(),
            actor_meshes: self
                .actor_meshes
                .lock()
                .iter()
                .map(|(k, m)| (k.clone(), m.name.clone(), m.procs.clone()))
                .collect(),
            failed_procs: self.failed_procs.lock().clone(),
            failed_actors: self.failed_actors.lock().clone(),
            stopping: self.stopping.lock().clone(),
        }
    }

    /// These procs are being stopped on purpose.
    pub(super) fn mark_stopping(&self, addrs: &[String]) {
        self.stopping.lock().extend(addrs.iter().cloned());
    }

    /// The procs `addrs` were stopped and have exited: meshes all of whose
    /// procs are among them are over (their failures, reports and owners'
    /// stops no longer concern those addresses).
    pub(super) fn meshes_stopped(&self, addrs: &[String]) {
        let gone: HashSet<&str> = addrs.iter().map(|a| a.as_str()).collect();
        let all_gone = |procs: &[String]| procs.iter().all(|p| gone.contains(p.as_str()));
        for m in self.proc_meshes.lock().iter_mut() {
            m.stopped |= all_gone(&m.procs);
        }
        for m in self.actor_meshes.lock().values_mut() {
            m.stopped |= all_gone(&m.procs);
        }
    }

    /// A new proc (or host agent) answers at `addr`, where an earlier proc
    /// that has ended listened (the OS reuses ports): forget that one's
    /// stop and failures, which are not the new one's.
    pub(super) fn forget_proc(&self, addr: &str) {
        self.stopping.lock().remove(addr);
        self.failed_procs.lock().remove(addr);
        self.failed_actors.lock().retain(|(_, a), _| a != addr);
    }

    /// Whether proc `addr` is being stopped on purpose.
    pub(super) fn is_stopping(&self, addr: &str) -> bool {
        self.stopping.lock().contains(addr)
    }

    /// Proc `addr` has failed (`how`: in words, without the address):
    /// record it (once per proc: the reaper and a reader may both get
    /// here) and return one event per proc mesh holding it, for its owner.
    pub(super) fn proc_failed(
        &self,
        addr: &str,
        cause: FailureCause,
        code: i32,
        how: &str,
    ) -> Vec<SupervisionEvent> {
        let report = format!("proc {} {how}", addr);
        {
            let mut failed = self.failed_procs.lock();
            if failed.contains_key(addr) {
                return Vec::new();
            }
            failed.insert(addr.to_string(), report.clone());
        }
        self.any_failed.store(true, Ordering::Release);
        let hosted_meshes: Vec<String> = self
            .actor_meshes
            .lock()
            .values()
            .filter(|m| !m.stopped && m.procs.iter().any(|p| p == addr))
            .map(|m| format!("'{}'", m.name))
            .collect();
        let mut events: Vec<SupervisionEvent> = self
            .proc_meshes
            .lock()
            .iter()
            .filter(|m| !m.stopped)
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
        for ev in &mut events {
            ev.id = self.new_event_id();
        }
        events
    }

    /// Actor `key` hosted on this proc (`here`) failed (`report`: the
    /// whole report, see `failure_report`): the event for the proc that
    /// spawned it, and that proc (None when the actor's spawner is
    /// unknown).
    pub(super) fn actor_failure(
        &self,
        here: &str,
        key: &str,
        cause: FailureCause,
        report: &str,
        payload: Vec<u8>,
        caused_by: Option<SupervisionEvent>,
    ) -> Option<(String, SupervisionEvent)> {
        let (spawner, rank) = {
            let hosted = self.hosted.lock();
            let h = hosted.get(key)?;
            (h.spawner.clone(), h.rank)
        };
        let ev = SupervisionEvent {
            id: self.new_event_id(),
            mesh_key: key.to_string(),
            ranks: vec![rank],
            proc: here.to_string(),
            actor: key.to_string(),
            cause,
            report: report.to_string(),
            caused_by: caused_by.map(Box::new),
            payload,
            ..Default::default()
        };
        Some((spawner, ev))
    }

    /// The event telling a sender that its message to `key` on this proc
    /// (`here`), with nobody waiting, could not be delivered.
    pub(super) fn undeliverable(&self, here: &str, key: &str, why: &str) -> SupervisionEvent {
        SupervisionEvent {
            id: self.new_event_id(),
            mesh_key: key.to_string(),
            proc: here.to_string(),
            actor: key.to_string(),
            cause: FailureCause::Undeliverable,
            report: why.to_string(),
            ..Default::default()
        }
    }

    /// A `Supervise` frame arrived from `peer`: name the mesh, rank and
    /// owner, record the actor's failure, and return the event to route.
    /// Err: why it is refused (malformed, or about a mesh `peer` is no
    /// proc of, see `may_report`).
    pub(super) fn received(
        &self,
        peer: &str,
        parts: &[Vec<u8>],
    ) -> std::result::Result<SupervisionEvent, &'static str> {
        let Some(mut ev) = parts.first().and_then(|p| SupervisionEvent::decode(p).ok()) else {
            return Err("malformed supervision event");
        };
        if !self.may_report(peer, &ev.mesh_key, ev.cause) {
            return Err(if ev.cause == FailureCause::Undeliverable {
                "undeliverable notice from a proc this process sent no one-way message to"
            } else {
                "failure report about an actor mesh the peer is no proc of"
            });
        }
        ev.proc = peer.to_string();
        let entry = self
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
        if ev.cause == FailureCause::Undeliverable {
            let rank = ev.ranks.first().map(|r| r.to_string()).unwrap_or_default();
            ev.report = format!(
                "actor mesh '{}' rank {rank} (actor {} on proc {peer}) {}:\n{}",
                ev.mesh,
                ev.actor,
                ev.cause_text(),
                ev.report
            );
        } else {
            // The failing proc wrote the report (see `failure_report`).
            self.failed_actors
                .lock()
                .insert((ev.mesh_key.clone(), peer.to_string()), ev.report.clone());
            self.any_failed.store(true, Ordering::Release);
        }
        Ok(ev)
    }

    /// Queue an event for the top level and wake its waiters.
    pub(super) fn push_top_level(&self, ev: SupervisionEvent) {
        self.queue.lock().push_back(ev);
        self.cv.notify_all();
    }

    /// Take the next event for the top level, waiting up to `timeout`
    /// (None: forever); `stopped` says when to give up.
    pub(super) fn next_top_level(
        &self,
        timeout: Option<Duration>,
        stopped: &dyn Fn() -> bool,
    ) -> Result<SupervisionEvent> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut q = self.queue.lock();
        loop {
            if let Some(ev) = q.pop_front() {
                return Ok(ev);
            }
            if stopped() {
                return Err(Error::new(ErrorKind::Stopped, "runtime was shut down"));
            }
            match deadline {
                None => self.cv.wait(&mut q),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(Error::new(ErrorKind::Timeout, "no supervision event"));
                    }
                    self.cv.wait_for(&mut q, left);
                }
            }
        }
    }

    /// Whether an event is waiting for the top level.
    pub(super) fn has_top_level_event(&self) -> bool {
        !self.queue.lock().is_empty()
    }

    /// Wake every thread waiting in `next_top_level` (at shutdown).
    pub(super) fn wake_waiters(&self) {
        let _q = self.queue.lock();
        self.cv.notify_all();
    }
}

/// The report of a failed actor named `actor` (see `actor_name`), in the
/// shape upstream Monarch's reports have: who failed, then the cause
/// indented.
pub(super) fn failure_report(actor: &str, cause: &str) -> String {
    let mut out = format!("The actor {actor} and all its descendants have failed:\n");
    for line in cause.trim_end().lines() {
        out.push_str("  ");
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// A point of `shape` as failure reports print it: `{'hosts': 0/2,
/// 'gpus': 1/4}` (row-major `rank`); "" for a shape with no dimensions.
fn point_text(shape: &crate::geometry::Shape, rank: u64) -> String {
    if shape.ndim() == 0 {
        return String::new();
    }
    let mut rest = rank as usize;
    let mut coords = vec![0usize; shape.ndim()];
    for (i, &size) in shape.sizes().iter().enumerate().rev() {
        let size = size.max(1);
        coords[i] = rest % size;
        rest /= size;
    }
    let dims: Vec<String> = shape
        .labels()
        .iter()
        .zip(coords)
        .zip(shape.sizes())
        .map(|((label, c), size)| format!("'{label}': {c}/{size}"))
        .collect();
    format!("{{{}}}", dims.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::Shape;

    #[test]
    fn failure_reports_name_the_actor_and_its_point() {
        let shape = Shape::new(&[("hosts", 2), ("gpus", 4)]).unwrap();
        assert_eq!(point_text(&shape, 6), "{'hosts': 1/2, 'gpus': 2/4}");
        assert_eq!(point_text(&Shape::new(&[]).unwrap(), 0), "");
        let s = Supervision::default();
        let bytes: Arc<[u8]> = crate::wire::encode_shape(&shape).into();
        s.record_hosted("trainers.7", "unix:/x", 6, Some(bytes));
        let name = s.actor_name("trainers.7");
        assert_eq!(name, "trainers{'hosts': 1/2, 'gpus': 2/4}");
        assert_eq!(s.actor_name("gone.3"), "gone");
        assert_eq!(
            failure_report(&name, "boom\nline 2\n"),
            "The actor trainers{'hosts': 1/2, 'gpus': 2/4} and all its descendants have failed:\n  boom\n  line 2\n"
        );
    }

    #[test]
    fn a_new_proc_at_a_stopped_procs_address_is_not_the_old_one() {
        let s = Supervision::default();
        let old = vec![
            "tcp:10.0.0.1:4000".to_string(),
            "tcp:10.0.0.1:4001".to_string(),
        ];
        let addr = old[0].as_str();
        s.register_proc_mesh(Arc::new(old.clone()));
        s.register_actor_mesh("trainers.1", "trainers", &old);
        let fail = || s.proc_failed(addr, FailureCause::Signal, 9, "was killed by signal 9");
        assert_eq!(
            fail().len(),
            1,
            "a failure of a live mesh's proc is its event"
        );
        assert!(s
            .check_dests("trainers.1", "trainers", [(0, &old[0])].into_iter())
            .is_err());
        s.mark_stopping(&old);
        s.meshes_stopped(&old);
        assert!(
            s.procs_owned_by("").is_empty(),
            "a stopped mesh is not stopped again"
        );
        // The OS gives the port to a new proc of a new mesh.
        s.forget_proc(addr);
        assert!(!s.is_stopping(addr));
        let new = vec![old[0].clone()];
        s.register_proc_mesh(Arc::new(new.clone()));
        s.register_actor_mesh("workers.2", "workers", &new);
        assert!(s
            .check_dests("workers.2", "workers", [(0, &new[0])].into_iter())
            .is_ok());
        let events = fail();
        assert_eq!(
            events.len(),
            1,
            "only the new mesh hears of the new proc's failure"
        );
        assert!(
            events[0].report.contains("actor meshes on it: 'workers'"),
            "{}",
            events[0].report
        );
        assert!(
            !events[0].report.contains("trainers"),
            "{}",
            events[0].report
        );
    }
}
