//! The `monarch` command.
//!
//! - `monarch worker`: the generic worker proc. Started by a controller as
//!   the bootstrap command of a proc mesh; hosts the built-in Rust actor
//!   types and plugin actors from shared libraries (see [`worker`],
//!   [`plugin`]).
//! - `monarch host`: the host agent (see [`host`]).
//! - `monarch secret`: print a fresh job secret.
//! - `monarch debug`: the client of a job's remote debugger (see [`debug`]).
//! - `monarch top`: a live view of a running controller's job (see [`top`]).
//! - `monarch trace merge`: merge per-proc trace parts (see [`trace`]).

mod actor_threads;
mod answer;
mod debug;
mod host;
mod plugin;
mod reports;
mod top;
mod top_rows;
mod top_session;
mod top_ui;
mod trace;
mod worker;

use std::process::ExitCode;

const USAGE: &str = "\
monarch: command-line tool of libmonarch

Usage: monarch <COMMAND> [OPTIONS]

Commands:
  worker    Run as a generic worker proc hosting the built-in Rust actors
            and plugin actors (started by a controller as its bootstrap
            command)
  host      Run a host agent: start procs on this machine for remote
            controllers
  secret    Print a fresh job secret (256 random bits as 64 hex digits)
  debug     Attach to a running job's debugger: list the actors stopped in
            breakpoint(), attach to one, send pdb commands to several ranks
  top       Show a running controller's hosts, procs and actors, live
  trace     Merge the per-proc parts of a MONARCH_TRACE trace into one
            Chrome/Perfetto trace file
  help      Print this message, or the help of a command

Options:
  -h, --help     Print help
  -V, --version  Print version

