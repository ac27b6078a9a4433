//! `monarch trace merge`: put the per-proc parts of a trace (written with
//! `MONARCH_TRACE`) together into one Chrome/Perfetto trace file, e.g. the
//! parts copied from several hosts, or those of a controller that died
//! before it could merge them.

use std::path::PathBuf;
use std::process::ExitCode;

/// The help of `monarch trace`.
pub const USAGE: &str = "\
monarch trace: work with the traces MONARCH_TRACE writes

Usage: monarch trace merge -o OUT.json PART...

With MONARCH_TRACE=PATH set for a controller, every proc of the job writes
its spans to PATH.procs/<pid>.jsonl and the controller merges them into the
Chrome trace PATH when it shuts down. `monarch trace merge` does that merge
by hand: each PART is a .jsonl part file or a directory of them (e.g. the
PATH.procs directories copied from every host of a job). Open OUT.json in
https://ui.perfetto.dev or chrome://tracing.

Options:
  -o, --output OUT  The merged trace file to write (required)
  -h, --help        Print help
";

/// Run `monarch trace ARGS`.
pub fn run(args: &[String]) -> ExitCode {
    match parse(args) {
        Ok((out, inputs)) => merge(&out, &inputs),
        Err(msg) => {
            eprintln!("monarch trace: {msg}\n\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn parse(args: &[String]) -> Result<(PathBuf, Vec<PathBuf>), String> {
    let mut it = args.iter();
    match it.next().map(String::as_str) {
        Some("merge") => {}
        Some(other) => return Err(format!("unknown subcommand '{other}'")),
        None => return Err("missing subcommand".into()),
    }
    let mut out = None;
    let mut inputs = Vec::new();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-o" | "--output" => match it.next() {
                Some(p) => out = Some(PathBuf::from(p)),
                None => return Err(format!("{a} needs a path")),
            },
            s if s.starts_with("--output=") => out = Some(PathBuf::from(&s[9..])),
            s if s.starts_with('-') => return Err(format!("unexpected option '{s}'")),
            s => inputs.push(PathBuf::from(s)),
        }
    }
    let out = out.ok_or("-o OUT is required")?;
    if inputs.is_empty() {
        return Err("no part file or directory given".into());
    }
    Ok((out, inputs))
}

fn merge(out: &std::path::Path, inputs: &[PathBuf]) -> ExitCode {
    let mut parts = Vec::new();
    for p in inputs {
        if p.is_dir() {
            match std::fs::read_dir(p) {
                Ok(entries) => {
                    let mut found: Vec<PathBuf> = entries
                        .flatten()
                        .map(|e| e.path())
                        .filter(|f| f.extension().is_some_and(|x| x == "jsonl"))
                        .collect();
                    found.sort();
                    parts.extend(found);
                }
                Err(e) => {
                    eprintln!("monarch trace: cannot read {}: {e}", p.display());
                    return ExitCode::from(1);
                }
            }
        } else if p.is_file() {
            parts.push(p.clone());
        } else {
            eprintln!(
                "monarch trace: no such part file or directory: {}",
                p.display()
            );
            return ExitCode::from(1);
        }
    }
    match monarch_core::trace::merge_files(&parts, out) {
        Ok(m) => {
            println!(
                "{}: {} events from {} part files",
                out.display(),
                m.events,
                m.files
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("monarch trace: cannot merge into {}: {e}", out.display());
            ExitCode::from(1)
        }
    }
}
