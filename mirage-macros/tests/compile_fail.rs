//! Compile-fail tests of `#[mugraph]`: every class of user error is a compile error at the
//! offending tokens, saying what is allowed. Regenerate the expected output with
//! `TRYBUILD=overwrite cargo test -p mirage-rs-macros --test compile_fail` and review every
//! `.stderr`.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
