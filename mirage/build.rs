//! Records the optimization level mirage itself is compiled with, so that the build-script API
//! can warn when it runs unoptimized (a build script's `OPT_LEVEL` is that of the unit being
//! built: for mirage as a build-dependency, the `build-override` profile's).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let level = std::env::var("OPT_LEVEL").unwrap_or_else(|_| "unknown".into());
    println!("cargo:rustc-env=MIRAGE_BUILD_OPT_LEVEL={level}");
}
