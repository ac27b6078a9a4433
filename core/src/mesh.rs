//! Proc meshes and actor meshes: views over base ranks, with the
//! operations a controller (or any actor) performs on them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, ErrorKind, Result};
use crate::geometry::Shape;
use crate::limits::{check_local_procs, check_name, check_payload};
use crate::multicast::{self, LazyRelays, Node, ViewIndex, FORWARD_ONLY};
use crate::port::PortRef;
use crate::runtime::cast::{set_cast_fields, set_view_fields};
use crate::runtime::PortReceiver;
use crate::runtime::{Future, Runtime};
use crate::value::{PointValue, ValueMesh};
use crate::wire::{encode_shape, ActorMeshRef, Envelope, Kind};

/// How long a stopping proc may take before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// An n-d array of procs.
#[derive(Clone)]
pub struct ProcMesh {
    rt: Runtime,
    /// Address of the proc at each base rank.
    procs: Arc<Vec<String>>,
    shape: Shape,
    /// Rebuilt from a reference received in a message: another process
    /// owns these procs, so this one cannot stop them.
    is_ref: bool,
}

/// How a call is delivered and answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallMode {
    /// Every point answers; the future yields a ValueMesh of the mesh's shape.
    All,
    /// Like `All`, but the mesh must have exactly one point.
    One,
    /// One point, chosen by the runtime, answers.
    Choose,
    /// Every point gets the message; nobody answers.
    Broadcast,
}

impl ProcMesh {
    /// Start one OS process per point of `shape`, each running `argv` with
    /// `env` and the bootstrap environment added (the rest is inherited).
    /// Returns at once; the procs become usable when they report Ready
    /// (sends to them wait for that). More procs than the mesh size limit or
    /// the user's process limit allow is an invalid argument.
    pub fn spawn(
        rt: &Runtime,
        shape: Shape,
        argv: &[String],
        env: &[(String, String)],
    ) -> Result<ProcMesh> {
        if shape.is_empty() {
            return Err(Error::invalid(format!(
                "cannot spawn an empty proc mesh {shape}"
            )));
        }
        check_local_procs(shape.len())?;
        let procs = Arc::new(rt.spawn_procs(shape.len(), argv, env)?);
        rt.register_proc_mesh(procs.clone());
        Ok(ProcMesh {
            rt: rt.clone(),
            procs,
            shape,
            is_ref: false,
        })
    }

    /// A mesh over procs already started (e.g. by host agents), in base
    /// rank order.
    pub(crate) fn from_parts(rt: &Runtime, procs: Vec<String>, shape: Shape) -> ProcMesh {
        let procs = Arc::new(procs);
        rt.register_proc_mesh(procs.clone());
        ProcMesh {
            rt: rt.clone(),
            procs,
            shape,
            is_ref: false,
        }
    }

    /// The proc of the calling process itself, as a mesh with no dimensions.
    pub fn this_proc(rt: &Runtime) -> ProcMesh {
        ProcMesh {
            rt: rt.clone(),
            procs: Arc::new(vec![rt.addr().to_string()]),
            shape: Shape::dense(Vec::new(), Vec::new()).expect("empty shape is valid"),
            is_ref: false,
        }
    }

    /// A reference to this mesh (view) that can travel in a message: an
    /// `ActorMeshRef` flatbuffer with the empty actor key (which names no
    /// actor, so it cannot be taken for an actor mesh's reference).
    pub fn to_ref(&self) -> Vec<u8> {
        ActorMeshRef {
            name: String::new(),
            key: String::new(),
            procs: self.procs.to_vec(),
            shape: self.shape.clone(),
        }
        .encode()
    }

    /// Rebuild a mesh from a reference made by [`ProcMesh::to_ref`] in any
    /// proc of the job. Actors can be spawned on it; it cannot be stopped
    /// from here (its procs belong to the process that started them).
    pub fn from_ref(rt: &Runtime, bytes: &[u8]) -> Result<ProcMesh> {
        let r = ActorMeshRef::decode(bytes).map_err(|e| Error::invalid(e.to_string()))?;
        if !r.key.is_empty() {
            return Err(Error::invalid(format!(
                "this is the reference of actor mesh '{}', not of a proc mesh",
                r.name
            )));
        }
        if r.procs.is_empty() {
            return Err(Error::invalid("proc mesh reference holds no procs"));
        }
        Ok(ProcMesh {
            rt: rt.clone(),
            procs: Arc::new(r.procs),
            shape: r.shape,
            is_ref: true,
        })
    }

