//! Frames in and out: handling each frame a peer (or this proc) sends,
//! answering events, filling reply slots, and sending frames.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::events::ReplyTo;
use super::{remote, spawn_timeout, ActorState, Event, EventKind, Inner, FBB};
use crate::conn::{Conn, Defer};
use crate::error::{Error, ErrorKind, Result};
use crate::frame::Frame;
use crate::future::Answer;
use crate::value::PointValue;
use crate::wire::{Envelope, Kind};

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
        match env.kind {
            Kind::Ready => {
                let r = self.children.take_ready(peer);
                match r {
                    Some(r) => {
                        self.heartbeat_seen(peer);
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
            Kind::SpawnActor | Kind::Message | Kind::StopActor => {
                let kind = match env.kind {
                    Kind::SpawnActor => EventKind::Spawn,
                    Kind::Message => EventKind::Message,
                    _ => EventKind::StopActor,
                };
                if !env.cast_ranks.is_empty() {
                    // A multicast: pass it down the tree first.
                    self.forward_cast(&mut env, &parts);
                    if env.cast_slots.first() == Some(&crate::multicast::FORWARD_ONLY) {
                        return;
                    }
                }
                let reply = (env.reply_port != 0).then(|| ReplyTo {
                    peer: if env.reply_to.is_empty() {
                        env.sender.clone()
                    } else {
                        env.reply_to.clone()
                    },
                    port: env.reply_port,
                    slot: env.reply_slot,
                });
                if kind == EventKind::Spawn {
                    self.record_hosted(&env.actor, &env.sender, env.message_rank);
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
                };
                if let Err(why) = self.actors.admit(&ev, &self.addr) {
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
            Kind::HeartbeatAck => self.heartbeat_seen(peer),
            Kind::StopProc => {
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
        Inner::clear_current_owner(&ev.actor);
        match ev.kind {
            EventKind::Spawn => {
                let state = match &result {
                    Ok(_) => ActorState::Alive,
                    Err((msg, _)) => ActorState::Failed(format!("constructor raised: {msg}")),
                };
                self.actors.set(&ev.actor, state);
            }
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
                let report = format!("endpoint '{}' raised:\n{msg}", ev.method);
                let payload = parts.first().map(|p| p.to_vec()).unwrap_or_default();
                self.actor_failed(
                    &ev.actor,
                    crate::supervision::FailureCause::EndpointError,
                    &report,
                    payload,
                    None,
                );
            }
            return Ok(());
        };
        let mut env = Envelope::new(Kind::Reply);
        env.reply_port = to.port;
        env.reply_slot = to.slot;
        let parts = match result {
            Ok(parts) => parts,
            Err((msg, parts)) => {
                env.is_error = true;
                env.error = msg.to_string();
                parts
            }
        };
        // While more work is queued, this proc will be back for it at once,
        // and replies can go out together when the queue runs dry.
        let defer = defer.unwrap_or(if self.events.len(Ordering::SeqCst) > 0 {
            Defer::Yes
        } else {
            Defer::Never
        });
        self.send(&to.peer, &env, parts, defer)
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
        if addr == self.addr {
            let mut env = env.clone();
            if env.sender.is_empty() {
                env.sender = self.addr.clone();
            }
            env.part_sizes = parts.iter().map(|p| p.len() as u64).collect();
            let frame = Frame {
                envelope: env,
                parts: parts.iter().map(|p| p.to_vec()).collect(),
            };
            self.dispatch(&self.addr.clone(), frame);
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
                        "proc {addr} did not become ready within {:?}",
                        spawn_timeout()
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
        if let Some(e) = self.remote_dead(addr) {
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
            let header = env.encode_for(&mut fbb, Some(&self.addr), Some(parts));
            let buffered = conn.write(header, parts, defer).map_err(|e| {
                Error::new(
                    ErrorKind::ProcFailed,
                    format!("cannot send to proc {}: {e}", conn.peer),
                )
            })?;
            if buffered && !self.deferred.swap(true, Ordering::SeqCst) {
                // The I/O thread guarantees the flush if nobody else does.
                self.io.kick.signal();
            }
            Ok(())
        })
    }
}
