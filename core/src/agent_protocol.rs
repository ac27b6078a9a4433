//! The host-agent protocol: what a controller asks a host agent
//! (`monarch host`) and what the agent reports back, all as frames of kind
//! Message.
//!
//! - controller -> agent, actor [`AGENT_ACTOR`], with a reply port:
//!   [`PREPARE`] `[n]` (bind n listening sockets; reply: their addresses),
//!   [`START`] `[controller, base_rank, argv, env, addrs]` (start one proc
//!   per prepared address; `argv`/`env` are NUL-separated, `env` as
//!   `K=V`), [`KILL`] `[addr...]`, [`INFO`] (reply: host name).
//! - agent -> controller, actor [`CONTROL_ACTOR`], no reply:
//!   [`EXIT`] `[addr, how, EXIT_CODE|EXIT_SIGNAL, n]`,
//!   [`HUNG`] `[addr, how]` (the proc stopped answering the agent's
//!   heartbeats; the controller fails it and asks the agent to kill it),
//!   [`LOG`] `[addr, rank, LOG_STDOUT|LOG_STDERR, line, line...]` (one or
//!   more lines, in order).

/// The built-in actor of a host agent.
pub const AGENT_ACTOR: &str = "__monarch_host__";
/// Where agents send exits and logs (handled inside the runtime).
pub const CONTROL_ACTOR: &str = "__monarch_control__";

/// Bind listening sockets for procs about to start.
pub const PREPARE: &str = "prepare";
/// Start procs on prepared sockets.
pub const START: &str = "start";
/// Kill procs by address.
pub const KILL: &str = "kill";
/// The agent's host name.
pub const INFO: &str = "info";

/// A proc started by the agent exited.
pub const EXIT: &str = "exit";
/// A proc started by the agent stopped answering heartbeats (the agent
/// probes its procs, the controller probes the agents: see
/// `runtime/heartbeat.rs`).
pub const HUNG: &str = "hung";
/// One line of a proc's output.
pub const LOG: &str = "log";

/// In an [`EXIT`] report: the proc exited with a status code.
pub const EXIT_CODE: &str = "code";
/// In an [`EXIT`] report: the proc was killed by a signal.
pub const EXIT_SIGNAL: &str = "signal";
/// In a [`LOG`] report: the line came from the proc's stdout.
pub const LOG_STDOUT: &str = "out";
/// In a [`LOG`] report: the line came from the proc's stderr.
pub const LOG_STDERR: &str = "err";
