//! `DebugSessions`: the job's registry of remote-debugging sessions, the
//! built-in actor [`DEBUG_ACTOR`] of the root controller (protocol in
//! `crate::debug_protocol`). It relays lines between paused actors and
//! debug clients: a debuggee's read waits here (its reply is held) until
//! a client sends a line. Served by whichever thread reads the frame, so
//! a controller needs no thread of its binding for it.

use parking_lot::Mutex;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use super::events::{Event, ReplyTo};
use super::Inner;
use crate::debug_protocol as proto;
use crate::wire::Envelope;

pub use crate::debug_protocol::DEBUG_ACTOR;

/// Output kept per session; older bytes are dropped (cursors stay valid).
const MAX_OUTPUT: usize = 256 << 10;
/// Open sessions at most (a bound on the registry's memory).
const MAX_SESSIONS: usize = 4096;
/// Lines queued for a session that runs, at most.
const MAX_QUEUED: usize = 256;
/// Ended sessions kept so a client still reads their last output.
const MAX_ENDED: usize = 64;

#[derive(Default)]
pub(super) struct DebugSessions {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    next_id: u64,
    sessions: BTreeMap<u64, Session>,
    ended: VecDeque<u64>,
}

struct Session {
    actor: String,
    rank: String,
    coords: String,
    host: String,
    /// The debuggee's proc (its session ends when the proc is lost).
    proc_addr: String,
    location: String,
    /// Output bytes from offset `base` on.
    output: Vec<u8>,
    base: u64,
    /// The output offset at the last input (what a client attaching sees).
    input_at: u64,
    /// The debuggee's process id (for the notice).
    pid: String,
    inputs: VecDeque<String>,
    /// The debuggee's pending read, answered with the next input.
    read: Option<Event>,
    ended: bool,
}

impl Session {
    fn end(&self) -> u64 {
        self.base + self.output.len() as u64
    }

    fn append(&mut self, text: &[u8]) {
        self.output.extend_from_slice(text);
        if self.output.len() > MAX_OUTPUT {
            let drop = self.output.len() - MAX_OUTPUT;
            self.output.drain(..drop);
            self.base += drop as u64;
        }
    }

    fn state(&self) -> &'static str {
        if self.ended {
            proto::ENDED
        } else if self.read.is_some() {
            proto::WAITING
        } else {
            proto::RUNNING
        }
    }
}

type Reply = Result<Vec<Vec<u8>>, String>;

fn text(parts: &[Vec<u8>], i: usize) -> String {
    parts
        .get(i)
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .unwrap_or_default()
}

fn id_of(parts: &[Vec<u8>]) -> Result<u64, String> {
    let s = text(parts, 0);
    s.parse().map_err(|_| format!("bad debug session id '{s}'"))
}

impl DebugSessions {
    /// Handle `method` with `parts`; `ev` holds where the answer goes.
    /// Returns the answers to send (after the lock is released).
    fn handle(
        &self,
        method: &str,
        parts: &[Vec<u8>],
        peer: &str,
        ev: Event,
    ) -> Vec<(Event, Reply)> {
        let mut st = self.state.lock();
        let mut out = Vec::new();
        let reply: Reply = match method {
            proto::OPEN if st.sessions.len() - st.ended.len() >= MAX_SESSIONS => Err(format!(
                "too many debug sessions ({MAX_SESSIONS} open): continue some first"
            )),
            proto::OPEN => {
                st.next_id += 1;
                let id = st.next_id;
                let s = Session {
                    actor: text(parts, 0),
                    rank: text(parts, 1),
                    coords: text(parts, 2),
                    host: text(parts, 3),
                    proc_addr: peer.to_string(),
                    location: String::new(),
                    output: Vec::new(),
                    base: 0,
                    input_at: 0,
                    pid: text(parts, 4),
                    inputs: VecDeque::new(),
                    read: None,
                    ended: false,
                };
                st.sessions.insert(id, s);
                Ok(vec![id.to_string().into_bytes()])
            }
            proto::READ => match id_of(parts) {
                Err(e) => Err(e),
                Ok(id) => match st.sessions.get_mut(&id).filter(|s| !s.ended) {
                    None => Err(format!("no debug session {id}")),
                    Some(s) => {
                        s.append(parts.get(1).map(Vec::as_slice).unwrap_or_default());
                        let loc = text(parts, 2);
                        if s.location.is_empty() {
                            // The controller's terminal hears of it once the
                            // session waits: someone must attach.
                            eprintln!(
                                "monarch: actor {} rank {} (host {}, pid {}) stopped in the \
                                 debugger at {loc}, session {id}; attach with \
                                 `monarch debug --controller {}`",
                                s.actor,
                                s.rank,
                                s.host,
                                s.pid,
                                std::process::id()
                            );
                        }
                        if !loc.is_empty() {
                            s.location = loc;
                        }
                        if let Some(line) = s.inputs.pop_front() {
                            Ok(vec![line.into_bytes()])
                        } else {
                            if let Some(old) = s.read.replace(ev) {
                                out.push((old, Err("a newer read replaced this one".into())));
                            }
                            return out;
                        }
                    }
                },
            },
            proto::CLOSE => match id_of(parts) {
                Err(e) => Err(e),
                Ok(id) => {
                    if let Some(s) = st.sessions.get_mut(&id) {
                        s.append(parts.get(1).map(Vec::as_slice).unwrap_or_default());
                    }
                    out.extend(st.end_session(id));
                    Ok(Vec::new())
                }
            },
            proto::LIST => Ok(st
                .sessions
                .iter()
                .filter(|(_, s)| !s.ended)
                .map(|(id, s)| {
                    let id = id.to_string();
                    let row = [
                        id.as_str(),
                        &s.actor,
                        &s.rank,
                        &s.coords,
                        &s.host,
                        &s.location,
                        s.state(),
                    ];
                    row.join("\t").into_bytes()
                })
                .collect()),
            proto::INPUT => match id_of(parts) {
                Err(e) => Err(e),
                Ok(id) => match st.sessions.get_mut(&id).filter(|s| !s.ended) {
                    None => Err(format!("no debug session {id}")),
                    Some(s) => {
                        s.input_at = s.end();
                        let line = text(parts, 1);
                        match s.read.take() {
                            Some(read) => {
                                out.push((read, Ok(vec![line.into_bytes()])));
                                Ok(Vec::new())
                            }
                            None if s.inputs.len() >= MAX_QUEUED => Err(format!(
                                "debug session {id} has {MAX_QUEUED} lines waiting already"
                            )),
                            None => {
                                s.inputs.push_back(line);
                                Ok(Vec::new())
                            }
                        }
                    }
                },
            },
            proto::OUTPUT => match id_of(parts) {
                Err(e) => Err(e),
                Ok(id) => match st.sessions.get(&id) {
                    None => Err(format!("no debug session {id}")),
                    Some(s) => {
                        let c = text(parts, 1);
                        let from = if c == proto::SINCE_INPUT {
                            Ok(s.input_at)
                        } else {
                            c.parse::<u64>()
                                .map_err(|_| format!("bad output cursor '{c}'"))
                        };
                        from.map(|from| {
                            let skip = from.saturating_sub(s.base).min(s.output.len() as u64);
                            vec![
                                s.end().to_string().into_bytes(),
                                s.state().as_bytes().to_vec(),
                                s.output[skip as usize..].to_vec(),
                            ]
                        })
                    }
                },
            },
            other => Err(format!("unknown debug request '{other}'")),
        };
        out.push((ev, reply));
        out
    }