    fn addrs(&self) -> Vec<String> {
        self.shape
            .base_ranks()
            .map(|r| self.procs[r].clone())
            .collect()
    }

    /// Spawn actor `name` of `type_name` on every proc of the view, passing
    /// `args` to each constructor. Returns the mesh at once and a future
    /// that completes when every constructor has run (its ValueMesh holds
    /// the constructors' errors, if any). Both names must pass
    /// [`check_name`].
    pub fn spawn_actors(
        &self,
        name: &str,
        type_name: &str,
        args: &[&[u8]],
    ) -> Result<(ActorMesh, Future)> {
        check_name("actor mesh name", name)?;
        check_name("actor type name", type_name)?;
        check_payload(args)?;
        let _spawn = tracing::info_span!(
            "spawn_actors",
            actor = name,
            type_name,
            points = self.shape.len()
        )
        .entered();
        let key = format!("{name}.{}", self.rt.next_id());
        let mut mesh = ActorMesh::new(
            self.rt.clone(),
            ActorMeshRef {
                name: name.to_string(),
                key,
                procs: self.procs.to_vec(),
                shape: self.shape.clone(),
            },
        );
        if self.procs.len() > multicast::fanout() {
            mesh.table = multicast::table_id(&self.procs);
        }
        self.rt
            .register_actor_mesh(&mesh.r.key, name, &mesh.r.procs);
        let mut env = Envelope::new(Kind::SpawnActor);
        env.actor = mesh.r.key.clone();
        env.type_name = type_name.to_string();
        let ready = mesh
            .send_all(env, args, Replies::Gather)?
            .expect("replies requested");
        Ok((mesh, ready))
    }

    /// Stop every proc of the view: ask nicely, kill after a grace period.
    /// The future completes when all of them have exited.
    pub fn stop(&self) -> Future {
        let fut = self.rt.new_future();
        if self.is_ref {
            fut.complete(Err(Error::invalid(
                "this proc mesh was received in a message: only the process that spawned it can stop it",
            )));
            return fut;
        }
        let rt = self.rt.clone();
        let addrs = self.addrs();
        let shape = self.shape.clone();
        let done = fut.clone();
        let spawned = std::thread::Builder::new()
            .name("monarch-stop".into())
            .spawn(move || {
                rt.stop_procs(&addrs, STOP_GRACE);
                let values = addrs.iter().map(|_| PointValue::Ok(Vec::new())).collect();
                done.complete(Ok(ValueMesh { shape, values }));
            });
        if let Err(e) = spawned {
            fut.complete(Err(Error::io("cannot start stop thread", e)));
        }
        fut
    }
}

/// What proc meshes and actor meshes share: a [`Shape`] view over their
/// base ranks, and the operations that derive a new view (sharing the
/// same procs or actors; nothing is copied or renumbered).
pub trait MeshView: Sized {
    /// The view's shape.
    fn shape(&self) -> &Shape;

    /// The same mesh seen through `shape` (a view of the same base ranks).
    fn with_shape(&self, shape: Shape) -> Self;

    /// Dimension `label` fixed at `index`, removed (see [`Shape::at`]).
    fn at(&self, label: &str, index: usize) -> Result<Self> {
        Ok(self.with_shape(self.shape().at(label, index)?))
    }

    /// Dimension `label` narrowed to a range (see [`Shape::select`]).
    fn select(
        &self,
        label: &str,
        start: Option<i64>,
        stop: Option<i64>,
        step: i64,
    ) -> Result<Self> {
        Ok(self.with_shape(self.shape().select(label, start, stop, step)?))
    }

    /// All dimensions merged into one named `label` (see [`Shape::flatten`]).
    fn flatten(&self, label: &str) -> Result<Self> {
        Ok(self.with_shape(self.shape().flatten(label)?))
    }

