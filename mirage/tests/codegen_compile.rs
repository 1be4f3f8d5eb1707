//! Every generated kernel of the golden µGraphs and of the benchmark programs compiles with nvcc
//! for sm_90a and sm_80 (CI installs nvcc 13.0: a codegen change that breaks compilation fails here).
#![cfg(feature = "build")]

use mirage::codegen::{generate, KernelOptions, DEVICE_LIBRARY};
use mirage::nvcc::{compile_cubin, CompileOptions};
use mirage::programs::golden_cases;

fn sanitize(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect()
}

/// One translation unit per golden file: the program and every candidate.
fn golden_units() -> Vec<(String, String, usize)> {
    let opts = KernelOptions::default();
    golden_cases()
        .into_iter()
        .map(|case| {
            let base = sanitize(case.name);
            let mut kernels = String::new();
            let mut count = 0;
            let program = (case.program)().expect("program builds");
            let g = generate(&program, &format!("{base}_program"), &opts).unwrap_or_else(|e| panic!("{}: program: {e}", case.name));
            kernels.push_str(&g.kernels_source);
            count += g.plan.kernels.len();
            for (j, cand) in case.candidates().expect("imports").iter().enumerate() {
                let g = generate(cand, &format!("{base}_c{j}"), &opts).unwrap_or_else(|e| panic!("{} candidate {j}: {e}", case.name));
                kernels.push_str(&g.kernels_source);
                count += g.plan.kernels.len();
            }
            (base, format!("{DEVICE_LIBRARY}\n{kernels}"), count)
        })
        .collect()
}

#[test]
fn golden_kernels_compile_for_sm90a_and_sm80() {
    let units = golden_units();
    let mut total = 0;
    for arch in ["sm_90a", "sm_80"] {
        for (name, source, count) in &units {
            let opts = CompileOptions { arch: Some(arch.to_string()), ..Default::default() };
            let cubin = compile_cubin(source, &format!("golden_{name}"), &opts).unwrap_or_else(|e| panic!("{name} for {arch}: {e}"));
            assert!(cubin.bytes.starts_with(b"\x7fELF"), "{name}: not an ELF cubin");
            total += count;
        }
    }
    println!("{total} kernels compiled (both architectures)");
}