    /// The sessions of the proc at `addr` end (it is gone or cannot be
    /// reached); returns their pending reads.
    fn proc_lost(&self, addr: &str) -> Vec<Event> {
        let mut st = self.state.lock();
        let ids: Vec<u64> = st
            .sessions
            .iter()
            .filter(|(_, s)| !s.ended && s.proc_addr == addr)
            .map(|(id, _)| *id)
            .collect();
        let mut reads = Vec::new();
        for id in ids {
            if let Some(s) = st.sessions.get_mut(&id) {
                s.append(b"\n(the proc of this session is gone)\n");
            }
            reads.extend(st.end_session(id).into_iter().map(|(ev, _)| ev));
        }
        reads
    }
}

impl State {
    /// Mark session `id` ended; returns its pending read, answered with
    /// an error (the debuggee asked to end, or is gone).
    fn end_session(&mut self, id: u64) -> Vec<(Event, Reply)> {
        let mut out = Vec::new();
        if let Some(s) = self.sessions.get_mut(&id) {
            if !s.ended {
                s.ended = true;
                s.inputs.clear();
                if let Some(read) = s.read.take() {
                    out.push((read, Err("the debug session ended".into())));
                }
                self.ended.push_back(id);
            }
        }
        while self.ended.len() > MAX_ENDED {
            if let Some(old) = self.ended.pop_front() {
                self.sessions.remove(&old);
            }
        }
        out
    }
}

impl Inner {
    /// The proc at `addr` is gone or unreachable: its debug sessions end.
    /// A pending read is answered (with an error) only while a connection
    /// to the proc is open, so a dead peer costs no connection attempt.
    pub(super) fn end_debug_sessions_of(&self, addr: &str) {
        for mut ev in self.debug.proc_lost(addr) {
            if self.peers.contains(addr) {
                let _ = ev.reply(Err(("the debug session ended: its proc was lost", &[])));
            }
        }
    }

    /// A Message for [`DEBUG_ACTOR`] from `peer`.
    pub(super) fn on_debug_message(
        self: &Arc<Self>,
        peer: &str,
        env: &mut Envelope,
        parts: &[Vec<u8>],
    ) {
        if let Err(why) = self.check_sender(peer, env) {
            self.trust.refused(peer, "debug Message", why);
            return;
        }
        let Some(to) = ReplyTo::of(env) else {
            tracing::warn!(%peer, method = %env.method, "debug request without a reply port dropped");
            return;
        };
        let ev = Event::refusal(to, Arc::downgrade(self));
        let answers = self.debug.handle(&env.method, parts, &env.sender, ev);
        for (mut ev, reply) in answers {
            let r = match &reply {
                Ok(parts) => {
                    let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
                    self.answer(&mut ev, Ok(&refs))
                }
                Err(msg) => self.answer(&mut ev, Err((msg, &[]))),
            };
            if let Err(e) = r {
                tracing::debug!(error = %e, "debug answer not delivered");
            }
        }
    }
}
