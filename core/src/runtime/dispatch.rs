//! Frames in and out: handling each frame a peer (or this proc) sends,
//! answering events, filling reply slots, sending frames, and a proc's
//! part in a multicast (passing a cast down to its subtree and, for a
//! gather, sending the subtree's replies, collected in `Relays`, up).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use std::collections::HashMap;

use super::cast::{set_cast_fields, set_view_fields, RelayFill};
use super::events::ReplyTo;
use super::supervise::Supervision;
use super::{remote, spawn_timeout, ActorState, Event, EventKind, Inner, FBB};
use crate::conn::{Conn, Defer};
use crate::error::{Error, ErrorKind, Result};
use crate::frame::Frame;
use crate::future::Answer;
use crate::multicast::{levels, parent, route, subtree_nodes, Node, FORWARD_ONLY};
use crate::supervision::FailureCause;
use crate::value::PointValue;
use crate::wire::{Envelope, Kind};

/// How long a forwarding proc waits before failing the points of a lost
/// child (see `relay_peer_lost`).
const RELAY_LOSS_GRACE: Duration = Duration::from_millis(1500);

impl Inner {
    pub(super) fn push_event(&self, ev: Event) {
        self.events.push(ev);
        self.wake_parked();
        self.notifier.signal();
    }

    /// Handle one frame from `peer` (or from ourselves, for loopback).
    pub(super) fn dispatch(self: &Arc<Self>, peer: &str, frame: Frame) {
        let Frame {
            envelope: mut env,
            parts,
        } = frame;
        let _deliver = match env.kind {
            Kind::Heartbeat | Kind::HeartbeatAck => tracing::Span::none(),
            kind => tracing::info_span!(
                "deliver",
                kind = ?kind,
                from = %peer,
                actor = %env.actor,
                method = %env.method,
                rank = env.message_rank,
                msg = env.reply_port,
            ),
        }
        .entered();
        match env.kind {
            Kind::Ready => {
                let r = self.children.take_ready(peer, true);
                match r {
                    Some(r) => {
                        self.heartbeat.seen(peer);
                        r.complete(Ok(()));
                    }
                    None => tracing::warn!(%peer, "unexpected Ready"),
                }
            }
            Kind::Reply => {
                let value = if env.is_error {
                    PointValue::Err {
                        message: env.error,
                        parts,
                    }
                } else {
                    PointValue::Ok(parts)
                };
                self.fill(env.reply_port, env.reply_slot, value);
            }
            Kind::Message if env.actor == remote::CONTROL_ACTOR => {
                self.on_agent_message(peer, &env, &parts);
            }
            Kind::Message if env.actor == super::debug::DEBUG_ACTOR => {
                self.on_debug_message(peer, &mut env, &parts);
            }
            Kind::Message if env.actor == super::introspect::INTROSPECT_ACTOR => {
                self.on_introspect(peer, env, parts);
            }
            Kind::SpawnActor | Kind::Message | Kind::StopActor => {
                let kind = match env.kind {
                    Kind::SpawnActor => EventKind::Spawn,
                    Kind::Message => EventKind::Message,
                    _ => EventKind::StopActor,
                };
                if let Err(why) = self.check_sender(peer, &mut env) {
                    // Nothing is answered: the answer would go where the
                    // peer asked, not to the peer.
                    let what = match kind {
                        EventKind::Spawn => "SpawnActor",
                        EventKind::Message => "Message",
                        _ => "StopActor",
                    };
                    self.trust.refused(peer, what, why);
                    return;
                }
                if !env.cast_ranks.is_empty() {
                    // A multicast: pass it down the tree first.
                    self.forward_cast(&mut env, &parts);
                    if env.cast_slots.first() == Some(&crate::multicast::FORWARD_ONLY) {
                        return;
                    }
                }
                let reply = ReplyTo::of(&env);
                if env.actor.is_empty() {
                    // The empty key names no actor; a stop for it would
                    // stand for the top level and stop every proc mesh.
                    tracing::warn!(%peer, ?kind, "frame for the empty actor key refused");
                    if let Some(to) = reply {
                        let mut refused = Event::refusal(to, Arc::downgrade(self));
                        let _ = self.answer_with(
                            &mut refused,
                            Err(("invalid actor key: the empty key names no actor", &[])),
                            Some(Defer::Yes),
                        );
                    }
                    return;
                }
                if kind == EventKind::StopActor && !self.may_stop_actor(&env.sender, &env.actor) {
                    self.trust
                        .refused(peer, "StopActor", "only the actor's spawner may stop it");
                    if let Some(to) = reply {
                        let mut refused = Event::refusal(to, Arc::downgrade(self));
                        let _ = self.answer_with(
                            &mut refused,
                            Err((
                                "refused: only the proc that spawned an actor may stop it",
                                &[],
                            )),
                            Some(Defer::Yes),
                        );
                    }
                    return;
                }
                let sender = env.sender;
                let mut ev = Event {
                    kind,
                    actor: env.actor,
                    method: env.method,
                    type_name: env.type_name,
                    parts,
                    message_rank: env.message_rank,
                    shape: env.shape,
                    answered: reply.is_none(),
                    reply,
                    rt: Arc::downgrade(self),
                    counters: None,
                    taken: None,
                    span: tracing::Span::none(),
                };
                match self.actors.admit(&ev, &self.id.addr) {
                    Ok(counters) => ev.counters = counters,
                    Err(why) => {
                        if ev.reply.is_none()
                            && kind == EventKind::Message
                            && why.starts_with("undeliverable")
                        {
                            // Nobody waits: the sender must still learn of it.
                            ev.answered = true;
                            self.undeliverable(&sender, &ev.actor, &why);
                            return;
                        }
                        // Refused while reading: buffer the answer rather than
                        // risk blocking the reading thread on a full socket.
                        let _ = self.answer_with(&mut ev, Err((&why, &[])), Some(Defer::Yes));
                        return;
                    }
                }
                if kind == EventKind::Spawn {
                    // Admitted: the key was free, so no other spawner is
                    // replaced.
                    self.supervision.record_hosted(
                        &ev.actor,
                        &sender,
                        ev.message_rank,
                        ev.shape.clone(),
                    );
                }
                if kind == EventKind::StopActor {
                    // Meshes the actor owns stop before it does.
                    let actor = ev.actor.clone();
                    self.stop_owned_then(Some(&actor), ev);
                    return;
                }
                self.push_event(ev);
            }
            Kind::Supervise => self.on_supervise(peer, &parts),
            Kind::Heartbeat => self.answer_heartbeat(peer),
            Kind::HeartbeatAck => self.heartbeat.seen(peer),
            Kind::StopProc if !self.may_stop_proc(peer) => {
                self.trust
                    .refused(peer, "StopProc", "only this proc's controller may stop it");
            }
            Kind::StopProc => {
                // What the trace holds so far is kept even if the proc is
                // killed before it shuts down.
                crate::trace::flush();
                // Procs this one started stop first.
                self.stop_owned_then(None, Event::stop_proc());
            }
            other => tracing::warn!(%peer, kind = ?other, "unexpected frame kind; ignored"),
        }
    }

