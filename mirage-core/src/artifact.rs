//! Names of the build artifacts of a `#[mugraph]` function: what `mirage::build::compile` writes
//! and the attribute's expansion embeds.

/// The directory under `$OUT_DIR` holding the artifacts.
pub const ARTIFACT_DIR: &str = "mirage";

/// The file stem of a function's artifacts: `<fn name>-<fingerprint hash>`. The files are
/// `<stem>.cubin`, `<stem>.plan.json`, `<stem>.mugraph.json` and `<stem>.cu`.
///
/// ```
/// assert_eq!(mirage_core::artifact_stem("gated_mlp", "0123456789abcdef"), "gated_mlp-0123456789abcdef");
/// ```
pub fn artifact_stem(name: &str, fingerprint_hash: &str) -> String {
    format!("{name}-{fingerprint_hash}")
}
