//! A snapshot of a job for people and tools (`monarch top`, the C ABI's
//! `monarch_runtime_introspect`): the controller's procs, the actors they
//! host with their counters, the meshes, each with its state. The value
//! types and their flatbuffer codec (`Introspection` of
//! `core/schema/monarch.fbs`); gathering them is `runtime/introspect.rs`.

use flatbuffers::{FlatBufferBuilder, WIPOffset};

use crate::wire::{fb, DecodeError};

pub use fb::EntityState;

/// The counters of one actor (see `ActorStats` in the schema).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActorCounts {
    /// Messages answered (successfully or not).
    pub messages: u64,
    /// Messages answered with an error, or that failed the actor.
    pub errors: u64,
    /// Messages delivered and not answered yet.
    pub queue_depth: u64,
    /// Total time in handlers, nanoseconds.
    pub handler_ns: u64,
    /// Handler-time histogram: `[0]` under 1 us, `[i]` in [2^(i-1), 2^i) us,
    /// the last bucket open-ended.
    pub handler_hist: Vec<u64>,
    /// The last error ("" when none).
    pub last_error: String,
}

/// One actor hosted by a proc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActorInfo {
    /// Actor key inside its proc.
    pub key: String,
    /// Its actor mesh's name ("" when not known).
    pub mesh: String,
    /// Its rank in that mesh.
    pub rank: u64,
    /// Starting, Ready or Failed.
    pub state: EntityState,
    /// Its counters.
    pub counts: ActorCounts,
}

/// One proc of the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcInfo {
    /// Its address.
    pub addr: String,
    /// Host name of its machine.
    pub host: String,
    /// OS process id (0 when not known).
    pub pid: u32,
    /// Its proc mesh's name ("" for the controller).
    pub mesh: String,
    /// Its rank in that mesh.
    pub rank: u64,
    /// Its state.
    pub state: EntityState,
    /// Failure report when Failed.
    pub error: String,
    /// Its actors (empty when it could not be asked).
    pub actors: Vec<ActorInfo>,
    /// Whether it answered for its actors.
    pub answered: bool,
}

/// One mesh spawned by the controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeshInfo {
    /// User-visible name.
    pub name: String,
    /// Actor key of an actor mesh; "" for a proc mesh.
    pub key: String,
    /// Its state.
    pub state: EntityState,
    /// Its procs' addresses, by base rank.
    pub procs: Vec<String>,
}

/// A snapshot of a controller's job: the controller first in `procs`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Introspection {
    /// The controller's address.
    pub controller: String,
    /// The controller's proc, then every proc it started.
    pub procs: Vec<ProcInfo>,
    /// The meshes it spawned.
    pub meshes: Vec<MeshInfo>,
}

/// This machine's host name ("" when it cannot be read).
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is writable for its whole length.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// The name of a state, as `monarch top` and the docs write it.
pub fn state_name(s: EntityState) -> &'static str {
    match s {
        EntityState::Starting => "starting",
        EntityState::Ready => "ready",
        EntityState::Failed => "failed",
        EntityState::Stopped => "stopped",
        _ => "unknown",
    }
}

impl Introspection {
    /// Encode as an `Introspection` flatbuffer.
    pub fn encode(&self) -> Vec<u8> {
        let mut fbb = FlatBufferBuilder::new();
        let procs: Vec<_> = self.procs.iter().map(|p| build_proc(&mut fbb, p)).collect();
        let meshes: Vec<_> = self
            .meshes
            .iter()
            .map(|m| {
                let name = fbb.create_string(&m.name);
                let key = fbb.create_string(&m.key);
                let procs: Vec<_> = m.procs.iter().map(|p| fbb.create_string(p)).collect();
                let procs = fbb.create_vector(&procs);
                fb::MeshInfo::create(
                    &mut fbb,
                    &fb::MeshInfoArgs {
                        name: Some(name),
                        key: Some(key),
                        state: m.state,
                        procs: Some(procs),
                    },
                )
            })
            .collect();
        let controller = fbb.create_string(&self.controller);
        let procs = fbb.create_vector(&procs);
        let meshes = fbb.create_vector(&meshes);
        let root = fb::Introspection::create(
            &mut fbb,
            &fb::IntrospectionArgs {
                controller: Some(controller),
                procs: Some(procs),
                meshes: Some(meshes),
            },
        );
        fbb.finish_minimal(root);
        fbb.finished_data().to_vec()
    }