Run `monarch <COMMAND> --help` for the help of a command.
Logging: set MONARCH_LOG (tracing env-filter syntax, default \"warn\").
Tracing: set MONARCH_TRACE=PATH for a Chrome trace of the job (docs/tracing.md).
";

const WORKER_USAGE: &str = "\
monarch worker: run as a generic worker proc

Usage: monarch worker [--plugin PATH]...

A controller starts this command as the bootstrap command of a proc mesh,
e.g. argv = [\"/path/to/monarch\", \"worker\"]. It reads its identity, the
controller's address and the job token from the environment
(MONARCH_CONTROLLER, MONARCH_PROC_ADDR, MONARCH_JOB_TOKEN), connects back
to the controller and serves actors until the controller stops the proc.
Running it by hand without that environment is an error.

Built-in actor types:
  echo      endpoints: echo (returns its parts unchanged), fail (replies
            with an error), exit (the proc exits with code 3 without
            replying), rank (the message rank as 8 little-endian bytes),
            pid (the proc's process id, 8 LE bytes), sleep (sleeps for the
            i64 milliseconds in the first part, then replies with no parts),
            segv (the proc crashes with a real segmentation fault)
  counter   constructor argument: optional i64 start (8 LE bytes, default 0)
            endpoints: incr (adds the i64 in the first part, or 1; returns
            the new value as 8 LE bytes), get (returns the value)
  bad       its constructor always fails

Plugin actor types: each --plugin PATH is a shared library exporting
`monarch_plugin_init` (bindings/cpp/include/monarch/plugin.h; C++ actor
classes become a plugin with bindings/cpp/include/monarch/plugin.hpp). Its
actor types are spawned by the type names it registers, e.g. argv =
[\"/path/to/monarch\", \"worker\", \"--plugin\", \"/path/to/libmyactors.so\"].
A library that cannot be loaded, or registers a built-in name, makes the
worker exit with status 2 before it connects.

Options:
      --plugin PATH  Load plugin actor types from the shared library PATH
                     (repeatable)
  -h, --help         Print help
";

const HOST_USAGE: &str = "\
monarch host: run a host agent

Usage: monarch host --listen IP:PORT [--advertise IP] [--secret-file PATH]
                    [--tls-cert PEM --tls-key PEM --tls-ca PEM]

Starts procs on this machine on behalf of controllers of the same job.
Listens on TCP at IP:PORT (port 0: any free port); once listening, prints
exactly one line `MONARCH_HOST_READY <ip>:<port>` to stdout. Every
connection must prove knowledge of the job secret (SPAKE2 key exchange
with key confirmation: neither the secret nor anything to test a guess
against is sent), read from MONARCH_JOB_TOKEN or from --secret-file. The
secret must have at least 128 bits of estimated entropy (weaker ones are
refused); `monarch secret` prints a strong one. Procs started here listen on TCP too; their stdout
and stderr are streamed to the controller that started them, and they are
killed when that controller's connection is lost. SIGTERM or SIGINT: kill
all procs and exit 0.

TLS: with --tls-cert, --tls-key and --tls-ca (all three; or the variables
MONARCH_TLS_CERT, MONARCH_TLS_KEY, MONARCH_TLS_CA), every TCP connection of
the agent and of the procs it starts runs mutual TLS 1.3: each end presents
its certificate and must present one signed by the CA. Plain-TCP peers are
refused (and logged). The controller and every other agent of the job need
a TLS configuration too (the same variables). The job-secret handshake still
runs, inside TLS. Unix sockets between procs of one host stay plain.

Options:
      --listen IP:PORT     Address to listen on (required)
      --advertise IP       Address other hosts use to reach this one
                           (default: the --listen IP, or when that is
                           0.0.0.0 the source address of the default route)
      --secret-file PATH   Read the job secret from PATH instead of
                           MONARCH_JOB_TOKEN
      --tls-cert PEM       This host's certificate chain (PEM file)
      --tls-key PEM        Its private key (PEM file)
      --tls-ca PEM         CA certificate(s) peers must be signed by
  -h, --help               Print help
";

const SECRET_USAGE: &str = "\
monarch secret: print a fresh job secret

Usage: monarch secret

Prints one line: 256 random bits from the kernel as 64 hex digits, a job
secret for MONARCH_JOB_TOKEN or a `monarch host --secret-file` (keep it out
of command lines and shared files, e.g. `monarch secret > job.secret` with
umask 077). Secrets given from outside must have at least 128 bits of
estimated entropy; a controller with no MONARCH_JOB_TOKEN makes its own.

Options:
  -h, --help  Print help
";

const DEBUG_USAGE: &str = "\
monarch debug: attach to a running job's debugger

Usage: monarch debug [--controller PID|DIR|ADDR] [--wait]

A Python endpoint that calls breakpoint() or pdb.set_trace() in a proc
pauses its actor (the proc's other actors go on) and opens a debug session
with the job's root controller. This command lists those sessions and
relays pdb commands to them; it reads its commands from stdin (type `help`).

Which controller: --controller names its process id, its socket directory
(/tmp/monarch-<uid>/<pid>-<random>) or its address (unix:PATH or
tcp:IP:PORT); without it, the only running controller of this user. The
job secret is MONARCH_JOB_TOKEN when set, else the file job.secret the
controller keeps in its socket directory (mode 0600).

Options:
      --controller X  The controller to attach to (PID, directory or address)
      --wait          Say nothing until a debug session opens that was not
                      open at start, then start (a Python controller runs
                      this on its own terminal when it is interactive)
  -h, --help          Print help
";

/// `monarch secret`: one fresh secret on stdout.
fn print_secret(args: &[String]) -> ExitCode {
    if let Some(a) = args.first() {
        return usage_error(&format!("unexpected argument '{a}'"), SECRET_USAGE);
    }
    match monarch_core::secret::generate() {
        Ok(s) => {
            println!("{s}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("monarch secret: no random bytes from the kernel: {e}");
            ExitCode::from(1)
        }
    }
}

const TOP_USAGE: &str = "\
monarch top: a live view of a running controller's job

Usage: monarch top [--controller ADDR] [--interval SECONDS] [--once]

Shows the controller's hosts, procs and actors as a tree with each one's
state and counters (messages, errors, queue depth, time in handlers),
refreshed every --interval seconds (default 1).

Without --controller, attaches to the one controller of this user running
on this host (its socket under $MONARCH_SOCKET_DIR or /tmp, monarch-<uid>/).
The job secret is $MONARCH_JOB_TOKEN when set, else the job.secret file
beside the controller's socket.

Keys: up/down select, e an actor's last error (or a proc's failure),
s dump the selected Python proc's stacks (py-spy when installed, else
faulthandler on SIGUSR1), x stop the selected mesh (asks first),
r refresh now, q quit.

Options:
  --controller ADDR    the controller's address (unix:PATH or tcp:IP:PORT)
  --interval SECONDS   refresh period, 0.1 to 3600 (default 1)
  --once               print one snapshot as text and exit
";

fn init_logging() {
    monarch_core::trace::install_subscriber();
}

fn is_help(a: &str) -> bool {
    a == "-h" || a == "--help"
}

fn usage_error(msg: &str, usage: &str) -> ExitCode {
    eprintln!("monarch: {msg}\n\n{usage}");
    ExitCode::from(2)
}

/// The plugin paths of `monarch worker [--plugin PATH | --plugin=PATH]...`.
fn parse_worker_args(args: &[String]) -> Result<Vec<String>, String> {
    let mut plugins = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--plugin" {
            match it.next() {
                Some(p) if !p.is_empty() => plugins.push(p.clone()),
                _ => return Err("--plugin needs a PATH".into()),
            }
        } else if let Some(p) = a.strip_prefix("--plugin=") {
            if p.is_empty() {
                return Err("--plugin needs a PATH".into());
            }
            plugins.push(p.to_string());
        } else {
            return Err(format!("unexpected argument '{a}'"));
        }
    }
    Ok(plugins)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first() else {
        return usage_error("missing command", USAGE);
    };
    let rest = &args[1..];
    match cmd.as_str() {
        a if is_help(a) => {
            print!("{USAGE}");
            ExitCode::SUCCESS
        }
        "-V" | "--version" => {
            println!("monarch {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        "help" => match rest.first().map(String::as_str) {
            None => {
                print!("{USAGE}");
                ExitCode::SUCCESS
            }
            Some("worker") => {
                print!("{WORKER_USAGE}");
                ExitCode::SUCCESS
            }
            Some("host") => {
                print!("{HOST_USAGE}");
                ExitCode::SUCCESS
            }
            Some("secret") => {
                print!("{SECRET_USAGE}");
                ExitCode::SUCCESS
            }
            Some("debug") => {
                print!("{DEBUG_USAGE}");
                ExitCode::SUCCESS
            }
            Some("top") => {
                print!("{TOP_USAGE}");
                ExitCode::SUCCESS
            }
            Some("trace") => {
                print!("{}", trace::USAGE);
                ExitCode::SUCCESS
            }
            Some(other) => usage_error(&format!("unknown command '{other}'"), USAGE),
        },
        "worker" => {
            if rest.iter().any(|a| is_help(a)) {
                print!("{WORKER_USAGE}");
                return ExitCode::SUCCESS;
            }
            let plugins = match parse_worker_args(rest) {
                Ok(p) => p,
                Err(msg) => return usage_error(&msg, WORKER_USAGE),
            };
            init_logging();
            worker::run(&plugins)
        }
        "host" => {
            if rest.iter().any(|a| is_help(a)) {
                print!("{HOST_USAGE}");
                return ExitCode::SUCCESS;
            }
            let args = match host::parse_args(rest) {
                Ok(a) => a,
                Err(msg) => return usage_error(&msg, HOST_USAGE),
            };
            init_logging();
            host::run(&args)
        }
        "secret" => {
            if rest.iter().any(|a| is_help(a)) {
                print!("{SECRET_USAGE}");
                return ExitCode::SUCCESS;
            }
            print_secret(rest)
        }
        "trace" => {
            if rest.iter().any(|a| is_help(a)) {
                print!("{}", trace::USAGE);
                return ExitCode::SUCCESS;
            }
            trace::run(rest)
        }
        "debug" => {
            if rest.iter().any(|a| is_help(a)) {
                print!("{DEBUG_USAGE}");
                return ExitCode::SUCCESS;
            }
            let args = match debug::parse_args(rest) {
                Ok(a) => a,
                Err(msg) => return usage_error(&msg, DEBUG_USAGE),
            };
            init_logging();
            debug::run(&args)
        }
        "top" => {
            if rest.iter().any(|a| is_help(a)) {
                print!("{TOP_USAGE}");
                return ExitCode::SUCCESS;
            }
            let args = match top::parse_args(rest) {
                Ok(a) => a,
                Err(msg) => return usage_error(&msg, TOP_USAGE),
            };
            init_logging();
            top::run(&args)
        }
        other => usage_error(&format!("unknown command '{other}'"), USAGE),
    }
}
