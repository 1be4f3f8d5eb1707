//! Compile-fail tests of `#[mugraph]` against build artifacts: with `OUT_DIR` pointing at
//! `tests/artifacts/out` (what cargo sets for a package with a build script), a function whose
//! artifacts are missing or belong to an older version of it is a compile error saying what to
//! add to build.rs or to redo. (`tests/ui/missing_build_script.rs` covers OUT_DIR unset.)
//! Regenerate with `TRYBUILD=overwrite cargo test -p mirage-rs-macros --test artifacts`.

#[test]
fn missing_and_stale_artifacts() {
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/artifacts/out");
    // SAFETY: this test binary holds this one test, so no other thread reads the environment.
    unsafe { std::env::set_var("OUT_DIR", &out) };
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/artifacts/*.rs");
}
