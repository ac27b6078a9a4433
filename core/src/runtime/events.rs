//! Events: the work this proc's hosted actors are given (spawn, message,
//! stop, supervision), queued until their binding takes it.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;

use super::counters::ActorCounters;
use super::Inner;
use crate::error::{Error, ErrorKind, Result};
use crate::future::Answer;
use crate::port::PortRef;

/// What a hosted actor's binding is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum EventKind {
    /// Construct actor `actor` of `type_name` from the argument parts.
    Spawn = 1,
    /// Run endpoint `method` of `actor` on the parts.
    Message = 2,
    /// Stop actor `actor`.
    StopActor = 3,
    /// The proc is stopping: the binding should leave its event loop.
    StopProc = 4,
    /// A mesh owned by actor `actor` failed: part 0 is a
    /// `SupervisionEvent` flatbuffer. Answer OK if the actor handled it,
    /// with an error to escalate (the actor then fails and is reported to
    /// its own owner). Freed unanswered = not handled.
    Supervise = 5,
}

/// Where the answer to an event goes.
#[derive(Clone)]
pub(super) struct ReplyTo {
    pub(super) peer: String,
    pub(super) port: u64,
    pub(super) slot: u64,
}

impl ReplyTo {
    /// Where a received frame's answer goes (the frame's `reply_to`, else
    /// its sender); `None` when nobody waits for one.
    pub(super) fn of(env: &crate::wire::Envelope) -> Option<ReplyTo> {
        (env.reply_port != 0).then(|| ReplyTo {
            peer: if env.reply_to.is_empty() {
                env.sender.clone()
            } else {
                env.reply_to.clone()
            },
            port: env.reply_port,
            slot: env.reply_slot,
        })
    }
}

/// One unit of work for the binding that hosts this proc's actors.
pub struct Event {
    /// What the binding is asked to do.
    pub kind: EventKind,
    /// Key of the actor the event is for.
    pub actor: String,
    /// The endpoint to run (Message).
    pub method: String,
    /// The actor type to construct (Spawn).
    pub type_name: String,
    /// Payload parts (arguments; Supervise: the event).
    pub parts: Vec<Vec<u8>>,
    /// Rank of this actor in the mesh the message was sent to (for Spawn:
    /// its rank in the mesh it is spawned into).
    pub message_rank: u64,
    /// Encoded Shape of that mesh.
    pub shape: Option<Arc<[u8]>>,
    pub(super) reply: Option<ReplyTo>,
    pub(super) answered: bool,
    pub(super) rt: Weak<Inner>,
    /// A Message's actor counters, until the message is counted as
    /// answered (taken then, so it is counted once).
    pub(super) counters: Option<Arc<ActorCounters>>,
    /// When the binding took it from the queue (handler time starts).
    pub(super) taken: Option<Instant>,
    /// The `handle` span: from the binding taking the event to its answer.
    pub(super) span: tracing::Span,
}

impl Event {
    /// The proc is stopping: tells the binding to leave its event loop
    /// (nothing to answer).
    pub(super) fn stop_proc() -> Event {
        Event::without_message(None, true, Weak::new())
    }

    /// A frame refused before it became an event: only its error answer
    /// goes back to `reply`, touching no actor's state.
    pub(super) fn refusal(reply: ReplyTo, rt: Weak<Inner>) -> Event {
        Event::without_message(Some(reply), false, rt)
    }

    /// A `StopProc` event that names no actor and carries no payload.
    fn without_message(reply: Option<ReplyTo>, answered: bool, rt: Weak<Inner>) -> Event {
        Event {
            kind: EventKind::StopProc,
            actor: String::new(),
            method: String::new(),
            type_name: String::new(),
            parts: Vec::new(),
            message_rank: 0,
            shape: None,
            reply,
            answered,
            rt,
            span: tracing::Span::none(),
            counters: None,
            taken: None,
        }
    }

    /// Count this message as answered in its actor's counters (once).
    #[inline]
    pub(super) fn count_answer(&mut self, error: Option<&str>) {
        if let Some(c) = self.counters.take() {
            c.answered(self.taken, error);
        }
    }

