//! Introspection: what this proc hosts, and a controller's view of its
//! whole job (its procs with their host, state and actors' counters, and
//! the meshes it spawned), gathered on demand.
//!
//! Every runtime serves the built-in actor [`INTROSPECT_ACTOR`], answered
//! by the runtime itself (never queued for the binding, so a busy actor
//! does not delay it):
//! - `proc`: this proc and its actors, at once;
//! - `job`: the view of the job of the proc asked (on a thread of its own,
//!   since it asks its procs in turn) — what `monarch top` calls;
//! - `stop_mesh` (part 0: a mesh name): stop that proc mesh (its procs) or
//!   actor mesh (its actors), answered once done.
//!
//! Any peer that authenticated with the job secret may ask (holding the
//! secret is holding the job, see docs/security.md).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::events::ReplyTo;
use super::{ActorState, Inner, Runtime};
use crate::conn::Defer;
use crate::error::{Error, ErrorKind, Result};
use crate::geometry::Shape;
use crate::introspect::{host_name, ActorInfo, EntityState, Introspection, MeshInfo, ProcInfo};
use crate::value::PointValue;
use crate::wire::{Envelope, Kind};

/// The key of the built-in actor every runtime answers introspection on.
pub const INTROSPECT_ACTOR: &str = "monarch.introspect";
const PROC: &str = "proc";
const JOB: &str = "job";
const STOP_MESH: &str = "stop_mesh";

/// How long a proc mesh stopped from `stop_mesh` has to exit cleanly.
const STOP_GRACE: Duration = Duration::from_secs(5);

fn entity_state(s: &ActorState) -> EntityState {
    match s {
        ActorState::Starting => EntityState::Starting,
        ActorState::Alive => EntityState::Ready,
        ActorState::Failed(_) => EntityState::Failed,
    }
}

impl Inner {
    /// This proc and the actors it hosts (built-in ones left out).
    fn own_proc_info(&self) -> ProcInfo {
        let actors = self
            .actors
            .snapshot()
            .into_iter()
            .filter(|(k, _, _)| k != super::AGENT_ACTOR)
            .map(|(key, state, counts)| ActorInfo {
                key,
                mesh: String::new(),
                rank: 0,
                state: entity_state(&state),
                counts,
            })
            .collect();
        ProcInfo {
            addr: self.id.addr.clone(),
            host: host_name(),
            pid: std::process::id(),
            mesh: String::new(),
            rank: 0,
            state: EntityState::Ready,
            error: String::new(),
            actors,
            answered: true,
        }
    }

    /// A frame for [`INTROSPECT_ACTOR`] from `peer`.
    pub(super) fn on_introspect(
        self: &Arc<Self>,
        peer: &str,
        mut env: Envelope,
        parts: Vec<Vec<u8>>,
    ) {
        if let Err(why) = self.check_sender(peer, &mut env) {
            self.trust.refused(peer, "introspection request", why);
            return;
        }
        let Some(to) = ReplyTo::of(&env) else {
            return;
        };
        match env.method.as_str() {
            PROC => {
                let bytes = Introspection {
                    controller: self.id.controller.clone().unwrap_or_default(),
                    procs: vec![self.own_proc_info()],
                    meshes: Vec::new(),
                }
                .encode();
                self.reply_to(&to, Ok(&[&bytes]), Defer::Yes);
            }
            JOB | STOP_MESH => {
                // Both wait on other procs: never on a reading thread.
                let rt = Runtime {
                    inner: self.clone(),
                };
                let method = env.method.clone();
                let answer_to = to.clone();
                let spawned = std::thread::Builder::new()
                    .name("monarch-introspect".into())
                    .spawn(move || {
                        let result = if method == JOB {
                            rt.introspect(Duration::from_secs(5)).map(|j| j.encode())
                        } else {
                            match parts.first().map(|p| std::str::from_utf8(p)) {
                                Some(Ok(name)) => rt.stop_mesh(name).map(|()| Vec::new()),
                                _ => Err(Error::invalid("stop_mesh takes a mesh name")),
                            }
                        };
                        match &result {
                            Ok(b) => rt.inner.reply_to(&answer_to, Ok(&[b]), Defer::Never),
                            Err(e) => {
                                rt.inner
                                    .reply_to(&answer_to, Err((&e.message, &[])), Defer::Never)
                            }
                        }
                    });
                if let Err(e) = spawned {
                    let msg = format!("cannot start an introspection thread: {e}");
                    self.reply_to(&to, Err((&msg, &[])), Defer::Yes);
                }
            }
            other => {
                let msg = format!("unknown introspection request '{other}'");
                self.reply_to(&to, Err((&msg, &[])), Defer::Yes);
            }
        }
    }

