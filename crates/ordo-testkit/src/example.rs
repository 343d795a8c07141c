//! The examples a test runs as processes of their own.

use std::path::PathBuf;

/// The binary of example `name` of the package under test, which `cargo
/// test` builds beside the test's own (`target/<profile>/examples/`).
///
/// # Panics
///
/// When it is not there, saying how to build it.
pub fn example_binary(name: &str) -> PathBuf {
    let test = std::env::current_exe().expect("the test's own path");
    let profile = test
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test runs from target/<profile>/deps");
    let path = profile.join("examples").join(name);
    assert!(
        path.is_file(),
        "{} is missing: `cargo test` builds the examples of the package it tests (or `cargo build --example {name}` \
         with the package's features)",
        path.display()
    );
    path
}