    /// Answer: `Ok(parts)` or `Err((message, parts))`. Answering a Spawn
    /// marks the actor alive or failed; answering a StopActor removes it.
    pub fn reply(&mut self, result: Answer<'_>) -> Result<()> {
        let rt = self
            .rt
            .upgrade()
            .ok_or_else(|| Error::new(ErrorKind::Stopped, "runtime was shut down"))?;
        rt.answer(self, result)
    }

    /// The actor this event is for has failed while handling it
    /// (`cause_text` says how; `payload` is binding-defined, e.g. a
    /// serialized exception): the actor is marked failed (later messages
    /// are refused), its owner hears of it once (a supervision event), and
    /// the sender, if it waits (also through a reply port taken with
    /// [`Event::take_reply_port`]), gets the failure report as an error
    /// without parts.
    pub fn fail(&mut self, cause_text: &str, payload: &[u8]) -> Result<()> {
        let rt = self
            .rt
            .upgrade()
            .ok_or_else(|| Error::new(ErrorKind::Stopped, "runtime was shut down"))?;
        if !matches!(self.kind, EventKind::Spawn | EventKind::Message) {
            return Err(Error::invalid(
                "only a spawn or message event can fail its actor",
            ));
        }
        rt.fail_event(self, cause_text, payload);
        Ok(())
    }

    /// The id of the call this event answers (its reply port; 0 when
    /// nobody waits): the `msg` field of its spans.
    pub(super) fn message_id(&self) -> u64 {
        self.reply.as_ref().map_or(0, |r| r.port)
    }

    /// The proc that sent this message, when it waits for an answer.
    pub fn sender(&self) -> Option<&str> {
        self.reply.as_ref().map(|r| r.peer.as_str())
    }

    /// Whether the sender waits for an answer.
    pub fn wants_reply(&self) -> bool {
        (self.reply.is_some() || self.kind == EventKind::Supervise) && !self.answered
    }

    /// Take over answering: the reply port the sender waits on, as a
    /// reference that may be answered later, from any thread or proc
    /// ([`Runtime::port_send`]). The event then counts as answered (None
    /// when nobody waits).
    pub fn take_reply_port(&mut self) -> Option<PortRef> {
        if self.answered {
            return None;
        }
        self.answered = true;
        self.count_answer(None);
        self.reply.as_ref().map(|r| PortRef {
            addr: r.peer.clone(),
            port: r.port,
            slot: r.slot,
        })
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // A one-way message the binding dropped unanswered was handled.
        self.count_answer(None);
        // A binding that drops a message without answering must not leave
        // the caller waiting forever.
        if !self.answered
            && matches!(
                self.kind,
                EventKind::Spawn | EventKind::Message | EventKind::StopActor | EventKind::Supervise
            )
        {
            if let Some(rt) = self.rt.upgrade() {
                let msg = if self.kind == EventKind::Supervise {
                    format!("actor '{}' did not handle a supervision event", self.actor)
                } else {
                    format!(
                        "actor '{}' dropped the message for '{}' without replying",
                        self.actor, self.method
                    )
                };
                let _ = rt.answer(self, Err((&msg, &[])));
            }
        }
    }
}

/// The events waiting for the binding, in arrival order. `len` lets
/// waiters check for work without taking the lock.
#[derive(Default)]
pub(super) struct EventQueue {
    q: Mutex<VecDeque<Event>>,
    len: AtomicUsize,
}

impl EventQueue {
    #[inline]
    pub(super) fn push(&self, ev: Event) {
        let mut q = self.q.lock();
        q.push_back(ev);
        self.len.fetch_add(1, Ordering::AcqRel);
    }

    #[inline]
    pub(super) fn pop(&self) -> Option<Event> {
        let mut q = self.q.lock();
        let ev = q.pop_front();
        if ev.is_some() {
            self.len.fetch_sub(1, Ordering::AcqRel);
        }
        ev
    }

    /// How many events wait (`order` as the caller's check needs).
    #[inline]
    pub(super) fn len(&self, order: Ordering) -> usize {
        self.len.load(order)
    }
}