    pub(super) fn answer(self: &Arc<Self>, ev: &mut Event, result: Answer<'_>) -> Result<()> {
        self.answer_with(ev, result, None)
    }

    /// `answer`, with the batching decision forced when `defer` is set.
    pub(super) fn answer_with(
        self: &Arc<Self>,
        ev: &mut Event,
        result: Answer<'_>,
        defer: Option<Defer>,
    ) -> Result<()> {
        if ev.answered && (ev.reply.is_some() || ev.kind == EventKind::Supervise) {
            return Err(Error::invalid("this event was already answered"));
        }
        ev.answered = true;
        ev.count_answer(result.as_ref().err().map(|(msg, _)| *msg));
        Supervision::clear_current_owner(&ev.actor);
        match ev.kind {
            EventKind::Spawn => match &result {
                Ok(_) => self.actors.set(&ev.actor, ActorState::Alive),
                Err((msg, parts)) => {
                    // A constructor that raised is a failure of the actor,
                    // for its owner to supervise.
                    let payload = parts.first().map(|p| p.to_vec()).unwrap_or_default();
                    let cause = format!("the constructor raised:\n{msg}");
                    self.actor_failed(&ev.actor, FailureCause::SpawnFailed, &cause, payload, None);
                }
            },
            EventKind::StopActor => {
                self.actors.remove(&ev.actor);
            }
            EventKind::Supervise => {
                self.supervise_answered(ev, &result);
                return Ok(());
            }
            _ => {}
        }
        let Some(to) = &ev.reply else {
            if let (Err((msg, parts)), EventKind::Message) = (result, ev.kind) {
                // Nobody waits for this answer: the actor has failed, and
                // its owner hears of it.
                let report = format!(
                    "endpoint '{}' raised with nobody waiting:\n{msg}",
                    ev.method
                );
                let payload = parts.first().map(|p| p.to_vec()).unwrap_or_default();
                self.actor_failed(
                    &ev.actor,
                    FailureCause::EndpointError,
                    &report,
                    payload,
                    None,
                );
            }
            return Ok(());
        };
        let reply_span = tracing::info_span!(
            parent: &ev.span,
            "reply",
            actor = %ev.actor,
            rank = ev.message_rank,
            msg = to.port,
            error = result.is_err(),
        )
        .entered();
        let (env, parts) = reply_envelope(to.port, to.slot, result);
        // While more work is queued, this proc will be back for it at once,
        // and replies can go out together when the queue runs dry.
        let defer = defer.unwrap_or(if self.events.len(Ordering::SeqCst) > 0 {
            Defer::Yes
        } else {
            Defer::Never
        });
        let sent = self.send(&to.peer, &env, parts, defer);
        drop(reply_span);
        // Answered: the handling of this event is over.
        ev.span = tracing::Span::none();
        sent
    }

