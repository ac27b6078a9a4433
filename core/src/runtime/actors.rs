//! The actors hosted by this proc and their state, which decides whether
//! a message for one is delivered.

use parking_lot::Mutex;
use std::sync::Arc;

use super::counters::ActorCounters;
use super::events::{Event, EventKind};
use super::HashMap;
use crate::introspect::ActorCounts;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ActorState {
    Starting,
    Alive,
    /// Its failure report (what later messages are refused with).
    Failed(String),
}

/// One hosted actor: its state and its counters.
struct Entry {
    state: ActorState,
    counters: Arc<ActorCounters>,
}

impl Entry {
    fn new(state: ActorState) -> Entry {
        Entry {
            state,
            counters: Arc::default(),
        }
    }
}

#[derive(Default)]
pub(super) struct Actors {
    states: Mutex<HashMap<String, Entry>>,
}

impl Actors {
    /// Decide whether an actor-bound event may be queued on proc `addr`;
    /// Err is the reason it is refused (answered to the sender as an
    /// error). A Spawn admitted here records the actor as starting; a
    /// Message admitted is counted as waiting, and its actor's counters
    /// are returned for the event to carry.
    #[inline]
    pub(super) fn admit(
        &self,
        ev: &Event,
        addr: &str,
    ) -> std::result::Result<Option<Arc<ActorCounters>>, String> {
        let mut actors = self.states.lock();
        match ev.kind {
            EventKind::Spawn => {
                if actors.contains_key(&ev.actor) {
                    return Err(format!(
                        "an actor named '{}' already exists on proc {addr}",
                        ev.actor
                    ));
                }
                actors.insert(ev.actor.clone(), Entry::new(ActorState::Starting));
                Ok(None)
            }
            // A failed actor can still be stopped (its binding cleans up).
            EventKind::StopActor
                if matches!(
                    actors.get(&ev.actor),
                    Some(Entry {
                        state: ActorState::Failed(_),
                        ..
                    })
                ) =>
            {
                Ok(None)
            }
            EventKind::Message | EventKind::StopActor => match actors.get(&ev.actor) {
                None => Err(format!(
                    "undeliverable: no actor '{}' on proc {addr} (never spawned or already stopped)",
                    ev.actor
                )),
                Some(Entry {
                    state: ActorState::Failed(report),
                    ..
                }) => Err(report.clone()),
                Some(e) if ev.kind == EventKind::Message => {
                    e.counters.delivered();
                    Ok(Some(e.counters.clone()))
                }
                Some(_) => Ok(None),
            },
            EventKind::StopProc | EventKind::Supervise => Ok(None),
        }
    }

    /// Set the state of actor `key` (recorded if new; its counters kept).
    pub(super) fn set(&self, key: &str, state: ActorState) {
        let mut actors = self.states.lock();
        match actors.get_mut(key) {
            Some(e) => {
                if let ActorState::Failed(report) = &state {
                    e.counters.note_failure(report);
                }
                e.state = state;
            }
            None => {
                actors.insert(key.to_string(), Entry::new(state));
            }
        }
    }

    pub(super) fn remove(&self, key: &str) {
        self.states.lock().remove(key);
    }

    #[inline]
    pub(super) fn state(&self, key: &str) -> Option<ActorState> {
        self.states.lock().get(key).map(|e| e.state.clone())
    }

    pub(super) fn is_alive(&self, key: &str) -> bool {
        matches!(
            self.states.lock().get(key),
            Some(Entry {
                state: ActorState::Alive,
                ..
            })
        )
    }

    /// Every actor hosted here, its state and counters, by key.
    pub(super) fn snapshot(&self) -> Vec<(String, ActorState, ActorCounts)> {
        let actors: Vec<(String, ActorState, Arc<ActorCounters>)> = self
            .states
            .lock()
            .iter()
            .map(|(k, e)| (k.clone(), e.state.clone(), e.counters.clone()))
            .collect();
        let mut out: Vec<_> = actors
            .into_iter()
            .map(|(k, s, c)| (k, s, c.snapshot()))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }
}
