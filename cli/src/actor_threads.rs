//! Plugin actors of `monarch worker`, each its own sequential worker: a
//! thread and a queue per actor. The worker's event loop hands every event
//! for a plugin actor to that actor's queue, so an actor's messages run one
//! at a time and in order, while actors of the same proc progress
//! independently (one may block until another has handled a message).
//! An actor's constructor, endpoints and destructor all run on its thread.

use std::collections::HashMap;
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use monarch_core::{Event, EventKind};

use crate::answer::answer;
use crate::plugin::PluginType;

struct ActorThread {
    queue: Sender<Event>,
    thread: JoinHandle<()>,
}

/// The threads of this proc's plugin actors, by actor key.
#[derive(Default)]
pub struct ActorThreads {
    live: HashMap<String, ActorThread>,
    /// Threads of stopped or failed actors, joined as they finish.
    ending: Vec<JoinHandle<()>>,
}

impl ActorThreads {
    /// Start actor `ev.actor` of plugin type `ty` on its own thread, which
    /// runs the constructor and answers the spawn event `ev`.
    pub fn spawn(&mut self, ty: Arc<PluginType>, mut ev: Event) {
        let (tx, rx) = channel::<Event>();
        let key = ev.actor.clone();
        let started = std::thread::Builder::new()
            .name("monarch-actor".into())
            .spawn(move || {
                let mut actor = match ty.create(
                    &ev.type_name,
                    &ev.actor,
                    &ev.parts,
                    ev.message_rank,
                    ev.shape.as_deref(),
                ) {
                    Ok(a) => {
                        answer(&mut ev, Ok(Vec::new()));
                        a
                    }
                    Err(msg) => {
                        // The runtime marks the actor failed and answers
                        // later messages itself.
                        answer(&mut ev, Err(msg));
                        return;
                    }
                };
                while let Ok(mut ev) = rx.recv() {
                    match ev.kind {
                        EventKind::Message => {
                            let r = actor.handle(
                                &ev.method,
                                &ev.actor,
                                &ev.parts,
                                ev.message_rank,
                                ev.shape.as_deref(),
                            );
                            answer(&mut ev, r);
                        }
                        EventKind::StopActor => {
                            drop(actor);
                            answer(&mut ev, Ok(Vec::new()));
                            return;
                        }
                        // Plugin actors own no meshes: unanswered, a
                        // supervise event escalates.
                        _ => {}
                    }
                }
            });
        match started {
            Ok(thread) => {
                self.live.insert(key, ActorThread { queue: tx, thread });
            }
            Err(e) => {
                tracing::error!(actor = %key, error = %e, "cannot start an actor thread");
                // The closure (and the spawn event in it) is gone: the
                // event was freed unanswered, which answers its sender
                // with an error.
            }
        }
        self.reap();
    }

    /// Whether actor `key` is a plugin actor hosted here.
    pub fn has(&self, key: &str) -> bool {
        self.live.contains_key(key)
    }

    /// Queue `ev` for its actor (a message, a stop or a supervise event).
    /// Gives it back when the actor has no thread (any more: its
    /// constructor failed).
    pub fn queue(&mut self, ev: Event) -> Option<Event> {
        let stop = ev.kind == EventKind::StopActor;
        let Some(t) = self.live.get(&ev.actor) else {
            return Some(ev);
        };
        let key = ev.actor.clone();
        let unsent = t.queue.send(ev).err().map(|e| e.0);
        if stop || unsent.is_some() {
            if let Some(t) = self.live.remove(&key) {
                self.ending.push(t.thread);
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
        let threads: Vec<JoinHandle<()>> = self
            .live
            .drain()
            .map(|(_, t)| t.thread)
            .chain(self.ending.drain(..))
            .collect();
        for t in threads {
            let _ = t.join();
        }
    }
}
