//! The superoptimizer on programs of the transformer operators beyond the benchmark set: layer
//! norm (lowered to `rms_norm` of the centered input, weighted) fuses into one kernel, a projection with
//! its rotary embedding, an LM head with its argmax, an embedding lookup with its norm, a
//! tanh-GELU MLP, a weighted layer norm with its projection, a concatenation, and q/k/v
//! projections with q and k rotated and v plain each get a verified µGraph of at most two
//! kernels, and the float check accepts them. A state budget that runs out keeps the best
//! verified µGraph found by then and says so.
#![cfg(feature = "build")]

use mirage::lower::lower_source;
use mirage::search::{SearchConfig, SearchResult, describe, float_check, superoptimize};

/// [`search`], printing the whole report.
fn search_reported(src: &str, cfg: &SearchConfig) -> (mirage::ir::KernelGraph, SearchResult) {
    let (program, r) = search(src, cfg);
    println!("{r}");
    (program, r)
}

/// Lowers one `#[mugraph]` function and superoptimizes it.
fn search(src: &str, cfg: &SearchConfig) -> (mirage::ir::KernelGraph, SearchResult) {
    let program = lower_source(src).unwrap_or_else(|e| panic!("{e}")).remove(0).graph;
    let r = superoptimize(&program, cfg, None).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.best.verified, Some(true));
    assert_eq!(float_check(&program, &r.best.graph).expect("float check runs"), Ok(()));
    println!(
        "{} kernel(s), {:.2} µs, search {:.2} s, {} states\n{}",
        r.best.graph.num_kernels(),
        r.best.cost.total_us,
        r.stats.search_time.as_secs_f64(),
        r.stats.states,
        describe(&r.best.graph)
    );
    (program, r)
}

#[test]
fn layer_norm_fuses_into_one_kernel() {
    let (_, r) = search(
        "#[mugraph]
         fn ln(x: Tensor<f16, 8, 768>, w: Tensor<f16, 1, 768>, b: Tensor<f16, 1, 768>) -> Tensor<f16, 8, 768> {
             layer_norm_weighted(x, w, b, 1e-5)
         }",
        &SearchConfig::single_kernel(),
    );
    assert_eq!(r.best.graph.num_kernels(), 1);
}

#[test]
fn a_projection_and_its_rotary_embedding() {
    let (_, r) = search(
        "#[mugraph]
         fn q_rope(x: Tensor<f16, 8, 512>, wq: Tensor<f16, 512, 512>, cos: Tensor<f16, 8, 32>, sin: Tensor<f16, 8, 32>)
             -> Tensor<f16, 8, 512>
         {
             rope(x.matmul(wq), cos, sin)
         }",
        &SearchConfig::default(),
    );
    assert!(r.best.graph.num_kernels() <= 2);
}

#[test]
fn an_lm_head_and_its_argmax() {
    let (_, r) = search(
        "#[mugraph]
         fn next_token(h: Tensor<f16, 2, 256>, w: Tensor<f16, 256, 2048>) -> Tensor<i32, 2, 1> {
             argmax(h.matmul(w), 1)
         }",
        &SearchConfig::default(),
    );
    assert!(r.best.graph.num_kernels() <= 2);
}

#[test]
fn an_embedding_lookup_and_its_norm() {
    let (_, r) = search(
        "#[mugraph]
         fn embed(emb: Tensor<f16, 1000, 256>, ids: Tensor<i32, 8>, g: Tensor<f16, 1, 256>) -> Tensor<f16, 8, 256> {
             rms_norm_weighted(gather(emb, ids), g, 1e-6)
         }",
        &SearchConfig::default(),
    );
    assert!(r.best.graph.num_kernels() <= 2);
}

#[test]
fn a_tanh_gelu_mlp_is_one_kernel() {
    let (_, r) = search(
        "#[mugraph]
         fn mlp(x: Tensor<f16, 8, 256>, w: Tensor<f16, 256, 512>) -> Tensor<f16, 8, 512> {
             gelu_tanh(x.matmul(w)) * 0.5 + 1.0
         }",
        &SearchConfig::single_kernel(),
    );
    assert_eq!(r.best.graph.num_kernels(), 1);
}