    /// Decode (and verify) an `Introspection` flatbuffer.
    pub fn decode(buf: &[u8]) -> Result<Introspection, DecodeError> {
        let opts = flatbuffers::VerifierOptions {
            max_tables: 10_000_000,
            ..Default::default()
        };
        let r = flatbuffers::root_with_opts::<fb::Introspection>(&opts, buf).map_err(|e| {
            DecodeError {
                what: "introspection",
                detail: e.to_string(),
            }
        })?;
        let s = |v: Option<&str>| v.unwrap_or_default().to_string();
        let procs = r
            .procs()
            .map(|v| {
                v.iter()
                    .map(|p| ProcInfo {
                        addr: s(p.addr()),
                        host: s(p.host()),
                        pid: p.pid(),
                        mesh: s(p.mesh()),
                        rank: p.rank(),
                        state: p.state(),
                        error: s(p.error()),
                        answered: p.answered(),
                        actors: p
                            .actors()
                            .map(|v| v.iter().map(read_actor).collect())
                            .unwrap_or_default(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let meshes = r
            .meshes()
            .map(|v| {
                v.iter()
                    .map(|m| MeshInfo {
                        name: s(m.name()),
                        key: s(m.key()),
                        state: m.state(),
                        procs: m
                            .procs()
                            .map(|p| p.iter().map(|x| x.to_string()).collect())
                            .unwrap_or_default(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(Introspection {
            controller: s(r.controller()),
            procs,
            meshes,
        })
    }
}

fn read_actor(a: fb::ActorStats<'_>) -> ActorInfo {
    let s = |v: Option<&str>| v.unwrap_or_default().to_string();
    ActorInfo {
        key: s(a.key()),
        mesh: s(a.mesh()),
        rank: a.rank(),
        state: a.state(),
        counts: ActorCounts {
            messages: a.messages(),
            errors: a.errors(),
            queue_depth: a.queue_depth(),
            handler_ns: a.handler_ns(),
            handler_hist: a
                .handler_hist()
                .map(|h| h.iter().collect())
                .unwrap_or_default(),
            last_error: s(a.last_error()),
        },
    }
}

fn build_proc<'a>(fbb: &mut FlatBufferBuilder<'a>, p: &ProcInfo) -> WIPOffset<fb::ProcInfo<'a>> {
    let actors: Vec<_> = p
        .actors
        .iter()
        .map(|a| {
            let key = fbb.create_string(&a.key);
            let mesh = fbb.create_string(&a.mesh);
            let hist = fbb.create_vector(&a.counts.handler_hist);
            let last_error = fbb.create_string(&a.counts.last_error);
            fb::ActorStats::create(
                fbb,
                &fb::ActorStatsArgs {
                    key: Some(key),
                    mesh: Some(mesh),
                    rank: a.rank,
                    state: a.state,
                    messages: a.counts.messages,
                    errors: a.counts.errors,
                    queue_depth: a.counts.queue_depth,
                    handler_ns: a.counts.handler_ns,
                    handler_hist: Some(hist),
                    last_error: Some(last_error),
                },
            )
        })
        .collect();
    let actors = fbb.create_vector(&actors);
    let addr = fbb.create_string(&p.addr);
    let host = fbb.create_string(&p.host);
    let mesh = fbb.create_string(&p.mesh);
    let error = fbb.create_string(&p.error);
    fb::ProcInfo::create(
        fbb,
        &fb::ProcInfoArgs {
            addr: Some(addr),
            host: Some(host),
            pid: p.pid,
            mesh: Some(mesh),
            rank: p.rank,
            state: p.state,
            error: Some(error),
            actors: Some(actors),
            answered: p.answered,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let j = Introspection {
            controller: "unix:/c.sock".into(),
            procs: vec![ProcInfo {
                addr: "unix:/p.sock".into(),
                host: "h".into(),
                pid: 42,
                mesh: "procs.0".into(),
                rank: 3,
                state: EntityState::Failed,
                error: "gone".into(),
                answered: true,
                actors: vec![ActorInfo {
                    key: "a.1".into(),
                    mesh: "a".into(),
                    rank: 3,
                    state: EntityState::Ready,
                    counts: ActorCounts {
                        messages: 5,
                        errors: 1,
                        queue_depth: 2,
                        handler_ns: 99,
                        handler_hist: vec![1, 2, 3],
                        last_error: "boom".into(),
                    },
                }],
            }],
            meshes: vec![MeshInfo {
                name: "procs.0".into(),
                key: String::new(),
                state: EntityState::Stopped,
                procs: vec!["unix:/p.sock".into()],
            }],
        };
        assert_eq!(Introspection::decode(&j.encode()).unwrap(), j);
        assert!(Introspection::decode(b"garbage").is_err());
    }
}