    /// Fill a slot of one of our ports: a gather, else (after a
    /// multicast relay of ours had its say) a stream port.
    pub(super) fn fill(&self, port: u64, slot: u64, value: PointValue) {
        let Some(value) = self.ports.fill_gather(port, slot, value) else {
            return;
        };
        let value = match self.me.upgrade() {
            Some(me) => match me.relay_fill(port, slot, value) {
                Some(v) => v,
                None => return,
            },
            None => value,
        };
        self.ports.deliver_stream(port, slot, value);
    }

    /// Send a frame to the proc at `addr`: locally when it is us, else on
    /// the one connection we use for that peer (so order is preserved).
    pub(super) fn send(
        self: &Arc<Self>,
        addr: &str,
        env: &Envelope,
        parts: &[&[u8]],
        defer: Defer,
    ) -> Result<()> {
        let _send = tracing::info_span!(
            "send",
            kind = ?env.kind,
            to = %addr,
            actor = %env.actor,
            method = %env.method,
            rank = env.message_rank,
            msg = env.reply_port,
        )
        .entered();
        if addr == self.id.addr {
            let mut env = env.clone();
            if env.sender.is_empty() {
                env.sender = self.id.addr.clone();
            }
            env.part_sizes = parts.iter().map(|p| p.len() as u64).collect();
            let frame = Frame {
                envelope: env,
                parts: parts.iter().map(|p| p.to_vec()).collect(),
            };
            self.dispatch(&self.id.addr.clone(), frame);
            return Ok(());
        }
        self.conn_to(addr)
            .and_then(|conn| self.write(&conn, env, parts, defer))
            .map_err(|e| match e.kind {
                // Our child refusing or dropping the connection is most
                // likely exiting: report how it ended, not the socket error.
                ErrorKind::ProcFailed => self
                    .child_exit_error(addr, Duration::from_millis(500))
                    .unwrap_or(e),
                _ => e,
            })
    }

    pub(super) fn conn_to(self: &Arc<Self>, addr: &str) -> Result<Arc<Conn>> {
        if let Some(c) = self.peers.get(addr) {
            return Ok(c);
        }
        // A child we started connects to us; wait until it has said Ready.
        let pending = self.children.ready_gate(addr);
        if let Some(ready) = pending {
            if !ready.wait(Some(spawn_timeout())) {
                return Err(Error::new(
                    ErrorKind::ProcFailed,
                    format!(
                        "proc {addr} did not become ready within {:?}{}",
                        spawn_timeout(),
                        self.setup_errors.explain(addr)
                    ),
                ));
            }
            ready.peek().unwrap_or(Ok(()))?;
            if let Some(c) = self.peers.get(addr) {
                return Ok(c);
            }
        }
        if let Some(e) = self.child_exit_error(addr, Duration::ZERO) {
            return Err(e);
        }
        if let Some(e) = self.remote.dead_error(addr) {
            return Err(e);
        }
        self.connect(addr)
    }

    /// If `addr` is a child of ours that has exited (waiting up to `wait`
    /// for it to be reaped), an error saying how it ended.
    pub(super) fn child_exit_error(&self, addr: &str, wait: Duration) -> Option<Error> {
        let child = self.children.get(addr)?;
        child.exit.wait(Some(wait));
        let exit = child.exit.peek()?;
        Some(Error::new(
            ErrorKind::ProcFailed,
            format!("proc {addr} {exit}"),
        ))
    }

