//! Verification throughput: fingerprints per second of the rmsnorm (rmsnorm_bs1) and gated_mlp
//! programs and of a golden candidate of each, and z3 subexpression-oracle queries per second
//! (a proof and a budget-out). `cargo bench -p mirage-rs --features build --bench verify`.

// criterion_group! generates an undocumented function.
#![allow(missing_docs)]

use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use mirage::absexpr::{OracleConfig, SubexprOracle, build};
use mirage::eval::evaluate;
use mirage::fingerprint::{FieldDomain, FingerprintContext, VerifyConfig};
use mirage::testing::programs::golden_cases;

fn fingerprints(c: &mut Criterion) {
    let mut group = c.benchmark_group("fingerprint");
    group.sample_size(10).measurement_time(Duration::from_secs(20)).throughput(Throughput::Elements(1));
    for name in ["rmsnorm_bs1", "gated_mlp"] {
        let Some(case) = golden_cases().into_iter().find(|c| c.name == name) else { continue };
        let (Ok(program), Ok(candidates)) = ((case.program)(), case.candidates()) else { continue };
        let shapes: Vec<Vec<usize>> = program.inputs().iter().map(|d| d.shape.clone()).collect();
        let domain = FieldDomain::new(1);
        let inputs = FieldDomain::random_inputs(2, &shapes);
        // One fingerprint = one evaluation over Z_p × Z_q of the whole graph at its real shape.
        group.bench_function(format!("{name}/program"), |b| b.iter(|| evaluate(&program, &domain, &inputs)));
        if let Some(cand) = candidates.first() {
            group.bench_function(format!("{name}/candidate0"), |b| b.iter(|| evaluate(cand, &domain, &inputs)));
            let Ok(ctx) = FingerprintContext::new(&program, &VerifyConfig::default()) else { continue };
            group.bench_function(format!("{name}/check(2 trials)"), |b| b.iter(|| ctx.check(cand)));
        }
    }
    group.finish();
}

fn oracle(c: &mut Criterion) {
    use build::*;
    let mut group = c.benchmark_group("oracle");
    group.sample_size(20).throughput(Throughput::Elements(1));
    let Some(case) = golden_cases().into_iter().find(|c| c.name == "rmsnorm_bs1") else { return };
    let Ok(program) = (case.program)() else { return };
    let Ok(oracle) = SubexprOracle::new(&program, OracleConfig::default()) else { return };
    // A partial sum of the tile matmul (a proof) and an exp where there is none (a budget-out);
    // `query` bypasses the memo and the syntactic shortcuts.
    let proved = sum(128, &mul(&var(0), &var(1)));
    let pruned = exp(&var(0));
    group.bench_function("rmsnorm_bs1/proved", |b| b.iter(|| assert!(oracle.query(&proved))));
    group.bench_function("rmsnorm_bs1/pruned", |b| b.iter(|| assert!(!oracle.query(&pruned))));
    group.finish();
}

criterion_group!(benches, fingerprints, oracle);
criterion_main!(benches);
