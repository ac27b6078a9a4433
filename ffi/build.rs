//! libmonarch.so carries the SONAME `libmonarch.so.<major>` of the workspace
//! version, so programs linked against it ask for that name at run time.

fn main() {
    let major =
        std::env::var("CARGO_PKG_VERSION_MAJOR").expect("cargo sets CARGO_PKG_VERSION_MAJOR");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libmonarch.so.{major}");
    println!("cargo:rerun-if-changed=build.rs");
}