    /// Dimensions renamed, all at once (see [`Shape::rename`]).
    fn rename(&self, pairs: &[(&str, &str)]) -> Result<Self> {
        Ok(self.with_shape(self.shape().rename(pairs)?))
    }

    /// Dimension `label` split into `parts` (see [`Shape::split`]).
    fn split(&self, label: &str, parts: &[(&str, Option<usize>)]) -> Result<Self> {
        Ok(self.with_shape(self.shape().split(label, parts)?))
    }
}

impl MeshView for ProcMesh {
    fn shape(&self) -> &Shape {
        &self.shape
    }
    fn with_shape(&self, shape: Shape) -> ProcMesh {
        ProcMesh {
            shape,
            ..self.clone()
        }
    }
}

impl MeshView for ActorMesh {
    fn shape(&self) -> &Shape {
        &self.r.shape
    }
    fn with_shape(&self, shape: Shape) -> ActorMesh {
        ActorMesh {
            table: self.table,
            ..ActorMesh::new(
                self.rt.clone(),
                ActorMeshRef {
                    shape,
                    ..(*self.r).clone()
                },
            )
        }
    }
}

/// An n-d array of actors of one type, one per proc of a proc mesh (or a
/// view of such a mesh).
#[derive(Clone)]
pub struct ActorMesh {
    rt: Runtime,
    r: Arc<ActorMeshRef>,
    /// The encoded shape, computed once and attached to every message.
    shape_bytes: Arc<[u8]>,
    next_choice: Arc<AtomicUsize>,
    /// The proc mesh's address table id (`multicast::table_id`) when this
    /// process spawned the actors: its SpawnActor cast left every proc on
    /// the way the addresses of its subtree, and our later casts, on the
    /// same FIFO paths, may carry the view alone. 0: casts carry node lists.
    table: u64,
    /// Whether this process is one of the procs (its casts route around
    /// it, see `send_all`); worked out once, not per cast.
    in_procs: bool,
}

impl ActorMesh {
    fn new(rt: Runtime, r: ActorMeshRef) -> ActorMesh {
        let shape_bytes = encode_shape(&r.shape).into();
        let in_procs = r.procs.iter().any(|p| p == rt.addr());
        ActorMesh {
            rt,
            r: Arc::new(r),
            shape_bytes,
            next_choice: Arc::new(AtomicUsize::new(0)),
            table: 0,
            in_procs,
        }
    }

    /// Rebuild a mesh from a reference received in a message.
    pub fn from_ref(rt: &Runtime, bytes: &[u8]) -> Result<ActorMesh> {
        let r = ActorMeshRef::decode(bytes).map_err(|e| Error::invalid(e.to_string()))?;
        // The empty key names no actor: a stop sent for it is refused by
        // every proc, so such a reference is refused here, at once.
        if r.key.is_empty() {
            return Err(Error::invalid(
                "actor mesh reference has the empty actor key, which names no actor",
            ));
        }
        Ok(ActorMesh::new(rt.clone(), r))
    }

    /// A reference to this mesh (view) that can travel in a message.
    pub fn to_ref(&self) -> Vec<u8> {
        self.r.encode()
    }

    /// The actor mesh's name.
    pub fn name(&self) -> &str {
        &self.r.name
    }

    /// Call endpoint `method` with `parts`. Returns the future of the
    /// gathered replies, or None for `Broadcast`.
    pub fn call(&self, method: &str, parts: &[&[u8]], mode: CallMode) -> Result<Option<Future>> {
        check_name("method name", method)?;
        let _call = tracing::info_span!(
            "call",
            actor = %self.r.name,
            method,
            mode = ?mode,
            points = self.r.shape.len(),
        )
        .entered();
        let mut env = Envelope::new(Kind::Message);
        env.actor = self.r.key.clone();
        env.method = method.to_string();
        match mode {
            CallMode::All => self.send_all(env, parts, Replies::Gather),
            CallMode::Broadcast => self.send_all(env, parts, Replies::None),
            CallMode::One => {
                if self.r.shape.len() != 1 {
                    return Err(Error::invalid(format!(
                        "call_one requires a mesh of exactly one actor, but '{}' has {} ({})",
                        self.r.name,
                        self.r.shape.len(),
                        self.r.shape
                    )));
                }
                self.send_all(env, parts, Replies::Gather)
            }
            CallMode::Choose => self.chosen()?.send_all(env, parts, Replies::Gather),
        }
    }

