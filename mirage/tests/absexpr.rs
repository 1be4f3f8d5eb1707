//! Abstract expressions and the z3 subexpression oracle (DESIGN §7): every prefix of every golden
//! µGraph is kept; prefixes that cannot lead to the program are pruned. Run with `--nocapture`
//! to see the per-query times.
#![cfg(feature = "build")]

use std::time::Instant;

use mirage::absexpr::*;
use mirage::testing::programs::golden_cases;

#[test]
fn every_prefix_of_every_golden_mugraph_is_kept() {
    let start = Instant::now();
    let (mut total, mut queried, mut candidates) = (0u64, 0, 0);
    for case in golden_cases() {
        let program = (case.program)().expect("program");
        let oracle = SubexprOracle::new(&program, OracleConfig::default()).expect("exprs");
        let t = Instant::now();
        let mut checks = 0u64;
        for (j, cand) in case.candidates().expect("imports").iter().enumerate() {
            candidates += 1;
            let exprs = graph_exprs(cand).expect("exprs");
            let before = checks;
            for (loc, e) in exprs.produced(cand) {
                let a = oracle.check(&e);
                assert!(
                    a.keep(),
                    "{} candidate {j}: prefix at {loc:?} pruned: {e}\n target {}",
                    case.name,
                    oracle.targets()[0]
                );
                total += 1;
                checks += 1;
            }
            assert!(checks > before, "{} candidate {j}: no prefix was checked", case.name);
        }
        let s = oracle.stats();
        // Every query is accounted for, and none was pruned.
        assert_eq!(s.memo_hits + s.syntactic + s.proved + s.pruned, checks, "{}: {s:?}", case.name);
        assert_eq!(s.pruned, 0, "{}: {s:?}", case.name);
        queried += s.proved;
        println!(
            "{}: {:?} in {:.2?}; {} z3 proofs, {:.2?} per proof",
            case.name,
            s,
            t.elapsed(),
            s.proved,
            s.proved_time.checked_div(s.proved as u32).unwrap_or_default()
        );
    }
    println!("{total} prefixes kept ({queried} by z3 proofs) in {:.1?}", start.elapsed());
    assert_eq!(candidates, 181, "every golden candidate was checked");
    // Some prefixes are not literal subterms of the program: z3 had to prove them.
    assert!(queried > 0, "no prefix needed a z3 proof: the oracle was not exercised");
}

/// Expressions that cannot lead to the program of `case`, by golden file.
fn dead_ends(case: &str) -> Vec<(&'static str, E)> {
    use build::*;
    let v = var;
    let silu = |e: &E| unary(&mirage::ir::UnaryOp::Silu, e);
    match case {
        // silu(X@W1) * (X@W2)
        "gated_mlp" => vec![
            ("exp where there is none", exp(&sum(4096, &mul(&v(0), &v(1))))),
            ("sum of the wrong size", sum(8192, &mul(&v(0), &v(1)))),
            ("sum of the wrong size", sum(3, &mul(&v(0), &v(1)))),
            ("wrong weight", sum(4096, &mul(&v(0), &v(0)))),
            ("wrong weight", mul(&v(1), &v(2))),
            ("silu of the wrong product", silu(&sum(4096, &mul(&v(0), &v(2))))),
            ("silu of an input", silu(&v(0))),
        ],
        // rms_norm(X) @ W
        "rmsnorm_bs1" | "rmsnorm_bs8" => vec![
            ("exp where there is none", exp(&v(0))),
            ("sum of the wrong size", sum(6144, &mul(&v(0), &v(1)))),
            ("wrong weight", sum(4096, &mul(&v(1), &v(1)))),
            ("silu where there is none", silu(&sum(4096, &mul(&v(0), &v(1))))),
        ],
        // X@W + (X@A)@B
        "lora" => vec![
            ("exp where there is none", exp(&sum(256, &mul(&v(0), &v(1))))),
            // (X·B is not here: abstractly (X@A)@B = Σ X·A·B contains Σ X·B — sums forget indices.)
            ("wrong weight", mul(&v(1), &v(3))),
            ("wrong weight", sum(256, &mul(&v(1), &v(1)))),
            ("sum of the wrong size", sum(512, &mul(&v(0), &v(1)))),
        ],
        // exp(Q@K) / sum(exp(Q@K), 2) @ V
        "gqa_bs1" => vec![
            ("wrong weight", sum(64, &mul(&v(0), &v(2)))),
            ("exp of the wrong product", exp(&sum(64, &mul(&v(0), &v(0))))),
            ("wrong weight after exp", sum(4096, &mul(&exp(&sum(64, &mul(&v(0), &v(1)))), &v(1)))),
            ("double exp", exp(&exp(&sum(64, &mul(&v(0), &v(1)))))),
            ("sum of the wrong size", sum(96, &mul(&v(0), &v(1)))),
        ],
        // rms_norm(X + alpha * (rms_norm(H) + X))
        "ntrans_bs1" => vec![
            ("exp where there is none", exp(&v(0))),
            ("wrong product", mul(&v(0), &v(2))),
            ("sum of the wrong size", sum(2048, &mul(&v(1), &v(1)))),
        ],
        // (rms_norm(X) * G) @ W
        "qwen2.5_659704256b064506" => vec![
            ("exp where there is none", exp(&v(0))),
            // (G·W is not here: scaling W by the gain G first is a valid schedule.)
            ("wrong weight", mul(&v(2), &v(2))),
            ("silu where there is none", silu(&v(0))),
            ("sum of the wrong size", sum(4608, &mul(&v(0), &v(2)))),
        ],
        // (silu(X) * Y) @ W
        _ => vec![
            ("exp where there is none", exp(&v(0))),
            ("silu of the wrong input", silu(&v(1))),
            ("wrong weight", sum(64, &mul(&v(0), &v(2)))),
        ],
    }
}

