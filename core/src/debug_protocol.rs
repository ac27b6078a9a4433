//! The remote-debugging protocol: what a paused actor (the debuggee) and
//! a debug client (`monarch debug`) ask the job's debug registry, all as
//! frames of kind Message to the built-in actor [`DEBUG_ACTOR`] of the
//! root controller (handled inside its runtime, `runtime::debug`). Every
//! part is UTF-8 text; every request has a reply port.
//!
//! - debuggee -> registry:
//!   [`OPEN`] `[actor, rank, coords, host, pid]` (reply: `[id]`),
//!   [`READ`] `[id, output, location]` (the debugger's output since its
//!   last read and where it stands; reply, once a client typed one:
//!   `[line]`), [`CLOSE`] `[id, output]` (the actor runs on).
//! - client -> registry:
//!   [`LIST`] (reply: one part per session, [`FIELDS`] joined by tabs),
//!   [`INPUT`] `[id, line]` (queued for the session's next read),
//!   [`OUTPUT`] `[id, cursor]` (reply: `[cursor, state, text]`: the
//!   output after byte `cursor` of the session's output, or after its last
//!   input when `cursor` is [`SINCE_INPUT`]; `state` is one of
//!   [`WAITING`], [`RUNNING`], [`ENDED`]).
//!
//! A root controller gives the procs it spawns (and they their own
//! children) the registry's reference in [`ENV_DEBUG_REF`].

/// The built-in actor of the registry.
pub const DEBUG_ACTOR: &str = "__monarch_debug__";
/// The environment variable holding the registry's actor mesh reference
/// (hex of an encoded `ActorMeshRef`).
pub const ENV_DEBUG_REF: &str = "MONARCH_DEBUG_REF";
/// The file in a controller's socket directory holding the job secret,
/// written (mode 0600) when the controller drew the secret itself, so a
/// client of the same user can authenticate.
pub const SECRET_FILE: &str = "job.secret";

/// A debuggee opens a session.
pub const OPEN: &str = "open";
/// A debuggee waits for its next input line.
pub const READ: &str = "read";
/// A debuggee's session ends.
pub const CLOSE: &str = "close";
/// A client lists the sessions.
pub const LIST: &str = "list";
/// A client sends a line to a session.
pub const INPUT: &str = "input";
/// A client reads a session's output.
pub const OUTPUT: &str = "output";

/// The fields of a [`LIST`] row, in order.
pub const FIELDS: [&str; 7] = ["id", "actor", "rank", "coords", "host", "location", "state"];
/// An [`OUTPUT`] cursor meaning "since the last input".
pub const SINCE_INPUT: &str = "last";
/// The debuggee waits for input.
pub const WAITING: &str = "waiting";
/// The debuggee runs (input was sent, it has not asked for more).
pub const RUNNING: &str = "running";
/// The session is over (the actor continued, or its proc is gone).
pub const ENDED: &str = "ended";