    pub(super) fn write(
        &self,
        conn: &Conn,
        env: &Envelope,
        parts: &[&[u8]],
        defer: Defer,
    ) -> Result<()> {
        FBB.with(|fbb| {
            let mut fbb = fbb.borrow_mut();
            let header = env.encode_for(&mut fbb, Some(&self.id.addr), Some(parts));
            let buffered = conn.write(header, parts, defer).map_err(|e| {
                // A frame too large for any peer fails this send alone.
                let kind = match e.kind() {
                    std::io::ErrorKind::InvalidInput => ErrorKind::InvalidArgument,
                    _ => ErrorKind::ProcFailed,
                };
                Error::new(kind, format!("cannot send to proc {}: {e}", conn.peer))
            })?;
            if buffered && !self.deferred.swap(true, Ordering::SeqCst) {
                // The I/O thread guarantees the flush if nobody else does.
                self.io.kick.signal();
            }
            Ok(())
        })
    }
}

/// Frames that must never block the reading thread.
impl Inner {
    /// Answer a parent's heartbeat.
    pub(super) fn answer_heartbeat(&self, peer: &str) {
        let Some(conn) = self.peers.get(peer) else {
            return;
        };
        let mut env = Envelope::new(Kind::HeartbeatAck);
        env.sender = self.id.addr.clone();
        self.buffer_small(&conn, &env, &[]);
    }

    /// Buffer a small frame on `conn` (dropped if the socket is full); the
    /// I/O thread writes it out.
    pub(super) fn buffer_small(&self, conn: &Conn, env: &Envelope, parts: &[&[u8]]) {
        let mut fbb = flatbuffers::FlatBufferBuilder::with_capacity(128);
        let header = env.encode(&mut fbb);
        if conn.try_buffer(header, parts).is_some() && !self.deferred.swap(true, Ordering::SeqCst) {
            self.io.kick.signal();
        }
    }
}

