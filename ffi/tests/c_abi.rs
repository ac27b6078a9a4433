//! Compile the C ABI test program (every `.c` file of `tests/c/`) with the
//! system C compiler against the libmonarch.so this test build produced,
//! and run it. The program is its own worker: it spawns 4 procs of itself
//! (see the header of `tests/c/main.c`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Only there to turn a hang into a failure.
const HANG: Duration = Duration::from_secs(120);

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// The directory holding a libmonarch.so built from the current sources.
///
/// `cargo test` links the test against the rlib and does not necessarily
/// rebuild the cdylib, so a library lying in target/ may be stale. Build it
/// here (cargo releases its lock while tests run), once per test binary,
/// with the profile this test was built with.
fn lib_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().expect("current_exe");
        // target/<profile>/deps/<test exe>
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("target/<profile>");
        let release = profile_dir.file_name().is_some_and(|n| n == "release");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-p", "monarch-ffi", "--lib"])
            .current_dir(workspace());
        if release {
            cmd.arg("--release");
        }
        let out = cmd.output().expect("run cargo build");
        assert!(
            out.status.success(),
            "building libmonarch.so failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            profile_dir.join("libmonarch.so").is_file(),
            "no libmonarch.so in {}",
            profile_dir.display()
        );
        profile_dir.to_path_buf()
    })
    .clone()
}

/// A directory where the library is found under its SONAME
/// (`libmonarch.so.<major>`, the name the linked program asks for at run
/// time; cargo writes only `libmonarch.so`).
fn soname_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = out_dir().join("lib");
        std::fs::create_dir_all(&dir).expect("create the library dir");
        let link = dir.join(format!("libmonarch.so.{}", env!("CARGO_PKG_VERSION_MAJOR")));
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(lib_dir().join("libmonarch.so"), &link)
            .expect("symlink the SONAME");
        dir
    })
    .clone()
}

fn out_dir() -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("c_abi");
    std::fs::create_dir_all(&d).expect("create test output dir");
    d
}

/// The C test program's sources: every `.c` file of `tests/c/`, sorted.
fn c_sources() -> Vec<PathBuf> {
    let dir = workspace().join("tests/c");
    let mut sources: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|entry| entry.expect("read tests/c entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "c"))
        .collect();
    sources.sort();
    assert!(!sources.is_empty(), "no .c files in {}", dir.display());
    sources
}

fn compile(out: &Path, extra: &[&str]) -> Output {
    let lib = lib_dir();
    let run_dir = soname_dir();
    let root = workspace();
    let mut cmd = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()));
    cmd.arg("-std=c11")
        .args(["-Wall", "-Wextra", "-Werror", "-g"])
        .args(extra)
        .arg("-I")
        .arg(root.join("include"))
        .args(c_sources())
        .arg("-o")
        .arg(out)
        .arg("-L")
        .arg(&lib)
        .arg("-lmonarch")
        .arg(format!("-Wl,-rpath,{}", run_dir.display()))
        .arg("-lpthread");
    cmd.output().expect("run the C compiler")
}

/// Run `bin` with a hang guard; returns its output.
fn run(bin: &Path, env: &[(&str, &str)]) -> Output {
    let mut child = Command::new(bin)
        .envs(env.iter().copied())
        // A controller must not inherit a bootstrap environment.
        .env_remove("MONARCH_CONTROLLER")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the C test");
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        if start.elapsed() > HANG {
            // Its procs die with it (PR_SET_PDEATHSIG).
            let _ = child.kill();
            let out = child.wait_with_output().expect("collect output");
            panic!(
                "{} hung for {HANG:?}\n--- stdout\n{}\n--- stderr\n{}",
                bin.display(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("collect output")
}

fn assert_passed(what: &str, out: &Output) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains(" passed, 0 failed"),
        "{what} failed ({})\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    // The program's "N passed, 0 failed" line (shown with --nocapture).
    println!("{what}: {}", stdout.trim_end());
}

#[test]
fn c_abi_end_to_end() {
    let bin = out_dir().join("abi_test");
    let built = compile(&bin, &[]);
    assert!(
        built.status.success(),
        "compiling tests/c failed\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let out = run(&bin, &[]);
    assert_passed("abi_test", &out);
}

/// The same program built with AddressSanitizer (the C side is
/// instrumented; libmonarch itself is not). Leak detection is left on: the
/// program frees everything it gets from the library.
#[test]
fn c_abi_end_to_end_asan() {
    let bin = out_dir().join("abi_test_asan");
    let built = compile(&bin, &["-fsanitize=address", "-fno-omit-frame-pointer"]);
    assert!(
        built.status.success(),
        "compiling tests/c with -fsanitize=address failed\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let out = run(&bin, &[("ASAN_OPTIONS", "abort_on_error=0:exitcode=86")]);
    assert_passed("abi_test (ASan)", &out);
}