#[test]
fn a_weighted_layer_norm_and_its_projection() {
    let (_, r) = search(
        "#[mugraph]
         fn ln_proj(x: Tensor<f16, 8, 256>, g: Tensor<f16, 1, 256>, b: Tensor<f16, 1, 256>, w: Tensor<f16, 256, 512>)
             -> Tensor<f16, 8, 512>
         {
             layer_norm_weighted(x, g, b, 1e-5).matmul(w)
         }",
        &SearchConfig::default(),
    );
    assert!(r.best.graph.num_kernels() <= 2);
}

#[test]
fn a_concatenation_is_one_kernel() {
    let (_, r) = search(
        "#[mugraph]
         fn cat(a: Tensor<f16, 16, 32>, b: Tensor<f16, 16, 32>) -> Tensor<f16, 16, 64> {
             concat(a, b, 1)
         }",
        &SearchConfig::single_kernel(),
    );
    assert_eq!(r.best.graph.num_kernels(), 1);
}

/// q and k rotated, v plain, from one input: no µGraph reads `x` in one kernel only, so the
/// search tries again letting the final kernel re-read it, and says so.
#[test]
fn qkv_projections_with_q_and_k_rotated() {
    let (_, r) = search(
        "#[mugraph]
         fn qkv_rope(x: Tensor<f16, 1, 256>, wqk: Tensor<f16, 256, 192>, wv: Tensor<f16, 256, 64>,
                     cos: Tensor<f16, 1, 32>, sin: Tensor<f16, 1, 32>)
             -> (Tensor<f16, 1, 192>, Tensor<f16, 1, 64>)
         {
             (rope(x.matmul(wqk), cos, sin), x.matmul(wv))
         }",
        &SearchConfig::default(),
    );
    assert!(r.best.graph.num_kernels() <= 2);
    assert!(r.notes.iter().any(|n| n.contains("re-read")), "{:?}", r.notes);
}

const GATED: &str = "#[mugraph]
     fn mlp(x: Tensor<f16, 8, 256>, w1: Tensor<f16, 256, 512>, w2: Tensor<f16, 256, 512>) -> Tensor<f16, 8, 512> {
         silu(x.matmul(w1)) * x.matmul(w2)
     }";

/// A state budget below what the search needs (it visits 2716 states on one thread): it stops
/// early, keeps the best verified µGraph found by then, and the report and the build's note give
/// the budget and the outcome. One thread, so that where it stops does not depend on timing.
#[test]
fn a_state_budget_keeps_the_best_found_so_far() {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().expect("a one-thread pool");
    let cfg = SearchConfig { max_states: 1000, ..SearchConfig::default() };
    let (program, r) = pool.install(|| search(GATED, &cfg));
    assert!(r.stats.timed_out, "{} states", r.stats.states);
    assert_eq!(r.stats.max_states, 1000);
    let report = r.to_string();
    assert!(report.contains("budget 60.0 s / 1000 states exhausted"), "{report}");
    let outcome = r.stats.budget_outcome(&r.best).expect("the budget ran out");
    assert!(outcome.contains("using the best verified µGraph found by then"), "{outcome}");
    let full =
        pool.install(|| superoptimize(&program, &SearchConfig::default(), None)).unwrap_or_else(|e| panic!("{e}"));
    assert!(!full.stats.timed_out && full.stats.budget_outcome(&full.best).is_none());
    assert!(full.best.cost.total_us <= r.best.cost.total_us);
}

/// A search that finds nothing says which operator it never applied: here one operator per block
/// graph and no library kernels leave the matmul's result without its `exp`.
#[test]
fn a_search_that_finds_nothing_names_where_it_stopped() {
    let program = lower_source(
        "#[mugraph]
         fn f(x: Tensor<f16, 8, 64>, w: Tensor<f16, 64, 128>) -> Tensor<f16, 8, 128> {
             exp(x.matmul(w))
         }",
    )
    .unwrap_or_else(|e| panic!("{e}"))
    .remove(0)
    .graph;
    let cfg = SearchConfig { max_kernels: 1, max_block_ops: 1, kernel_level_ops: false, ..SearchConfig::default() };
    let err = superoptimize(&program, &cfg, None).expect_err("no block graph of one operator computes exp(x @ w)");
    let msg = err.to_string();
    assert!(msg.contains("no partial µGraph applied `exp` (%3) to its computed operands"), "{msg}");
}