    fn reply_to(self: &Arc<Self>, to: &ReplyTo, result: crate::future::Answer<'_>, defer: Defer) {
        let (env, parts) = super::dispatch::reply_envelope(to.port, to.slot, result);
        if let Err(e) = self.send(&to.peer, &env, parts, defer) {
            tracing::debug!(peer = %to.peer, error = %e, "cannot answer an introspection request");
        }
    }
}

/// The state of a proc the controller started, from its records.
fn proc_state(
    rt: &Runtime,
    addr: &str,
    failed: &HashMap<String, String>,
    stopping: &std::collections::HashSet<String>,
) -> (EntityState, String) {
    let inner = &rt.inner;
    if let Some(why) = failed.get(addr) {
        return (EntityState::Failed, why.clone());
    }
    let ended = match inner.children.get(addr) {
        Some(c) => c.exit.is_ready(),
        None => !inner.remote.is_live(addr),
    };
    if ended || stopping.contains(addr) {
        return (EntityState::Stopped, String::new());
    }
    if inner.children.is_starting(addr) {
        return (EntityState::Starting, String::new());
    }
    (EntityState::Ready, String::new())
}

/// The state of a mesh from its procs' (and, for an actor mesh, its
/// actors') states.
fn mesh_state(states: impl Iterator<Item = EntityState>) -> EntityState {
    let (mut any, mut failed, mut starting, mut stopped) = (0usize, false, false, 0usize);
    for s in states {
        any += 1;
        match s {
            EntityState::Failed => failed = true,
            EntityState::Starting => starting = true,
            EntityState::Stopped => stopped += 1,
            _ => {}
        }
    }
    if failed {
        EntityState::Failed
    } else if any > 0 && stopped == any {
        EntityState::Stopped
    } else if starting {
        EntityState::Starting
    } else {
        EntityState::Ready
    }
}

