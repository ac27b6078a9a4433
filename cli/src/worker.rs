//! `monarch worker`: the generic worker proc hosting built-in Rust actors
//! and the actor types of plugin libraries (`--plugin PATH`, see
//! [`crate::plugin`]).
//!
//! The event loop pulls events from the runtime. It answers the built-in
//! actors' events itself (with `Event::reply`; their state lives in a map
//! keyed by the actor key the runtime gives each event), and hands each
//! plugin actor's events to that actor's own thread
//! ([`crate::actor_threads`]). Built-in actors are test and benchmark
//! fixtures that do not wait on anyone, so they skip the hand-off (the one
//! that casts, `echo.cast_rank`, waits for the replies on a thread of its
//! own).

use std::collections::HashMap;
use std::process::ExitCode;

use monarch_core::{ErrorKind, Event, EventKind, Runtime};

use crate::actor_threads::{ActorThreads, Handover};
use crate::answer::{answer, Reply};
use crate::plugin::Plugins;

/// The built-in actor types (plugins may not register these names).
pub const BUILTIN_TYPES: &[&str] = &["echo", "counter", "bad"];

/// A hosted built-in actor instance.
enum Actor {
    Echo,
    Counter(i64),
}

fn parse_i64(part: &[u8], what: &str) -> Result<i64, String> {
    let bytes: [u8; 8] = part.try_into().map_err(|_| {
        format!(
            "{what} must be 8 little-endian bytes (an i64), got {} bytes",
            part.len()
        )
    })?;
    Ok(i64::from_le_bytes(bytes))
}

/// Construct a built-in actor of `type_name` from the spawn event's
/// argument parts (`plugins` lists the other types in errors).
fn construct(plugins: &Plugins, ev: &Event) -> Result<Actor, String> {
    let (type_name, args) = (ev.type_name.as_str(), &ev.parts);
    match type_name {
        "echo" => Ok(Actor::Echo),
        "counter" => {
            let start = match args.first() {
                Some(p) => parse_i64(p, "counter start")?,
                None => 0,
            };
            Ok(Actor::Counter(start))
        }
        "bad" => Err("actor type 'bad' always fails to construct".to_string()),
        other => {
            let mut known: Vec<&str> = BUILTIN_TYPES.to_vec();
            known.extend(plugins.type_names());
            Err(format!(
                "unknown actor type '{other}' (this monarch worker hosts: {})",
                known.join(", ")
            ))
        }
    }
}