/// The projection with its residual that ends every attention output and MLP down projection of
/// a pre-norm transformer: `x` is the norm's row (the matmul's inner dim) and the residual's
/// tile (the output's dim), so the search reads it as two inputs, and the residual joins the
/// finished matmul after the loop. No fallback, and the µGraph reads `x` itself.
#[test]
fn a_projection_with_its_residual() {
    let (program, r) = search(
        "#[mugraph]
         fn o_proj(x: Tensor<bf16, 1, 2048>, g: Tensor<bf16, 1, 2048>, w: Tensor<bf16, 2048, 2048>) -> Tensor<bf16, 1, 2048> {
             x + (rms_norm(x) * g).matmul(w)
         }",
        &SearchConfig::default(),
    );
    assert_eq!(r.best.graph.inputs(), program.inputs());
    assert!(r.best.graph.num_kernels() <= 2, "{} kernels", r.best.graph.num_kernels());
    let blocks = mirage::codegen::default_blocks::lower_to_blocks(&r.best.graph).expect("lowers");
    mirage::codegen::generate(&blocks, "o_proj", &Default::default()).expect("generates CUDA");
}

/// The Llama-3.2-1B MLP block with its pre-norm and residual (2048 → 8192 → 2048): three matmuls
/// in a chain with the norm's `x` re-read by the residual. Superoptimized without any operator
/// kept as its own library kernel (searched whole or in parts at matmul boundaries, the parts
/// composed and verified as a whole), within its 60 s budget: it took 62.8 s when every part got
/// the whole budget again; the bound asserted is generous (the budget plus the verifications
/// that run after it: the parts' candidates at 2048 × 8192 and the composition).
#[test]
fn a_whole_mlp_block_with_norm_and_residual() {
    let started = std::time::Instant::now();
    let (program, r) = search_reported(
        "#[mugraph]
         fn mlp_block(x: Tensor<bf16, 1, 2048>, g: Tensor<bf16, 1, 2048>, w1: Tensor<bf16, 2048, 8192>,
                      w3: Tensor<bf16, 2048, 8192>, w2: Tensor<bf16, 8192, 2048>) -> Tensor<bf16, 1, 2048> {
             let xn = rms_norm(x) * g;
             x + (silu(xn.matmul(w1)) * xn.matmul(w3)).matmul(w2)
         }",
        &SearchConfig::default(),
    );
    let took = started.elapsed();
    println!("{}\nwall time {:.1} s", r.stats.budget_report(&r.best), took.as_secs_f64());
    assert_eq!(r.best.graph.inputs(), program.inputs());
    assert!(r.stats.unfused.is_empty(), "{:?}", r.stats.unfused);
    assert!(r.best.graph.num_kernels() <= 3, "{} kernels", r.best.graph.num_kernels());
    assert!(r.stats.search_time.as_secs_f64() <= 60.0 + 10.0, "{:.1} s searching", r.stats.search_time.as_secs_f64());
    assert!(took.as_secs_f64() <= 60.0 + 60.0, "{:.1} s under a 60 s budget", took.as_secs_f64());
}

