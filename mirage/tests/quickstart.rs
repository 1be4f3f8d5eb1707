//! The README's quick start is the fixture crate `fixtures/quickstart/` (which CI builds and
//! runs): every file the README shows is the fixture's file, the fixture's Cargo.toml differing
//! only by its `path = ...` dependencies and its empty `[workspace]`.

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the repository root").to_path_buf()
}

/// The code block after `<!-- quickstart: NAME -->` in the README.
fn readme_block(readme: &str, name: &str) -> String {
    let marker = format!("<!-- quickstart: {name} -->\n");
    let start = readme.find(&marker).unwrap_or_else(|| panic!("the README has no block {marker:?}")) + marker.len();
    let rest = &readme[start..];
    let (fence, body) = rest.split_once('\n').expect("a fenced block");
    assert!(fence.starts_with("```"), "{name}: expected a code fence after the marker, found {fence:?}");
    let end = body.find("\n```").unwrap_or_else(|| panic!("{name}: unterminated code block"));
    format!("{}\n", &body[..end])
}

/// The fixture's Cargo.toml as a user would write it: without `path = ...` and `[workspace]`.
fn as_published(manifest: &str) -> String {
    let mut out = String::new();
    for line in manifest.lines() {
        if line.trim() == "[workspace]" {
            continue;
        }
        let line = match line.find(", path = \"") {
            Some(at) => {
                let end = line[at + 10..].find('"').expect("a closing quote") + at + 11;
                format!("{}{}", &line[..at], &line[end..])
            }
            None => line.to_owned(),
        };
        out.push_str(&line);
        out.push('\n');
    }
    out.trim_end().to_owned() + "\n"
}

#[test]
fn the_readme_quick_start_is_the_fixture() {
    let root = repo();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let fixture = root.join("fixtures").join("quickstart");
    for name in ["Cargo.toml", "build.rs", "src/kernels.rs", "src/main.rs"] {
        let file = std::fs::read_to_string(fixture.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let want = if name == "Cargo.toml" { as_published(&file) } else { file };
        assert_eq!(readme_block(&readme, name), want, "the README's {name} differs from fixtures/quickstart/{name}");
    }
}

#[test]
fn the_published_manifest_drops_only_paths_and_the_workspace() {
    let manifest = "[dependencies]\nmirage-rs = { version = \"0.1\", path = \"../../mirage\", features = [\"build\"] }\n\n[workspace]\n";
    assert_eq!(as_published(manifest), "[dependencies]\nmirage-rs = { version = \"0.1\", features = [\"build\"] }\n");
}
