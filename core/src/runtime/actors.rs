//! The actors hosted by this proc and their state, which decides whether
//! a message for one is delivered.

use parking_lot::Mutex;

use super::events::{Event, EventKind};
use super::HashMap;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ActorState {
    Starting,
    Alive,
    /// Its failure report (what later messages are refused with).
    Failed(String),
}

#[derive(Default)]
pub(super) struct Actors {
    states: Mutex<HashMap<String, ActorState>>,
}

impl Actors {
    /// Decide whether an actor-bound event may be queued on proc `addr`;
    /// Err is the reason it is refused (answered to the sender as an
    /// error). A Spawn admitted here records the actor as starting.
    #[inline]
    pub(super) fn admit(&self, ev: &Event, addr: &str) -> std::result::Result<(), String> {
        let mut actors = self.states.lock();
        match ev.kind {
            EventKind::Spawn => {
                if actors.contains_key(&ev.actor) {
                    return Err(format!(
                        "an actor named '{}' already exists on proc {addr}",
                        ev.actor
                    ));
                }
                actors.insert(ev.actor.clone(), ActorState::Starting);
                Ok(())
            }
            // A failed actor can still be stopped (its binding cleans up).
            EventKind::StopActor
                if matches!(actors.get(&ev.actor), Some(ActorState::Failed(_))) =>
            {
                Ok(())
            }
            EventKind::Message | EventKind::StopActor => match actors.get(&ev.actor) {
                None => Err(format!(
                    "undeliverable: no actor '{}' on proc {addr} (never spawned or already stopped)",
                    ev.actor
                )),
                Some(ActorState::Failed(report)) => Err(report.clone()),
                Some(_) => Ok(()),
            },
            EventKind::StopProc | EventKind::Supervise => Ok(()),
        }
    }

    pub(super) fn set(&self, key: &str, state: ActorState) {
        self.states.lock().insert(key.to_string(), state);
    }

    pub(super) fn remove(&self, key: &str) {
        self.states.lock().remove(key);
    }

    #[inline]
    pub(super) fn state(&self, key: &str) -> Option<ActorState> {
        self.states.lock().get(key).cloned()
    }

    pub(super) fn is_alive(&self, key: &str) -> bool {
        matches!(self.states.lock().get(key), Some(ActorState::Alive))
    }
}