    /// Call endpoint `method` of every point (or, with `choose`, of one
    /// point chosen round-robin) with replies sent to `port` instead of a
    /// gather port of ours: point `r` of the view answers to slot `r`.
    pub fn send_to_port(
        &self,
        method: &str,
        parts: &[&[u8]],
        port: &PortRef,
        choose: bool,
    ) -> Result<()> {
        check_name("method name", method)?;
        let mut env = Envelope::new(Kind::Message);
        env.actor = self.r.key.clone();
        env.method = method.to_string();
        let target = if choose { self.chosen()? } else { self.clone() };
        target.send_all(env, parts, Replies::Port(port))?;
        Ok(())
    }

    /// Call endpoint `method` of every point; the replies arrive on the
    /// returned receiver one by one, in the order they come back. A point
    /// whose proc is lost yields an error value.
    pub fn stream(&self, method: &str, parts: &[&[u8]]) -> Result<PortReceiver> {
        check_name("method name", method)?;
        let peers: Vec<String> = self
            .r
            .shape
            .base_ranks()
            .map(|r| self.r.procs[r].clone())
            .collect();
        let rx = self.rt.open_stream(false, Some(peers));
        let mut env = Envelope::new(Kind::Message);
        env.actor = self.r.key.clone();
        env.method = method.to_string();
        self.send_all(env, parts, Replies::Stream(&rx))?;
        Ok(rx)
    }

    /// The one-point view of the next round-robin choice.
    fn chosen(&self) -> Result<ActorMesh> {
        let n = self.r.shape.len();
        if n == 0 {
            return Err(Error::invalid(format!(
                "cannot choose from empty mesh '{}'",
                self.r.name
            )));
        }
        let rank = self.next_choice.fetch_add(1, Ordering::Relaxed) % n;
        let coords = self.r.shape.coords_of(rank)?;
        let mut point = self.r.shape.clone();
        for (label, c) in self.r.shape.labels().iter().zip(coords) {
            point = point.at(label, c)?;
        }
        Ok(self.with_shape(point))
    }

