//! What `monarch top` shows: a job snapshot flattened into the rows of a
//! tree (hosts -> procs -> actors) with each one's state and counters, as
//! cells of text shared by the terminal UI and `--once`.

use monarch_core::introspect::{state_name, ActorInfo, Introspection, ProcInfo};

/// What a row stands for (indices into the snapshot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Item {
    Host,
    Proc(usize),
    Actor(usize, usize),
}

/// One line of the tree.
pub struct Row {
    pub item: Item,
    /// Indented name.
    pub name: String,
    pub state: String,
    /// messages, errors, queue, mean, p50, p99 (empty for hosts).
    pub counters: [String; 6],
}

/// Column titles, the name and state first.
pub const HEADER: [&str; 8] = [
    "HOST / PROC / ACTOR",
    "STATE",
    "MSGS",
    "ERRS",
    "QUEUE",
    "MEAN",
    "P50",
    "P99",
];

/// The upper bound of histogram bucket `i` (see `ActorStats`), in words.
fn bucket_bound(i: usize, last: usize) -> String {
    if i == last {
        return format!(">={}", micros(1u64 << (i - 1)));
    }
    format!("<{}", micros(1u64 << i))
}

fn micros(us: u64) -> String {
    if us >= 1_000_000 {
        format!("{}s", us / 1_000_000)
    } else if us >= 1_000 {
        format!("{}ms", us / 1_000)
    } else {
        format!("{us}us")
    }
}

/// The bucket bound under which a fraction `q` of the handlers fall.
fn quantile(hist: &[u64], q: f64) -> String {
    let total: u64 = hist.iter().sum();
    if total == 0 {
        return "-".into();
    }
    let want = ((total as f64) * q).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (i, n) in hist.iter().enumerate() {
        seen += n;
        if seen >= want {
            return bucket_bound(i, hist.len() - 1);
        }
    }
    "-".into()
}

fn mean(ns: u64, n: u64) -> String {
    if n == 0 {
        return "-".into();
    }
    let us = ns / n / 1000;
    if us == 0 {
        format!("{}ns", ns / n)
    } else {
        micros(us)
    }
}

/// How a proc is named in the tree.
pub fn proc_label(p: &ProcInfo, is_controller: bool) -> String {
    let name = if is_controller {
        "controller".to_string()
    } else if p.mesh.is_empty() {
        p.addr.clone()
    } else {
        format!("{}[{}]", p.mesh, p.rank)
    };
    if p.pid > 0 {
        format!("{name} pid {}", p.pid)
    } else {
        name
    }
}

/// How an actor is named in the tree.
pub fn actor_label(a: &ActorInfo) -> String {
    if a.mesh.is_empty() {
        a.key.clone()
    } else {
        format!("{}[{}]", a.mesh, a.rank)
    }
}

fn actor_counters(a: &ActorInfo) -> [String; 6] {
    let c = &a.counts;
    [
        c.messages.to_string(),
        c.errors.to_string(),
        c.queue_depth.to_string(),
        mean(c.handler_ns, c.handler_hist.iter().sum()),
        quantile(&c.handler_hist, 0.5),
        quantile(&c.handler_hist, 0.99),
    ]
}

/// The tree of `snap`: hosts in order of first appearance, each with its
/// procs (the controller first) and their actors.
pub fn rows(snap: &Introspection) -> Vec<Row> {
    let mut hosts: Vec<&str> = Vec::new();
    for p in &snap.procs {
        if !hosts.contains(&p.host.as_str()) {
            hosts.push(&p.host);
        }
    }
    let mut out = Vec::new();
    for h in hosts {
        let procs: Vec<usize> = (0..snap.procs.len())
            .filter(|&i| snap.procs[i].host == h)
            .collect();
        let ready = procs
            .iter()
            .filter(|&&i| state_name(snap.procs[i].state) == "ready")
            .count();
        out.push(Row {
            item: Item::Host,
            name: format!("host {}", if h.is_empty() { "?" } else { h }),
            state: format!("{ready}/{} ready", procs.len()),
            counters: Default::default(),
        });
        for i in procs {
            let p = &snap.procs[i];
            let mut state = state_name(p.state).to_string();
            if p.state == monarch_core::introspect::EntityState::Ready && !p.answered {
                state.push_str(" (no answer)");
            }
            out.push(Row {
                item: Item::Proc(i),
                name: format!("  {}", proc_label(p, i == 0)),
                state,
                counters: Default::default(),
            });
            for (j, a) in p.actors.iter().enumerate() {
                out.push(Row {
                    item: Item::Actor(i, j),
                    name: format!("    {}", actor_label(a)),
                    state: state_name(a.state).to_string(),
                    counters: actor_counters(a),
                });
            }
        }
    }
    out
}

/// The meshes and their states, on one line.
pub fn mesh_line(snap: &Introspection) -> String {
    let parts: Vec<String> = snap
        .meshes
        .iter()
        .map(|m| format!("{} {}", m.name, state_name(m.state)))
        .collect();
    if parts.is_empty() {
        "meshes: none".into()
    } else {
        format!("meshes: {}", parts.join(", "))
    }
}

/// The snapshot as plain text (`monarch top --once`).
pub fn text(snap: &Introspection) -> String {
    let rows = rows(snap);
    let width = rows
        .iter()
        .map(|r| r.name.len())
        .chain([HEADER[0].len()])
        .max()
        .unwrap_or(0);
    let mut s = format!("controller {}\n", snap.controller);
    let line = |name: &str, state: &str, c: &[&str]| {
        let mut l = format!("{name:<width$}  {state:<18}");
        for x in c {
            l.push_str(&format!(" {x:>8}"));
        }
        l.trim_end().to_string()
    };
    s.push_str(&line(HEADER[0], HEADER[1], &HEADER[2..]));
    s.push('\n');
    for r in &rows {
        let c: Vec<&str> = r.counters.iter().map(String::as_str).collect();
        s.push_str(&line(&r.name, &r.state, &c));
        s.push('\n');
    }
    s.push_str(&mesh_line(snap));
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_name_bucket_bounds() {
        let mut h = vec![0u64; 24];
        h[0] = 50;
        h[3] = 49;
        h[10] = 1;
        assert_eq!(quantile(&h, 0.5), "<1us");
        assert_eq!(quantile(&h, 0.99), "<8us");
        assert_eq!(quantile(&h, 1.0), "<1ms");
        h[23] = 1000;
        assert_eq!(quantile(&h, 0.99), ">=4s");
        assert_eq!(quantile(&[0; 24], 0.5), "-");
    }
}