/// Multicast: forwarding a cast down its tree, relaying replies up.
impl Inner {
    /// Forward a cast received here to the first hops below us. Runs on the
    /// reading thread: frames are buffered (never blocking on a full
    /// socket) and flushed at once. A child that cannot be reached has its
    /// points answered with an error here.
    pub(super) fn forward_cast(self: &Arc<Self>, env: &mut Envelope, parts: &[Vec<u8>]) {
        // A cast carrying the view: list our own subtree's part of it.
        let view_n = env.cast_n as usize;
        if view_n > 0 {
            self.cast_views.fetch_add(1, Ordering::Relaxed);
            self.expand_view_cast(env);
        } else if env.kind == Kind::SpawnActor {
            // Node lists of a spawn: keep our subtree's addresses, so that
            // later casts to the mesh can carry the view alone.
            self.cast_tables
                .learn(env.cast_table, &env.cast_ranks, &env.cast_addrs);
        }
        let n = env.cast_ranks.len();
        if n <= 1 || env.cast_addrs.len() != n || env.cast_slots.len() != n {
            if n > 1 {
                tracing::warn!(sender = %env.sender, "malformed cast lists; not forwarded");
            }
            return;
        }
        let me = env.cast_ranks[0] as usize;
        let fanout = (env.cast_fanout as usize).max(2);
        let addrs: HashMap<usize, &str> = env
            .cast_ranks
            .iter()
            .zip(&env.cast_addrs)
            .map(|(&r, a)| (r as usize, a.as_str()))
            .collect();
        // A sender that is a point of its own cast delivers to itself and
        // is never sent its own cast back (no peer may name a proc as the
        // sender to that proc, see `trust`): it is routed around like a
        // lost proc, its own points left out.
        let sender = env.sender.as_str();
        let is_sender = |r: usize| addrs.get(&r).is_some_and(|a| *a == sender);
        let lost = |r: usize| is_sender(r) || addrs.get(&r).is_some_and(|a| self.peers.is_lost(a));
        let members = env.cast_ranks[1..]
            .iter()
            .zip(&env.cast_slots[1..])
            .map(|(&r, &slot)| Node {
                rank: r as usize,
                slot,
            });
        let mut routes = route(Some(me), fanout, members, &lost, false);
        routes.lost.retain(|m| !is_sender(m.rank));
        let part_refs: Vec<&[u8]> = parts.iter().map(|p| p.as_slice()).collect();
        let addr_of = |r: usize| addrs.get(&r).map(|a| a.to_string()).unwrap_or_default();
        // For a gather, replies of our subtree come to a relay port of ours.
        let relay = (env.cast_relay && env.reply_port != 0)
            .then(|| {
                let mut owed: HashMap<String, Vec<(u64, bool)>> = HashMap::new();
                let mut slots: Vec<u64> = Vec::new();
                if env.cast_slots[0] != FORWARD_ONLY {
                    slots.push(env.cast_slots[0]);
                }
                for m in &routes.lost {
                    slots.push(m.slot);
                }
                for hop in &routes.hops {
                    let v = owed.entry(addr_of(hop[0].rank)).or_default();
                    for m in hop.iter().filter(|m| m.slot != FORWARD_ONLY) {
                        v.push((m.slot, m.rank == hop[0].rank));
                        slots.push(m.slot);
                    }
                }
                if slots.is_empty() {
                    // Nothing will answer to it: it would never complete.
                    return None;
                }
                let id = self.new_port_id();
                let upstream = if env.reply_to.is_empty() {
                    env.sender.clone()
                } else {
                    env.reply_to.clone()
                };
                let r = self
                    .cast_relays
                    .open(id, upstream, env.reply_port, owed, slots)?;
                Some((id, r))
            })
            .flatten();
        let mut down = env.clone();
        if let Some((id, _)) = &relay {
            down.reply_to = self.id.addr.clone();
            down.reply_port = *id;
        }
        // Below us the call is known by the relay port: the trace links
        // the two ids here.
        let _forward = tracing::info_span!(
            "forward",
            kind = ?env.kind,
            actor = %env.actor,
            method = %env.method,
            msg = env.reply_port,
            relay = down.reply_port,
            hops = routes.hops.len(),
        )
        .entered();
        for m in &routes.lost {
            let why = format!(
                "proc {} was lost before this cast reached it",
                addr_of(m.rank)
            );
            self.cast_error(&down, m.slot, &why);
        }
        for hop in &routes.hops {
            let mut fwd = down.clone();
            if view_n > 0 && parent(hop[0].rank, fanout) == Some(me) {
                // Our child has the addresses of its subtree: the view.
                set_view_fields(&mut fwd, hop[0], view_n, fanout);
            } else {
                // Lists (routing around a lost child, or lists received).
                set_cast_fields(&mut fwd, hop, &addr_of, fanout);
            }
            let to = addr_of(hop[0].rank);
            if let Err(e) = self.send(&to, &fwd, &part_refs, Defer::Yes) {
                for m in hop.iter().filter(|m| m.slot != FORWARD_ONLY) {
                    let why = format!(
                        "cannot forward a cast to proc {to} (on the way to point {}): {}",
                        m.slot, e.message
                    );
                    self.cast_error(&down, m.slot, &why);
                }
            }
        }
        // Our own actor answers to the relay too.
        env.reply_to = down.reply_to;
        env.reply_port = down.reply_port;
        self.flush_deferred(None);
        // A child whose connection ended while we were setting up the
        // relay: its loss may have been handled before the relay existed
        // (it would then wait for that child forever).
        if let Some((id, r)) = relay {
            for peer in self.peers.lost_among(r.owing()) {
                let why = format!("lost connection to proc {peer}");
                self.fail_relayed_later(r.owed_failures(id, &peer, &why));
            }
        }
    }

    /// Turn a cast that carries the view into node lists of our subtree
    /// (our own rank and point first), addresses from our table of the
    /// mesh. When an address is unknown here (the mesh's spawn did not
    /// pass through us), the points below us are answered with an error
    /// and only our own point is kept.
    fn expand_view_cast(self: &Arc<Self>, env: &mut Envelope) {
        let n = std::mem::take(&mut env.cast_n) as usize;
        let (Some(&me), Some(&own)) = (env.cast_ranks.first(), env.cast_slots.first()) else {
            return;
        };
        let me = me as usize;
        let k = (env.cast_fanout as usize).max(2);
        if levels(Some(me), k, n).next().is_none() {
            // A leaf of the tree: nothing below us to list.
            return;
        }
        let view = env.shape.as_ref().and_then(|s| self.cast_tables.view(s));
        let (Some(view), true) = (view, me < n) else {
            tracing::warn!(sender = %env.sender, "malformed cast view; not forwarded");
            return;
        };
        let nodes = subtree_nodes(me, k, n, &view);
        if nodes.len() <= 1 {
            return;
        }
        match self
            .cast_tables
            .addrs(env.cast_table, nodes[1..].iter().map(|m| m.rank))
        {
            Some(addrs) => {
                env.cast_ranks = nodes.iter().map(|m| m.rank as u64).collect();
                env.cast_slots = nodes.iter().map(|m| m.slot).collect();
                env.cast_slots[0] = own;
                env.cast_addrs = std::iter::once(self.id.addr.clone()).chain(addrs).collect();
            }
            None => {
                for m in nodes[1..].iter().filter(|m| m.slot != FORWARD_ONLY) {
                    let why = format!(
                        "cannot forward a cast to point {}: this proc ({}) does not know the \
                         addresses below it in this proc mesh",
                        m.slot, self.id.addr
                    );
                    self.cast_error(env, m.slot, &why);
                }
                self.flush_deferred(None);
            }
        }
    }