/// Run endpoint `method` of `actor`.
fn handle(actor: &mut Actor, method: &str, ev: &Event) -> Reply {
    match (actor, method) {
        (Actor::Echo, "echo") => Ok(ev.parts.clone()),
        (Actor::Echo, "fail") => Err(format!(
            "echo.fail raised on rank {} as requested",
            ev.message_rank
        )),
        (Actor::Echo, "exit") => {
            // With an argument, wait until that file exists first: a test can
            // then queue more messages behind the exit before letting it run.
            if let Some(gate) = ev.parts.first() {
                let gate =
                    std::path::Path::new(std::str::from_utf8(gate).map_err(|e| e.to_string())?);
                while !gate.exists() {
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
            }
            tracing::info!("echo.exit: exiting with code 3 without replying");
            std::process::exit(3);
        }
        (Actor::Echo, "rank") => Ok(vec![ev.message_rank.to_le_bytes().to_vec()]),
        (Actor::Echo, "segv") => {
            tracing::info!("echo.segv: crashing with a real segmentation fault");
            // SAFETY: not safe at all: crashing the process is the point
            // (tests of supervision need a real SIGSEGV).
            unsafe { std::ptr::null_mut::<u8>().write_volatile(1) };
            unreachable!("a write through NULL returned")
        }
        (Actor::Echo, "pid") => Ok(vec![i64::from(std::process::id()).to_le_bytes().to_vec()]),
        (Actor::Echo, "sleep") => {
            let ms = match ev.parts.first() {
                Some(p) => parse_i64(p, "sleep milliseconds")?,
                None => 0,
            };
            std::thread::sleep(std::time::Duration::from_millis(ms.max(0) as u64));
            Ok(Vec::new())
        }
        (Actor::Counter(v), "incr") => {
            let by = match ev.parts.first() {
                Some(p) => parse_i64(p, "incr argument")?,
                None => 1,
            };
            *v = v.wrapping_add(by);
            Ok(vec![v.to_le_bytes().to_vec()])
        }
        (Actor::Counter(v), "get") => Ok(vec![v.to_le_bytes().to_vec()]),
        (a, m) => {
            let ty = match a {
                Actor::Echo => "echo",
                Actor::Counter(_) => "counter",
            };
            Err(format!("actor type '{ty}' has no endpoint '{m}'"))
        }
    }
}

/// `echo.cast_rank(mesh reference)`: call `rank` on every point of that
/// actor mesh (which may hold this proc: a proc casting to its own mesh)
/// and answer with the replies, one i64 per point, in one part. The
/// replies are awaited on a thread of its own, so that this proc goes on
/// serving its events (its own point of the cast among them).
fn cast_rank(rt: &Runtime, mut ev: Event) {
    let mesh = ev
        .parts
        .first()
        .ok_or_else(|| "cast_rank takes an actor mesh reference".to_string())
        .and_then(|r| monarch_core::ActorMesh::from_ref(rt, r).map_err(|e| e.to_string()));
    let fut = mesh.and_then(|m| {
        m.call("rank", &[], monarch_core::CallMode::All)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "a gathered call gives a future".to_string())
    });
    let fut = match fut {
        Ok(f) => f,
        Err(e) => return answer(&mut ev, Err(e)),
    };
    let spawned = std::thread::Builder::new()
        .name("monarch-cast-rank".into())
        .spawn(move || {
            let r = if !fut.wait(Some(std::time::Duration::from_secs(60))) {
                Err("cast_rank: no complete answer within 60 s".to_string())
            } else {
                match fut.take() {
                    Some(Ok(vm)) => vm
                        .values
                        .iter()
                        .map(|v| match v {
                            monarch_core::PointValue::Ok(p) if p.len() == 1 => Ok(p[0].clone()),
                            other => Err(format!("cast_rank: a point answered {other:?}")),
                        })
                        .collect::<Result<Vec<_>, _>>()
                        .map(|v| vec![v.concat()]),
                    Some(Err(e)) => Err(e.to_string()),
                    None => Err("cast_rank: the answer was taken".to_string()),
                }
            };
            answer(&mut ev, r);
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start a cast_rank thread");
    }
}

/// Serve the proc's events until it is told to stop (None), or until this
/// thread must serve the proc's first plugin actor instead (see
/// [`Handover`]).
fn serve_events(
    rt: &Runtime,
    plugins: &Plugins,
    actors: &mut HashMap<String, Actor>,
    plugin_actors: &mut ActorThreads,
) -> Option<Handover> {
    loop {
        let ev = match rt.next_event(None) {
            Ok(ev) => ev,
            Err(e) if e.kind == ErrorKind::Stopped => break,
            Err(e) => {
                tracing::error!(error = %e, "next_event failed");
                break;
            }
        };
        let ev = match ev.kind {
            EventKind::Spawn => match plugins.actor_type(&ev.type_name) {
                Some(ty) => match plugin_actors.spawn(ty, ev) {
                    Some(first) => return Some(first),
                    None => continue,
                },
                None => ev,
            },
            EventKind::Message | EventKind::StopActor | EventKind::Supervise
                if plugin_actors.has(&ev.actor) =>
            {
                match plugin_actors.queue(ev) {
                    None => continue,
                    // Its thread has ended: answered below as a built-in.
                    Some(ev) => ev,
                }
            }
            _ => ev,
        };
        let mut ev = ev;
        match ev.kind {
            EventKind::Spawn => match construct(plugins, &ev) {
                Ok(a) => {
                    actors.insert(ev.actor.clone(), a);
                    answer(&mut ev, Ok(Vec::new()));
                }
                Err(msg) => answer(&mut ev, Err(msg)),
            },
            EventKind::Message => {
                let r = match actors.get_mut(&ev.actor) {
                    // Multicast relays in flight in this proc (tests check
                    // that none is left behind once casts complete).
                    Some(Actor::Echo) if ev.method == "relays" => {
                        Ok(vec![(rt.cast_relays_in_flight() as i64)
                            .to_le_bytes()
                            .to_vec()])
                    }
                    // Casts received carrying the view, and address
                    // tables known (tests check what travelled).
                    Some(Actor::Echo) if ev.method == "view_casts" => Ok(vec![
                        (rt.cast_views_received() as i64).to_le_bytes().to_vec(),
                        (rt.cast_tables_known() as i64).to_le_bytes().to_vec(),
                    ]),
                    Some(Actor::Echo) if ev.method == "cast_rank" => {
                        cast_rank(rt, ev);
                        continue;
                    }
                    Some(a) => {
                        let method = ev.method.clone();
                        handle(a, &method, &ev)
                    }
                    None => Err(format!("no actor '{}' in this worker", ev.actor)),
                };
                answer(&mut ev, r);
            }
            EventKind::StopActor => {
                actors.remove(&ev.actor);
                answer(&mut ev, Ok(Vec::new()));
            }
            EventKind::StopProc => break,
            // Built-in actors own no meshes; unanswered, it escalates.
            EventKind::Supervise => {}
        }
    }
    None
}

/// Serve events until the controller stops this proc, hosting the built-in
/// actors and those of the plugin libraries at `plugin_paths`.
pub fn run(plugin_paths: &[String]) -> ExitCode {
    if std::env::var_os(monarch_core::runtime::ENV_CONTROLLER).is_none() {
        eprintln!(
            "monarch worker: {} is not set; this command is started by a controller \
             as the bootstrap command of a proc mesh (see `monarch worker --help`)",
            monarch_core::runtime::ENV_CONTROLLER
        );
        return ExitCode::from(2);
    }
    // Declared before `actors` so that every plugin actor is destroyed
    // before its library is unloaded.
    let mut plugins = Plugins::default();
    for path in plugin_paths {
        if let Err(e) = plugins.load(path) {
            tracing::error!(error = %e, "cannot load plugin");
            eprintln!("monarch worker: {e}");
            return ExitCode::from(2);
        }
    }
    if let Some(t) = BUILTIN_TYPES.iter().find(|t| plugins.has_type(t)) {
        eprintln!("monarch worker: a plugin registers the built-in actor type '{t}'");
        return ExitCode::from(2);
    }
    let rt = match Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the worker runtime");
            eprintln!("monarch worker: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut actors: HashMap<String, Actor> = HashMap::new();
    // Dropped (its threads joined) before `plugins`.
    let mut plugin_actors = ActorThreads::serving_here();
    if let Some(first) = serve_events(&rt, &plugins, &mut actors, &mut plugin_actors) {
        // A second plugin actor: this thread goes on serving the first
        // (whose thread-locals live here), another serves the proc's events.
        let (rt, plugins) = (&rt, &plugins);
        std::thread::scope(|s| {
            s.spawn(move || {
                let again = serve_events(rt, plugins, &mut actors, &mut plugin_actors);
                debug_assert!(again.is_none(), "only the first thread hands over");
                // Closes the first actor's queue, ending `first.serve()`.
                drop(plugin_actors);
                drop(actors);
            });
            first.serve();
        });
    } else {
        drop(plugin_actors);
        drop(actors);
    }
    tracing::debug!("worker stopping");
    rt.shutdown();
    ExitCode::SUCCESS
}