/// An operator the search cannot express still builds: with library kernels off, no block graph
/// carries an input's row past the loop unchanged for `argmax`, so the search of the whole
/// program finds nothing; searched in parts, the projection is fused and the argmax alone is kept
/// as its own library kernel, and a note (a `cargo:warning=` line in the build) names it and why.
#[test]
fn an_operator_the_search_cannot_express_is_named() {
    let program = lower_source(
        "#[mugraph]
         fn f(x: Tensor<f16, 2, 256>, h: Tensor<f16, 2, 256>, w: Tensor<f16, 256, 512>)
             -> (Tensor<i32, 2, 1>, Tensor<f16, 2, 512>)
         {
             (argmax(x, 1), exp(h.matmul(w)))
         }",
    )
    .unwrap_or_else(|e| panic!("{e}"))
    .remove(0)
    .graph;
    let cfg = SearchConfig { kernel_level_ops: false, ..SearchConfig::default() };
    let dir = std::env::temp_dir().join(format!("mirage-search-ops-unfused-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cache = mirage::cache::Cache::new(&dir);
    let r = superoptimize(&program, &cfg, Some(&cache)).unwrap_or_else(|e| panic!("{e}"));
    println!("{r}");
    // A cache hit reports the unfused operator again (stored in the entry), with why.
    let hit = superoptimize(&program, &cfg, Some(&cache)).unwrap_or_else(|e| panic!("{e}"));
    println!("{hit}");
    assert!(hit.from_cache);
    assert_eq!(hit.stats.unfused, r.stats.unfused);
    let hit_report = hit.to_string();
    assert!(
        hit_report.lines().any(|l| l.starts_with("note: `argmax")
            && l.contains("kept as its own library kernel (not fused) by the search that wrote this cache entry")
            && l.contains("the search expresses no µGraph of it alone")),
        "{hit_report}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(r.best.verified, Some(true));
    assert_eq!(float_check(&program, &r.best.graph).expect("float check runs"), Ok(()));
    assert_eq!(r.stats.unfused.len(), 1, "{:?}", r.stats.unfused);
    assert!(r.stats.unfused[0].operator.starts_with("`argmax"), "{:?}", r.stats.unfused);
    let report = r.to_string();
    assert!(report.contains("note: no µGraph of the whole program"), "{report}");
    assert!(
        report.lines().any(|l| l.starts_with("note: part ")
            && l.contains("`argmax")
            && l.contains("kept as its own library kernel (not fused): the search expresses no µGraph of it alone")),
        "{report}"
    );
    // The projection and its exp are one fused kernel; the argmax another.
    assert_eq!(r.best.graph.num_kernels(), 2, "{}", describe(&r.best.graph));
}

/// Runs `program` under `cfg` and returns the result with the wall time it took, after checking
/// that it is verified, passes the float check and reports its budget.
fn timed(program: &mirage::ir::KernelGraph, cfg: &SearchConfig) -> (SearchResult, std::time::Duration) {
    let started = std::time::Instant::now();
    let r = superoptimize(program, cfg, None).unwrap_or_else(|e| panic!("{e}"));
    let took = started.elapsed();
    println!("{r}wall time {:.1} s", took.as_secs_f64());
    assert_eq!(r.best.verified, Some(true));
    assert_eq!(float_check(program, &r.best.graph).expect("float check runs"), Ok(()));
    let report = r.to_string();
    assert!(report.contains(&r.stats.budget_report(&r.best)), "{report}");
    (r, took)
}

/// Regression (issue 23): the random program of seed 1005 took 135 s under the random-program
/// harness's 2 s / 20 000-state budget, because the search of the whole program spent the budget
/// and then every part and every growing step got the whole budget again. One budget now holds
/// for the whole search: the states visited stay within the state budget (each search stops
/// within a few hundred states of its share: the enumerator checks every 256 states), and the
/// wall time within a generous bound (the budget plus the verification of the parts' candidates
/// and of the composition, which always run).
#[test]
fn a_partitioned_search_keeps_to_one_budget() {
    let source = mirage::testing::random::random_program(1005).source;
    println!("{source}");
    let program = lower_source(&source).unwrap_or_else(|e| panic!("{e}")).remove(0).graph;
    // The state budget binds (the time budget is there for a loaded machine), so that what is
    // found does not depend on the machine's speed.
    let cfg = SearchConfig {
        budget: std::time::Duration::from_secs(30),
        max_states: 20_000,
        top_k: 1,
        ..SearchConfig::default()
    };
    let (r, took) = timed(&program, &cfg);
    assert!(r.stats.states <= 20_000 + 4_096, "{} states under a 20 000-state budget", r.stats.states);
    assert!(took.as_secs_f64() < 60.0, "{:.1} s under a 30 s budget", took.as_secs_f64());
}
