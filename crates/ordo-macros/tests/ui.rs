//! Compile-time checks of the macros: each `tests/ui/fail/*.rs` must fail
//! with exactly the committed `.stderr`; each `tests/ui/pass/*.rs` must build
//! and run. Regenerate expectations with
//! `TRYBUILD=overwrite cargo test -p ordo-macros --test ui` on the pinned toolchain,
//! then read every changed `.stderr`.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/fail/*.rs");
    cases.pass("tests/ui/pass/*.rs");
}
