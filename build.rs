//! Build script of the workspace's own package: compiles the CUDA sources of the integration
//! tests (`tests/cuda/*.cu`) to `$OUT_DIR/cuda/<name>.cubin` with `mirage::nvcc`, the way a
//! user's build script would, so tests can `include_bytes!` them.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn main() -> ExitCode {
    match compile_test_kernels() {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Compiles every `tests/cuda/*.cu` into `$OUT_DIR/cuda/<stem>.cubin`.
fn compile_test_kernels() -> Result<(), String> {
    let manifest_dir = PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").ok_or("CARGO_MANIFEST_DIR is not set")?,
    );
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").ok_or("OUT_DIR is not set")?);
    let cuda_dir = manifest_dir.join("tests").join("cuda");
    println!("cargo:rerun-if-changed={}", cuda_dir.display());
    for var in mirage::nvcc::ENV_VARS {
        println!("cargo:rerun-if-env-changed={var}");
    }

    let mut sources = Vec::new();
    let entries =
        std::fs::read_dir(&cuda_dir).map_err(|e| format!("reading {}: {e}", cuda_dir.display()))?;
    for entry in entries {
        let path = entry
            .map_err(|e| format!("reading {}: {e}", cuda_dir.display()))?
            .path();
        // Headers next to the sources are tracked too (they are part of nvcc's cache key).
        if path.is_file() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
        if path.extension().is_some_and(|ext| ext == "cu") {
            sources.push(path);
        }
    }
    sources.sort();

    let dest_dir = out_dir.join("cuda");
    std::fs::create_dir_all(&dest_dir)
        .map_err(|e| format!("creating {}: {e}", dest_dir.display()))?;
    let opts = mirage::nvcc::CompileOptions {
        include_dirs: vec![cuda_dir.clone()],
        cache_dir: Some(out_dir.join("mirage").join("nvcc-cache")),
        ..Default::default()
    };
    for source_path in &sources {
        let stem = source_path
            .file_stem()
            .and_then(|s| s.to_str())
            .ok_or_else(|| format!("{}: expected a UTF-8 file name", source_path.display()))?;
        let source = std::fs::read_to_string(source_path)
            .map_err(|e| format!("reading {}: {e}", source_path.display()))?;
        let cubin = mirage::nvcc::compile_cubin(&source, stem, &opts)
            .map_err(|e| format!("compiling {}:\n{e}", source_path.display()))?;
        write_if_changed(&dest_dir.join(format!("{stem}.cubin")), &cubin.bytes)?;
    }
    Ok(())
}

/// Writes a file only when its content changes (keeps dependents' mtimes stable).
fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<(), String> {
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    std::fs::write(path, bytes).map_err(|e| format!("writing {}: {e}", path.display()))
}