impl Runtime {
    /// A snapshot of this controller's job: itself, every proc it started
    /// (state, host, pid, and the actors each hosts with their counters,
    /// asked of every ready proc, waiting up to `timeout` in all for their
    /// answers), and the meshes it spawned.
    pub fn introspect(&self, timeout: Duration) -> Result<Introspection> {
        self.check_running()?;
        let deadline = Instant::now() + timeout;
        let inner = &self.inner;
        let rec = inner.supervision.records();
        let here = host_name();
        // Every proc we started, in mesh order, then any other.
        let mut order: Vec<(String, String, u64)> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        // Live meshes first: a stopped mesh's address may be a new proc's.
        let live_first = rec
            .proc_meshes
            .iter()
            .filter(|m| !m.2)
            .chain(rec.proc_meshes.iter().filter(|m| m.2));
        for (name, procs, _) in live_first {
            for (rank, a) in procs.iter().enumerate() {
                if seen.insert(a.clone()) {
                    order.push((a.clone(), name.clone(), rank as u64));
                }
            }
        }
        let mut others: Vec<String> = inner.children.addrs();
        others.extend(inner.remote.addrs());
        others.sort();
        for a in others {
            if seen.insert(a.clone()) {
                order.push((a, String::new(), 0));
            }
        }
        let mut procs = vec![inner.own_proc_info()];
        let mut asked = Vec::new();
        for (addr, mesh, rank) in order {
            let (state, error) = proc_state(self, &addr, &rec.failed_procs, &rec.stopping);
            let (host, pid) = match inner.children.get(&addr) {
                Some(c) => (here.clone(), c.pid),
                None => {
                    let agent = inner.remote.get(&addr).map(|r| r.agent.clone());
                    (agent.map(|a| agent_host(&a)).unwrap_or_default(), 0)
                }
            };
            if state == EntityState::Ready {
                asked.push((procs.len(), self.ask_proc(&addr)));
            }
            procs.push(ProcInfo {
                addr,
                host,
                pid,
                mesh,
                rank,
                state,
                error,
                actors: Vec::new(),
                answered: false,
            });
        }
        for (i, fut) in asked {
            let Ok(fut) = fut else { continue };
            let left = deadline.saturating_duration_since(Instant::now());
            if !fut.wait(Some(left)) {
                continue;
            }
            let Some(Ok(vm)) = fut.peek() else { continue };
            let Some(PointValue::Ok(parts)) = vm.values.first() else {
                continue;
            };
            let Some(Ok(answer)) = parts.first().map(|b| Introspection::decode(b)) else {
                continue;
            };
            if let Some(p) = answer.procs.into_iter().next() {
                let mine = &mut procs[i];
                mine.host = p.host;
                mine.pid = p.pid;
                mine.actors = p.actors;
                mine.answered = true;
            }
        }
        // Actor mesh names and ranks, by actor key and proc.
        let mut actor_meshes: HashMap<&str, (&str, &[String])> = HashMap::new();
        for (key, name, ps) in &rec.actor_meshes {
            actor_meshes.insert(key, (name, ps));
        }
        for p in procs.iter_mut() {
            for a in p.actors.iter_mut() {
                if let Some((name, ps)) = actor_meshes.get(a.key.as_str()) {
                    a.mesh = name.to_string();
                    a.rank = ps.iter().position(|x| *x == p.addr).unwrap_or(0) as u64;
                }
            }
        }
        let by_addr: HashMap<&str, &ProcInfo> =
            procs.iter().map(|p| (p.addr.as_str(), p)).collect();
        let mut meshes = Vec::new();
        for (name, ps, stopped) in &rec.proc_meshes {
            let state = if *stopped {
                EntityState::Stopped
            } else {
                mesh_state(
                    ps.iter()
                        .filter_map(|a| by_addr.get(a.as_str()).map(|p| p.state)),
                )
            };
            meshes.push(MeshInfo {
                name: name.clone(),
                key: String::new(),
                state,
                procs: ps.to_vec(),
            });
        }
        let mut actor_list = rec.actor_meshes.clone();
        actor_list.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)));
        for (key, name, ps) in actor_list {
            let states = ps.iter().map(|a| {
                if rec.failed_actors.contains_key(&(key.clone(), a.clone())) {
                    return EntityState::Failed;
                }
                let Some(p) = by_addr.get(a.as_str()) else {
                    return EntityState::Stopped;
                };
                if p.state != EntityState::Ready {
                    return p.state;
                }
                match p.actors.iter().find(|x| x.key == key) {
                    Some(x) => x.state,
                    None if p.answered => EntityState::Stopped,
                    None => EntityState::Ready,
                }
            });
            let state = mesh_state(states);
            meshes.push(MeshInfo {
                name,
                key,
                state,
                procs: ps,
            });
        }
        Ok(Introspection {
            controller: inner.id.addr.clone(),
            procs,
            meshes,
        })
    }

    /// Ask the proc at `addr` for what it hosts (`proc`).
    fn ask_proc(&self, addr: &str) -> Result<crate::future::Future> {
        self.call_introspect(addr, PROC, &[])
    }

    /// Send request `method` to [`INTROSPECT_ACTOR`] at `addr`.
    fn call_introspect(
        &self,
        addr: &str,
        method: &str,
        parts: &[&[u8]],
    ) -> Result<crate::future::Future> {
        self.check_running()?;
        let shape = Shape::dense(Vec::new(), Vec::new()).expect("empty shape is valid");
        let (port, fut) = self.open_gather(shape, vec![addr.to_string()], None);
        let mut env = Envelope::new(Kind::Message);
        env.actor = INTROSPECT_ACTOR.to_string();
        env.method = method.to_string();
        env.reply_port = port;
        if let Err(e) = self.send(addr, &env, parts) {
            self.fill_slot(port, 0, PointValue::error(e.message.clone()));
        }
        Ok(fut)
    }

    /// Call `method` at `addr` and wait up to `timeout` for its one value.
    fn call_introspect_wait(
        &self,
        addr: &str,
        method: &str,
        parts: &[&[u8]],
        timeout: Duration,
    ) -> Result<Vec<u8>> {
        let fut = self.call_introspect(addr, method, parts)?;
        if !fut.wait(Some(timeout)) {
            return Err(Error::new(
                ErrorKind::Timeout,
                format!("{addr} did not answer within {timeout:?}"),
            ));
        }
        let vm = fut
            .peek()
            .unwrap_or_else(|| Err(Error::invalid("no answer")))?;
        match vm.values.into_iter().next() {
            Some(PointValue::Ok(mut parts)) => Ok(if parts.is_empty() {
                Vec::new()
            } else {
                parts.swap_remove(0)
            }),
            Some(PointValue::Err { message, .. }) => {
                Err(Error::new(ErrorKind::ProcFailed, message))
            }
            None => Err(Error::invalid("no answer")),
        }
    }

    /// The job view of the controller at `controller` (another process of
    /// the job, e.g. for `monarch top`), waiting up to `timeout`.
    pub fn introspect_remote(&self, controller: &str, timeout: Duration) -> Result<Introspection> {
        let bytes = self.call_introspect_wait(controller, JOB, &[], timeout)?;
        Introspection::decode(&bytes).map_err(|e| Error::invalid(e.to_string()))
    }

    /// Ask the controller at `controller` to stop mesh `name` (see
    /// [`Runtime::stop_mesh`]), waiting up to `timeout`.
    pub fn stop_mesh_remote(&self, controller: &str, name: &str, timeout: Duration) -> Result<()> {
        self.call_introspect_wait(controller, STOP_MESH, &[name.as_bytes()], timeout)
            .map(|_| ())
    }

    /// Stop mesh `name` spawned by this process: a proc mesh's procs
    /// (asked to stop, killed after a grace period), or an actor mesh's
    /// actors (their procs keep running).
    pub fn stop_mesh(&self, name: &str) -> Result<()> {
        let rec = self.inner.supervision.records();
        if let Some((_, procs, stopped)) = rec.proc_meshes.iter().find(|(n, _, _)| n == name) {
            // A stopped mesh's addresses may be new procs' by now.
            if !stopped {
                self.stop_procs(procs, STOP_GRACE);
            }
            return Ok(());
        }
        if let Some((key, _, procs)) = rec.actor_meshes.iter().find(|(_, n, _)| n == name) {
            let mut env = Envelope::new(Kind::StopActor);
            env.actor = key.clone();
            for p in procs {
                if let Err(e) = self.send(p, &env, &[]) {
                    tracing::debug!(proc = %p, error = %e, "stop_mesh: proc not reached");
                }
            }
            return Ok(());
        }
        Err(Error::invalid(format!("no mesh named '{name}'")))
    }
}

/// The host part of an agent's address (`tcp:IP:PORT` -> IP).
fn agent_host(agent: &str) -> String {
    let a = agent.strip_prefix("tcp:").unwrap_or(agent);
    match a.rsplit_once(':') {
        Some((h, _)) => h.trim_start_matches('[').trim_end_matches(']').to_string(),
        None => a.to_string(),
    }
}
