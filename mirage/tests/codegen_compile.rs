//! Every generated kernel of the golden µGraphs and of the coverage programs compiles with nvcc
//! for sm_90a and sm_80 (CI installs nvcc 13.0: a codegen change that breaks compilation fails here;
//! the golden µGraphs' sm_80 compile is slow here and runs in the GPU run script instead).
#![cfg(feature = "build")]

use mirage::codegen::{KernelOptions, generate_unit};
use mirage::nvcc::{CompileOptions, compile_cubin};
use mirage::testing::programs::golden_cases;

/// One translation unit per golden file: the program and every candidate.
fn golden_units() -> Vec<(String, String, usize)> {
    golden_cases()
        .into_iter()
        .map(|case| {
            let graphs = case.named_graphs().unwrap_or_else(|e| panic!("{e}"));
            let refs: Vec<(String, &mirage::ir::KernelGraph)> = graphs.iter().map(|(n, g)| (n.clone(), g)).collect();
            let (source, plans) =
                generate_unit(&refs, &KernelOptions::default()).unwrap_or_else(|e| panic!("{}: {e}", case.name));
            (case.ident(), source, plans.iter().map(|p| p.kernels.len()).sum())
        })
        .collect()
}

/// Compiles every golden unit for `arch` and returns the number of kernels compiled.
fn compile_golden_units(arch: &str) -> usize {
    let mut total = 0;
    for (name, source, count) in golden_units() {
        let opts = CompileOptions { arch: Some(arch.to_string()), ..Default::default() };
        let cubin = compile_cubin(&source, &format!("golden_{name}"), &opts)
            .unwrap_or_else(|e| panic!("{name} for {arch}: {e}"));
        assert!(cubin.bytes.starts_with(b"\x7fELF"), "{name} for {arch}: not an ELF cubin");
        total += count;
    }
    total
}

/// The golden µGraphs for sm_90a, the default target (the H200 run compiles and runs them too).
#[test]
fn golden_kernels_compile_for_sm90a() {
    let total = compile_golden_units("sm_90a");
    assert!(total > 0, "no golden kernel generated");
    println!("{total} golden kernels compiled for sm_90a");
}

/// The golden µGraphs for sm_80: slow on a 2-core CI machine (ptxas over every golden kernel a
/// second time), so it runs in the GPU run script (`scripts/gpu-run-all.sh`, 16 cores there);
/// every operator's code path is compiled for sm_80 in CI by the coverage test below.
#[test]
#[ignore = "slow here: run by scripts/gpu-run-all.sh"]
fn golden_kernels_compile_for_sm80() {
    let total = compile_golden_units("sm_80");
    assert!(total > 0, "no golden kernel generated");
    println!("{total} golden kernels compiled for sm_80");
}

#[test]
fn coverage_kernels_compile_for_sm90a_and_sm80() {
    use mirage::ir::DType;
    for dtype in [DType::F16, DType::Bf16, DType::F32] {
        let graphs = mirage::testing::programs::coverage_cases(dtype).expect("coverage graphs build");
        let name = format!("coverage_{}", dtype.name());
        let refs: Vec<(String, &mirage::ir::KernelGraph)> =
            graphs.iter().map(|(n, g)| (format!("{name}_{n}"), g)).collect();
        let (source, plans) = generate_unit(&refs, &KernelOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
        for arch in ["sm_90a", "sm_80"] {
            let opts = CompileOptions { arch: Some(arch.to_string()), ..Default::default() };
            compile_cubin(&source, &format!("golden_{name}"), &opts)
                .unwrap_or_else(|e| panic!("{name} for {arch}: {e}"));
        }
        println!(
            "{name}: {} programs, {} kernels compiled",
            plans.len(),
            plans.iter().map(|p| p.kernels.len()).sum::<usize>()
        );
    }
}
