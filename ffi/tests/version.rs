//! The version constants of the header are the workspace version.

#[test]
fn header_version_is_the_workspace_version() {
    let parts = [
        monarch::MONARCH_VERSION_MAJOR,
        monarch::MONARCH_VERSION_MINOR,
        monarch::MONARCH_VERSION_PATCH,
    ];
    let cargo = [
        env!("CARGO_PKG_VERSION_MAJOR"),
        env!("CARGO_PKG_VERSION_MINOR"),
        env!("CARGO_PKG_VERSION_PATCH"),
    ]
    .map(|s| s.parse::<u32>().expect("numeric version"));
    assert_eq!(parts, cargo, "update MONARCH_VERSION_* in ffi/src/lib.rs");
}
