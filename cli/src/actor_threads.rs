//! Plugin actors of `monarch worker`, each its own sequential worker: a
//! thread and a queue per actor. The worker's event loop hands every event
//! for a plugin actor to that actor's queue, so an actor's messages run one
//! at a time and in order, while actors of the same proc progress
//! independently (one may block until another has handled a message).
//! An actor's constructor, endpoints and destructor all run on its thread.
//!
//! The first plugin actor of a proc, while it is the only one, runs on the
//! thread that serves the proc, with no hand-off (a proc with one actor
//! costs what a single event loop does). When a second one is spawned, that
//! thread keeps serving the first actor from a queue (its thread-locals
//! stay valid) and the caller moves the event loop to another thread (see
//! [`Handover`]).

use std::collections::HashMap;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use monarch_core::{Event, EventKind};

use crate::answer::answer;
use crate::plugin::{PluginActor, PluginType};

struct ActorThread {
    queue: Sender<Event>,
    /// None for the actor served by the thread that served the proc first.
    thread: Option<JoinHandle<()>>,
}

/// The first plugin actor, which must now be served from its queue on the
/// calling thread ([`Handover::serve`]) while another thread takes over the
/// proc's event loop (with the `ActorThreads`).
pub struct Handover {
    actor: PluginActor,
    queue: Receiver<Event>,
}

impl Handover {
    /// Serve the actor's events until it is stopped or its queue closes.
    pub fn serve(self) {
        serve_actor(self.actor, self.queue);
    }
}

/// The plugin actors of this proc, by actor key.
pub struct ActorThreads {
    live: HashMap<String, ActorThread>,
    /// Threads of stopped or failed actors, joined as they finish.
    ending: Vec<JoinHandle<()>>,
    /// The only plugin actor, run by the calling thread itself.
    inline: Option<(String, PluginActor)>,
    /// Whether an actor may run inline (false once the event loop has moved
    /// to another thread).
    may_inline: bool,
}

/// Construct actor `ev.actor` of type `ty` and answer the spawn event.
fn construct(ty: &Arc<PluginType>, ev: &mut Event) -> Option<PluginActor> {
    match ty.create(
        &ev.type_name,
        &ev.actor,
        &ev.parts,
        ev.message_rank,
        ev.shape.as_deref(),
    ) {
        Ok(a) => {
            answer(ev, Ok(Vec::new()));
            Some(a)
        }
        Err(msg) => {
            // The runtime marks the actor failed and answers later
            // messages itself.
            answer(ev, Err(msg));
            None
        }
    }
}

/// Handle one event of `actor`; false when it stopped the actor.
fn handle(actor: &mut PluginActor, ev: &mut Event) -> bool {
    match ev.kind {
        EventKind::Message => {
            let r = actor.handle(
                &ev.method,
                &ev.actor,
                &ev.parts,
                ev.message_rank,
                ev.shape.as_deref(),
            );
            answer(ev, r);
            true
        }
        EventKind::StopActor => false,
        // Plugin actors own no meshes: unanswered, a supervise event
        // escalates.
        _ => true,
    }
}

fn serve_actor(mut actor: PluginActor, queue: Receiver<Event>) {
    while let Ok(mut ev) = queue.recv() {
        if !handle(&mut actor, &mut ev) {
            drop(actor);
            answer(&mut ev, Ok(Vec::new()));
            return;
        }
    }
}

impl ActorThreads {
    /// For the thread that serves the proc's events first: its first
    /// plugin actor runs inline.
    pub fn serving_here() -> Self {
        ActorThreads {
            live: HashMap::new(),
            ending: Vec::new(),
            inline: None,
            may_inline: true,
        }
    }

    /// Construct actor `ev.actor` of plugin type `ty` and answer the spawn
    /// event `ev`: inline when it is the only plugin actor, else on a
    /// thread of its own. Some: this actor is the second, and the calling
    /// thread must serve the first (see [`Handover`]).
    pub fn spawn(&mut self, ty: Arc<PluginType>, mut ev: Event) -> Option<Handover> {
        if self.may_inline && self.inline.is_none() && self.live.is_empty() {
            if let Some(actor) = construct(&ty, &mut ev) {
                self.inline = Some((ev.actor.clone(), actor));
            }
            return None;
        }
        let handover = self.inline.take().map(|(key, actor)| {
            let (tx, rx) = channel::<Event>();
            self.live.insert(
                key,
                ActorThread {
                    queue: tx,
                    thread: None,
                },
            );
            self.may_inline = false;
            Handover { actor, queue: rx }
        });
        let (tx, rx) = channel::<Event>();
        let key = ev.actor.clone();
        let started = std::thread::Builder::new()
            .name("monarch-actor".into())
            .spawn(move || {
                if let Some(actor) = construct(&ty, &mut ev) {
                    serve_actor(actor, rx);
                }
            });
        match started {
            Ok(thread) => {
                self.live.insert(
                    key,
                    ActorThread {
                        queue: tx,
                        thread: Some(thread),
                    },
                );
            }
            Err(e) => {
                tracing::error!(actor = %key, error = %e, "cannot start an actor thread");
                // The closure (and the spawn event in it) is gone: the
                // event was freed unanswered, which answers its sender
                // with an error.
            }
        }
        self.reap();
        handover
    }

    /// Whether actor `key` is a plugin actor hosted here.
    pub fn has(&self, key: &str) -> bool {
        self.live.contains_key(key) || self.inline.as_ref().is_some_and(|(k, _)| k == key)
    }

    /// Run (inline actor) or queue `ev` for its actor (a message, a stop
    /// or a supervise event). Gives it back when the actor has no thread
    /// (any more: its constructor failed).
    pub fn queue(&mut self, mut ev: Event) -> Option<Event> {
        if let Some((key, actor)) = &mut self.inline {
            if *key == ev.actor {
                if !handle(actor, &mut ev) {
                    self.inline = None;
                    answer(&mut ev, Ok(Vec::new()));
                }
                return None;
            }
        }
        let stop = ev.kind == EventKind::StopActor;
        let Some(t) = self.live.get(&ev.actor) else {
            return Some(ev);
        };
        let key = ev.actor.clone();
        let unsent = t.queue.send(ev).err().map(|e| e.0);
        if stop || unsent.is_some() {
            if let Some(thread) = self.live.remove(&key).and_then(|t| t.thread) {
                self.ending.push(thread);
            }
        }
        unsent
    }

    /// Join the threads that have finished.
    fn reap(&mut self) {
        let (done, running): (Vec<_>, Vec<_>) =
            self.ending.drain(..).partition(JoinHandle::is_finished);
        self.ending = running;
        for t in done {
            let _ = t.join();
        }
    }
}

impl Drop for ActorThreads {
    /// Close every queue, let each actor finish what it was given and be
    /// destroyed, and join its thread (before the plugin libraries unload).
    fn drop(&mut self) {
        self.inline = None;
        let threads: Vec<JoinHandle<()>> = self
            .live
            .drain()
            .filter_map(|(_, t)| t.thread)
            .chain(self.ending.drain(..))
            .collect();
        for t in threads {
            let _ = t.join();
        }
    }
}