    /// A reply for relay port `port`; the value is given back when the
    /// port is not one of our relays. The last reply of a relay sends the
    /// subtree's replies up together: buffered, then written in one go.
    pub(super) fn relay_fill(
        self: &Arc<Self>,
        port: u64,
        slot: u64,
        value: PointValue,
    ) -> Option<PointValue> {
        let (upstream, up_port, values) = match self.cast_relays.fill(port, slot, value) {
            RelayFill::NotRelay(value) => return Some(value),
            RelayFill::Taken => return None,
            RelayFill::Complete {
                upstream,
                port,
                values,
            } => (upstream, port, values),
        };
        for (slot, v) in values {
            let mut reply = Envelope::new(Kind::Reply);
            reply.reply_port = up_port;
            reply.reply_slot = slot;
            let parts: Vec<&[u8]> = match &v {
                PointValue::Ok(p) => p.iter().map(|p| p.as_slice()).collect(),
                PointValue::Err { message, parts } => {
                    reply.is_error = true;
                    reply.error = message.clone();
                    parts.iter().map(|p| p.as_slice()).collect()
                }
            };
            if let Err(e) = self.send(&upstream, &reply, &parts, Defer::Yes) {
                tracing::warn!(%upstream, error = %e.message, "cannot relay cast replies");
                break;
            }
        }
        self.flush_deferred(None);
        None
    }

    /// `peer` was lost: the slots it was relaying to us fail.
    ///
    /// The failures are filled after a grace period: the cast's sender,
    /// when it started that proc, learns of the loss itself with a better
    /// message (the exit status) and fills those points first; the relay's
    /// errors then only matter to senders that could not know.
    pub(super) fn relay_peer_lost(self: &Arc<Self>, peer: &str, why: &str) {
        self.fail_relayed_later(self.cast_relays.owed_failures(peer, why));
    }

    /// Fill (port, slot, message) failures into our relays after the grace
    /// period.
    fn fail_relayed_later(self: &Arc<Self>, fails: Vec<(u64, u64, String)>) {
        if fails.is_empty() {
            return;
        }
        let me = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name("monarch-relay-loss".into())
            .spawn(move || {
                std::thread::sleep(RELAY_LOSS_GRACE);
                let Some(me) = me.upgrade() else { return };
                for (port, slot, msg) in fails {
                    me.relay_fill(port, slot, PointValue::error(msg));
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start a relay-loss thread");
        }
    }

    /// Answer point `slot` of a cast with an error, on behalf of a proc we
    /// could not reach.
    fn cast_error(self: &Arc<Self>, env: &Envelope, slot: u64, why: &str) {
        if env.reply_port == 0 {
            tracing::warn!(slot, error = %why, "cast not delivered (nobody waits for it)");
            return;
        }
        let mut reply = Envelope::new(Kind::Reply);
        reply.reply_port = env.reply_port;
        reply.reply_slot = slot;
        reply.is_error = true;
        reply.error = why.to_string();
        let to = if env.reply_to.is_empty() {
            &env.sender
        } else {
            &env.reply_to
        };
        let _ = self.send(to, &reply, &[], Defer::Yes);
    }
}

/// The Reply frame that fills slot `slot` of port `port` with `result`,
/// and the payload parts that go with it.
pub(super) fn reply_envelope<'a>(
    port: u64,
    slot: u64,
    result: Answer<'a>,
) -> (Envelope, &'a [&'a [u8]]) {
    let mut env = Envelope::new(Kind::Reply);
    env.reply_port = port;
    env.reply_slot = slot;
    let parts = match result {
        Ok(parts) => parts,
        Err((msg, parts)) => {
            env.is_error = true;
            env.error = msg.to_string();
            parts
        }
    };
    (env, parts)
}