    /// Send `env` to every point of the view; with `Replies::Gather`, open
    /// a port gathering one answer per point.
    fn send_all(
        &self,
        mut env: Envelope,
        parts: &[&[u8]],
        replies: Replies<'_>,
    ) -> Result<Option<Future>> {
        self.rt.check_running()?;
        check_payload(parts)?;
        let shape = &self.r.shape;
        let procs = &self.r.procs;
        let bases: Vec<usize> = shape.base_ranks().collect();
        // The sender and part sizes are filled in when the frame is encoded.
        if env.kind != Kind::StopActor {
            // Calls to a view holding a failed proc or actor fail at once.
            self.rt.check_dests(
                &self.r.key,
                &self.r.name,
                bases.iter().map(|&b| &procs[b]).enumerate(),
            )?;
        }
        env.shape = Some(self.shape_bytes.clone());
        // Every point a child of ours in the multicast tree: plain sends.
        let k = multicast::fanout();
        let direct = bases.iter().all(|&b| b < k);
        let fill_own = matches!(replies, Replies::Gather | Replies::Stream(_));
        // The view, indexed (None: it names a base rank twice; such casts
        // take the general routing and record nothing for losses).
        let view = (!direct).then(|| ViewIndex::new(shape).ok()).flatten();
        let lost_before = if direct {
            Vec::new()
        } else {
            self.rt.lost_procs()
        };
        // A cast to a mesh we are a proc of: our own points are delivered
        // here, and the tree routes around us like around a lost proc (a
        // peer relaying our own cast to us would be refused, see
        // `runtime::trust`).
        let me = self.rt.addr();
        let in_mesh = !direct && self.in_procs;
        // A mesh we spawned, no proc lost: the frames carry the view, and
        // we only work out our first hops (O(K · depth)).
        let view_hops = match &view {
            Some(v)
                if self.table != 0
                    && lost_before.is_empty()
                    && !in_mesh
                    && env.kind != Kind::SpawnActor =>
            {
                Some(multicast::view_hops(None, k, procs.len(), v, &|_| false).hops)
            }
            _ => None,
        };
        let routes = (!direct && view_hops.is_none()).then(|| match &view {
            // No proc lost: the node lists straight from the view's subtrees.
            Some(v) if lost_before.is_empty() && !in_mesh => multicast::Routes {
                hops: multicast::view_node_lists(k, procs.len(), v),
                ..Default::default()
            },
            _ => {
                let members = bases.iter().enumerate().map(|(slot, &rank)| Node {
                    rank,
                    slot: slot as u64,
                });
                let lost = |r: usize| (in_mesh && procs[r] == me) || self.rt.is_lost(&procs[r]);
                multicast::route(None, k, members, &lost, false)
            }
        });
        let relays_view = view_hops.as_ref().and(view.clone());
        // Which points went through a forwarder is worked out only if the
        // forwarder is lost (nothing recorded per point here).
        let relays = match (view, fill_own) {
            (Some(view), true) => {
                let r = self.r.clone();
                let ranks_of = move |peer: &str| -> Vec<usize> {
                    r.procs
                        .iter()
                        .enumerate()
                        .filter(|(_, p)| *p == peer)
                        .map(|(i, _)| i)
                        .collect()
                };
                let here = bases
                    .iter()
                    .enumerate()
                    .filter(|&(_, &b)| in_mesh && procs[b] == me)
                    .map(|(slot, _)| slot as u64)
                    .collect();
                Some(Arc::new(
                    LazyRelays::new(view, k, procs.len(), lost_before, Box::new(ranks_of))
                        .delivered_here(here),
                ))
            }
            _ => None,
        };
        let (port, fut) = match replies {
            Replies::Gather => {
                let peers = crate::runtime::GatherPeers::Mesh(self.r.clone());
                let (port, fut) = self.rt.open_gather(shape.clone(), peers, relays);
                (port, Some(fut))
            }
            Replies::None => {
                // Its procs may answer only that it was undeliverable.
                self.rt.note_one_way(&self.r);
                (0, None)
            }
            Replies::Stream(rx) => {
                rx.set_relays(relays);
                (rx.id(), None)
            }
            Replies::Port(p) => {
                // Answers go to the port's proc, which may not be us.
                env.reply_to = p.addr.clone();
                (p.port, None)
            }
        };
        env.reply_port = port;
        let mut first_err = None;
        let mut failed = |slot: u64, e: Error| {
            if fill_own {
                self.rt
                    .fill_slot(port, slot, PointValue::error(e.message.clone()));
            } else if first_err.is_none() {
                first_err = Some(e);
            }
        };
        // A gather's replies are collected per subtree on the way up.
        env.cast_relay = matches!(replies, Replies::Gather);
        env.cast_table = self.table;
        if let (Some(hops), Some(view)) = (view_hops, relays_view.as_ref()) {
            self.rt
                .wait_ready_all(hops.iter().map(|&h| procs[h].as_str()));
            for h in hops {
                let to = Node {
                    rank: h,
                    slot: view.slot_of(h).unwrap_or(FORWARD_ONLY),
                };
                let mut e = env.clone();
                set_view_fields(&mut e, to, procs.len(), k);
                if let Err(err) = self.rt.send_batched(&procs[h], &e, parts) {
                    for slot in multicast::subtree_slots(h, k, procs.len(), view) {
                        failed(slot, err.clone());
                    }
                }
            }
            return match first_err {
                Some(e) => Err(e),
                None => Ok(fut),
            };
        }
        match routes {
            None => {
                for (slot, &b) in bases.iter().enumerate() {
                    env.message_rank = slot as u64;
                    env.reply_slot = slot as u64;
                    if let Err(e) = self.rt.send_batched(&procs[b], &env, parts) {
                        failed(slot as u64, e);
                    }
                }
            }
            Some(routes) => {
                let addr_of = |r: usize| procs[r].clone();
                for m in &routes.lost {
                    if procs[m.rank] == me {
                        // Our own point (a one-point cast, as a forwarder
                        // would have sent it).
                        let mut e = env.clone();
                        set_cast_fields(&mut e, &[*m], &addr_of, k);
                        if let Err(err) = self.rt.send_batched(me, &e, parts) {
                            failed(m.slot, err);
                        }
                        continue;
                    }
                    let why = format!("proc {} was lost", procs[m.rank]);
                    failed(m.slot, Error::new(ErrorKind::ProcFailed, why));
                }
                // Procs we started may still be starting: the forwarding
                // procs can only connect to them once they listen.
                self.rt
                    .wait_ready_all(routes.hops.iter().flatten().map(|n| procs[n.rank].as_str()));
                for hop in &routes.hops {
                    let mut e = env.clone();
                    set_cast_fields(&mut e, hop, &addr_of, k);
                    if let Err(err) = self.rt.send_batched(&procs[hop[0].rank], &e, parts) {
                        for m in hop.iter().filter(|m| m.slot != FORWARD_ONLY) {
                            failed(m.slot, err.clone());
                        }
                    }
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(fut),
        }
    }

    /// Stop the actors of this view (their procs keep running).
    pub fn stop(&self) -> Result<Future> {
        let env = Envelope::new(Kind::StopActor);
        let mut env = env;
        env.actor = self.r.key.clone();
        Ok(self
            .send_all(env, &[], Replies::Gather)?
            .expect("replies requested"))
    }
}

/// Where the answers of a cast go.
enum Replies<'a> {
    /// Nobody answers.
    None,
    /// A new gather port of ours (the call's future).
    Gather,
    /// Our stream port.
    Stream(&'a PortReceiver),
    /// Someone's port.
    Port(&'a PortRef),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ActorMeshRef;

    #[test]
    fn a_mesh_reference_with_the_empty_key_is_refused() {
        let rt = Runtime::listen_tcp(
            "tcp:127.0.0.1:0",
            std::net::IpAddr::from([127, 0, 0, 1]),
            crate::secret::generate().unwrap(),
        )
        .expect("listen on 127.0.0.1");
        let mut r = ActorMeshRef {
            name: "c".into(),
            key: String::new(),
            procs: vec![rt.addr().to_string()],
            shape: Shape::new(&[("gpus", 1)]).unwrap(),
        };
        let e = ActorMesh::from_ref(&rt, &r.encode())
            .err()
            .expect("refused");
        assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e:?}");
        assert!(e.message.contains("empty actor key"), "{}", e.message);
        r.key = "c.1".into();
        assert!(ActorMesh::from_ref(&rt, &r.encode()).is_ok());
        rt.shutdown();
    }

    #[test]
    fn a_proc_mesh_reference_keeps_its_view_and_cannot_stop() {
        let rt = Runtime::listen_tcp(
            "tcp:127.0.0.1:0",
            std::net::IpAddr::from([127, 0, 0, 1]),
            crate::secret::generate().unwrap(),
        )
        .expect("listen on 127.0.0.1");
        let pm = ProcMesh {
            rt: rt.clone(),
            procs: Arc::new(vec!["unix:/a".into(), "unix:/b".into(), "unix:/c".into()]),
            shape: Shape::new(&[("gpus", 3)]).unwrap(),
            is_ref: false,
        };
        let view = pm.select("gpus", Some(1), None, 1).unwrap();
        let back = ProcMesh::from_ref(&rt, &view.to_ref()).unwrap();
        assert_eq!(back.shape(), view.shape());
        assert_eq!(back.addrs(), vec!["unix:/b".to_string(), "unix:/c".into()]);
        let fut = back.stop();
        assert!(fut.is_ready());
        let e = fut
            .take()
            .expect("completed")
            .expect_err("a reference cannot stop");
        assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e:?}");
        // An actor mesh's reference is not a proc mesh's.
        let am = ActorMeshRef {
            name: "c".into(),
            key: "c.1".into(),
            procs: vec!["unix:/a".into()],
            shape: Shape::new(&[("gpus", 1)]).unwrap(),
        };
        let e = ProcMesh::from_ref(&rt, &am.encode())
            .err()
            .expect("refused");
        assert!(e.message.contains("not of a proc mesh"), "{}", e.message);
        assert!(ProcMesh::from_ref(&rt, b"junk").is_err());
        rt.shutdown();
    }
}
