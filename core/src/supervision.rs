//! Supervision events: a failure reported up the ownership tree (actor ->
//! its owner -> ... -> controller). The value type and its flatbuffer
//! codec (`SupervisionEvent` of `core/schema/monarch.fbs`); how the runtime
//! raises and routes them is in `runtime/supervise.rs`, the semantics in
//! docs/supervision.md.

use flatbuffers::FlatBufferBuilder;

use crate::wire::{fb, DecodeError};

pub use fb::FailureCause;

/// One failure. `caused_by` chains the failure a supervisor did not handle.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SupervisionEvent {
    /// Unique within the process that made the event.
    pub id: u64,
    /// Name of the failed mesh (actor mesh, or proc mesh).
    pub mesh: String,
    /// Actor key of the failed actor mesh ("" for a proc mesh).
    pub mesh_key: String,
    /// Failed ranks in that mesh (base ranks).
    pub ranks: Vec<u64>,
    /// Address of the failed proc.
    pub proc: String,
    /// Key of the failed actor ("" when a whole proc failed).
    pub actor: String,
    /// Key of the owning actor this event is addressed to ("" = top level).
    pub owner: String,
    /// What kind of failure it was.
    pub cause: FailureCause,
    /// Exit code or signal number.
    pub code: i32,
    /// What happened, in words.
    pub report: String,
    /// The failure that led to this one (an unhandled event escalated).
    pub caused_by: Option<Box<SupervisionEvent>>,
    /// Binding-defined bytes (Python: the pickled exception).
    pub payload: Vec<u8>,
}

/// How deep a chain of causes may be (decoding refuses deeper ones).
const MAX_CHAIN: usize = 64;

impl SupervisionEvent {
    /// Encode as a `SupervisionEvent` flatbuffer.
    pub fn encode(&self) -> Vec<u8> {
        let mut fbb = FlatBufferBuilder::new();
        let root = self.build(&mut fbb);
        fbb.finish_minimal(root);
        fbb.finished_data().to_vec()
    }

    fn build<'a>(
        &self,
        fbb: &mut FlatBufferBuilder<'a>,
    ) -> flatbuffers::WIPOffset<fb::SupervisionEvent<'a>> {
        let caused_by = self.caused_by.as_ref().map(|c| c.build(fbb));
        let mesh = fbb.create_string(&self.mesh);
        let mesh_key = fbb.create_string(&self.mesh_key);
        let ranks = fbb.create_vector(&self.ranks);
        let proc = fbb.create_string(&self.proc);
        let actor = fbb.create_string(&self.actor);
        let owner = fbb.create_string(&self.owner);
        let report = fbb.create_string(&self.report);
        let payload = (!self.payload.is_empty()).then(|| fbb.create_vector(&self.payload));
        fb::SupervisionEvent::create(
            fbb,
            &fb::SupervisionEventArgs {
                id: self.id,
                mesh: Some(mesh),
                mesh_key: Some(mesh_key),
                ranks: Some(ranks),
                proc_: Some(proc),
                actor: Some(actor),
                owner: Some(owner),
                cause: self.cause,
                code: self.code,
                report: Some(report),
                caused_by,
                payload,
            },
        )
    }

    /// Verify and decode.
    pub fn decode(buf: &[u8]) -> Result<SupervisionEvent, DecodeError> {
        let opts = flatbuffers::VerifierOptions {
            max_depth: 4 * MAX_CHAIN,
            ..Default::default()
        };
        let e = flatbuffers::root_with_opts::<fb::SupervisionEvent>(&opts, buf).map_err(|e| {
            DecodeError {
                what: "supervision event",
                detail: e.to_string(),
            }
        })?;
        Ok(Self::read(e))
    }

    fn read(e: fb::SupervisionEvent<'_>) -> SupervisionEvent {
        let s = |v: Option<&str>| v.unwrap_or_default().to_string();
        SupervisionEvent {
            id: e.id(),
            mesh: s(e.mesh()),
            mesh_key: s(e.mesh_key()),
            ranks: e.ranks().map(|v| v.iter().collect()).unwrap_or_default(),
            proc: s(e.proc_()),
            actor: s(e.actor()),
            owner: s(e.owner()),
            cause: e.cause(),
            code: e.code(),
            report: s(e.report()),
            caused_by: e.caused_by().map(|c| Box::new(Self::read(c))),
            payload: e.payload().map(|p| p.bytes().to_vec()).unwrap_or_default(),
        }
    }

    /// A one-line description of the cause, e.g. "killed by signal 9 (SIGKILL)".
    pub fn cause_text(&self) -> String {
        match self.cause {
            FailureCause::ExitCode => format!("exited with code {}", self.code),
            FailureCause::Signal => crate::process::ExitInfo::Signal(self.code).to_string(),
            FailureCause::EndpointError => "an endpoint raised with nobody waiting".into(),
            FailureCause::HeartbeatLost => "stopped answering heartbeats".into(),
            FailureCause::Undeliverable => "a message was undeliverable".into(),
            FailureCause::ConnectionLost => "lost its connection".into(),
            FailureCause::SupervisorFailed => "its supervisor did not handle a failure".into(),
            FailureCause::SpawnFailed => "its constructor raised".into(),
            _ => "failed".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_round_trip_with_chain() {
        let inner = SupervisionEvent {
            id: 1,
            mesh: "workers".into(),
            mesh_key: "workers.3".into(),
            ranks: vec![2],
            proc: "unix:/x/p1.sock".into(),
            cause: FailureCause::Signal,
            code: 9,
            report: "proc killed by signal 9".into(),
            ..Default::default()
        };
        let outer = SupervisionEvent {
            id: 2,
            mesh: "sup".into(),
            actor: "sup.1".into(),
            cause: FailureCause::SupervisorFailed,
            report: "supervisor raised".into(),
            payload: vec![1, 2, 3],
            caused_by: Some(Box::new(inner.clone())),
            ..Default::default()
        };
        let back = SupervisionEvent::decode(&outer.encode()).unwrap();
        assert_eq!(back, outer);
        assert_eq!(
            back.caused_by.unwrap().cause_text(),
            "killed by signal 9 (SIGKILL)"
        );
        for n in 0..48 {
            let junk: Vec<u8> = (0..n).map(|i| (i * 41 + 7) as u8).collect();
            let _ = SupervisionEvent::decode(&junk);
        }
    }
}
