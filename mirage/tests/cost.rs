//! The analytic cost model (DESIGN §9): every golden µGraph is costed kernel by kernel with an
//! explanation; the model prefers fused kernels, charges for shared memory it cannot have, and is
//! slower on an A100 than on an H100/H200.
#![cfg(feature = "build")]

use mirage::cost::{Arch, estimate, estimate_block, lower_bound_us};
use mirage::ir::{AccKind, BlockGraph, DType, KernelGraph, KernelOp, TensorDesc};
use mirage::testing::programs::golden_cases;

fn blocks(g: &KernelGraph) -> Vec<&BlockGraph> {
    g.nodes()
        .iter()
        .filter_map(|n| match &n.op {
            KernelOp::Custom { block } => Some(&**block),
            _ => None,
        })
        .collect()
}

#[test]
fn every_golden_candidate_is_costed_kernel_by_kernel() {
    let arch = Arch::sm90();
    for case in golden_cases() {
        for (j, c) in case.candidates().expect("import").iter().enumerate() {
            let r = estimate(c, &arch).expect("cost");
            assert_eq!(r.kernels.len(), c.num_kernels(), "{} c{j}", case.name);
            assert!(r.feasible(), "{} c{j}: {r}", case.name);
            let sum: f64 = r.kernels.iter().map(|k| k.us).sum();
            assert!((sum - r.total_us).abs() < 1e-9);
            for k in &r.kernels {
                assert!(
                    k.us >= arch.launch_us && k.waves >= 1 && k.bytes > 0.0 && !k.why.is_empty(),
                    "{} c{j}: {k:?}",
                    case.name
                );
            }
            // The memory floor: every input read once and every output written once.
            let floor: f64 = c
                .inputs()
                .iter()
                .map(|d| (d.shape.iter().product::<usize>() * d.dtype.size_bytes()) as f64)
                .sum::<f64>()
                / arch.dram_bytes_per_us;
            assert!(r.total_us >= floor, "{} c{j}: {} µs below the memory floor {floor} µs", case.name, r.total_us);
            for b in blocks(c) {
                assert!(
                    lower_bound_us(b, &arch) <= estimate_block(b, &arch).us + 1e-9,
                    "{} c{j}: the search's bound is a lower bound",
                    case.name
                );
            }
        }
    }
}

#[test]
fn fusing_the_epilogue_is_cheaper_than_a_second_kernel() {
    // gated_mlp: candidate 0 saves silu(XW1) and XW2 and multiplies in a second kernel;
    // candidate 2 is the same block graph with the multiply fused.
    let case = golden_cases().into_iter().find(|c| c.name == "gated_mlp").expect("gated_mlp");
    let cands = case.candidates().expect("import");
    let arch = Arch::sm90();
    let two = estimate(&cands[0], &arch).expect("cost");
    let one = estimate(&cands[2], &arch).expect("cost");
    assert_eq!((cands[0].num_kernels(), cands[2].num_kernels()), (2, 1));
    assert!(one.total_us + arch.launch_us <= two.total_us, "fused {one} vs two kernels {two}");
}

#[test]
fn an_a100_is_slower_and_architectures_are_named() {
    let case = golden_cases().into_iter().find(|c| c.name == "rmsnorm_bs1").expect("rmsnorm");
    let g = &case.candidates().expect("import")[0];
    let h = estimate(g, &Arch::sm90()).expect("cost");
    let a = estimate(g, &Arch::sm80()).expect("cost");
    assert!(a.total_us > h.total_us);
    assert_eq!(Arch::from_name("sm_90a").map(|a| a.num_sms), Some(132));
    assert_eq!(Arch::from_name("sm_80").map(|a| a.num_sms), Some(108));
    assert_eq!(Arch::from_name("sm_70"), None);
}

#[test]
fn a_kernel_without_enough_shared_memory_cannot_run() {
    // One block holding a whole 4096 x 4096 f16 matrix (32 MB) in shared memory.
    let w = TensorDesc::new(&[4096, 4096], DType::F16);
    let mut bg = BlockGraph::new(vec![w], [1, 1, 1], 128, 1).expect("block graph");
    let t = bg.input(0, [None; 3], None).expect("input");
    let s = bg.accum(AccKind::Sum, &[t]).expect("acc");
    bg.output(s, [None; 3]).expect("output");
    let k = estimate_block(&bg, &Arch::sm90());
    assert!(k.us.is_infinite() && k.why.contains("shared memory"), "{k:?}");
    let mut g = KernelGraph::new();
    let x = g.input(&[4096, 4096], DType::F16).expect("input");
    let o = g.custom(&[x], bg).expect("custom");
    g.output(o[0], None).expect("output");
    assert!(!estimate(&g, &Arch::sm90()).expect("cost").feasible());
}

#[test]
fn more_blocks_on_a_weight_bound_kernel_is_faster_until_the_sms_are_full() {
    // rmsnorm_linear candidates differ in grid size: 64 blocks leave SMs idle.
    let case = golden_cases().into_iter().find(|c| c.name == "rmsnorm_bs1").expect("rmsnorm");
    let arch = Arch::sm90();
    let cost_of = |grid: usize, frange: usize| {
        case.candidates()
            .expect("import")
            .into_iter()
            .find(|c| blocks(c).iter().any(|b| b.grid()[0] == grid && b.forloop_range() == frange))
            .map(|c| estimate(&c, &arch).expect("cost").total_us)
    };
    let (Some(small), Some(large)) = (cost_of(64, 64), cost_of(256, 64)) else {
        panic!("expected grids 64 and 256 with frange 64")
    };
    assert!(large < small, "256 blocks {large} µs vs 64 blocks {small} µs");
}