#[test]
fn prefixes_that_cannot_lead_to_the_program_are_pruned() {
    let (mut n, mut time) = (0u32, std::time::Duration::ZERO);
    for case in golden_cases() {
        let program = (case.program)().expect("program");
        let oracle = SubexprOracle::new(&program, OracleConfig::default()).expect("exprs");
        for (what, e) in dead_ends(case.name) {
            let t = Instant::now();
            let a = oracle.check(&e);
            let dt = t.elapsed();
            assert_eq!(a, Answer::Pruned, "{}: {what}: {e} was kept", case.name);
            println!("{}: pruned {what} in {dt:.2?}: {e}", case.name);
            n += 1;
            time += dt;
        }
    }
    println!("{n} dead ends pruned, {:.2?} per query", time / n);
}

#[test]
fn expressions_follow_the_table() {
    let case = golden_cases().into_iter().find(|c| c.name == "rmsnorm_bs1").expect("case");
    let program = (case.program)().expect("program");
    let exprs = graph_exprs(&program).expect("exprs");
    assert_eq!(
        exprs.outputs[0].to_string(),
        "sum(4096, mul(div(v0, sqrt(mul(sum(4096, mul(v0, v0)), 0.00024414063))), v1))"
    );
    // The golden candidate: acc_rms_last over 32 iterations of [2, 128] tiles, the tile matmul
    // and its acc_sum, the division in the epilogue.
    let cand = &case.candidates().expect("imports")[0];
    let e = graph_exprs(cand).expect("exprs");
    let texts: Vec<String> = e.block[2].iter().flatten().map(|x| x.to_string()).collect();
    assert!(texts.contains(&"sqrt(mul(sum(4096, mul(v0, v0)), 0.00024414063))".to_string()), "{texts:?}");
    assert!(texts.contains(&"sum(128, mul(v0, v1))".to_string()), "{texts:?}");
    assert!(texts.contains(&"sum(4096, mul(v0, v1))".to_string()), "{texts:?}");
    // Sum sizes multiply and sum(1, x) is x.
    use build::*;
    assert_eq!(sum(4, &sum(8, &var(0))), sum(32, &var(0)));
    assert_eq!(sum(1, &var(0)), var(0));
}

#[test]
fn opaque_expressions_are_kept_without_z3() {
    use build::*;
    let program = (golden_cases()[0].program)().expect("program");
    let oracle = SubexprOracle::new(&program, OracleConfig::default()).expect("exprs");
    assert_eq!(oracle.check(&mul(&opaque(), &var(0))), Answer::Opaque);
    let mut g = mirage::ir::KernelGraph::new();
    let x = g.input(&[4, 8], mirage::ir::DType::F32).expect("input");
    let m = g.reduce_max(x, 1).expect("max");
    let d = g.binary(mirage::ir::BinaryOp::Sub, x, m).expect("sub");
    g.output(d, None).expect("out");
    let e = graph_exprs(&g).expect("exprs");
    assert!(e.outputs[0].is_opaque());
    // The literal subterm shortcut.
    let target = oracle.targets()[0].clone();
    assert_eq!(oracle.check(&target), Answer::Subterm);
    assert_eq!(oracle.check(&var(1)), Answer::Subterm);
    let s = oracle.stats();
    assert_eq!((s.proved, s.pruned), (0, 0));
}

#[test]
fn the_oracle_is_shared_across_threads() {
    use build::*;
    let program = (golden_cases()[0].program)().expect("program");
    let oracle = SubexprOracle::new(&program, OracleConfig::default()).expect("exprs");
    // X @ W2 as a partial sum (a proof) and exp (a budget-out), from two threads with their own
    // z3 contexts; the second round is answered from the memo.
    let partial = sum(64, &mul(&var(0), &var(2)));
    let dead = exp(&var(0));
    std::thread::scope(|s| {
        let a = s.spawn(|| (oracle.check(&partial), oracle.check(&dead)));
        let b = s.spawn(|| (oracle.check(&dead), oracle.check(&partial)));
        let (a, b) = (a.join().expect("thread"), b.join().expect("thread"));
        assert_eq!(a, (Answer::Proved, Answer::Pruned));
        assert_eq!(b, (Answer::Pruned, Answer::Proved));
    });
    assert!(oracle.stats().memo_hits + oracle.stats().proved + oracle.stats().pruned >= 4);
}
