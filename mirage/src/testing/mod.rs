//! mirage's own test data and test tools, behind the non-default feature `testing` and hidden
//! from the documentation: this workspace's tests, examples and benchmarks use them; a user of
//! mirage never needs them.
//!
//! - [`programs`]: the benchmark programs as kernel graphs, the golden µGraphs Mirage found for
//!   them (the JSON of `mirage/goldens/`, compiled in) and the coverage programs of code
//!   generation.
//! - [`benchmarks`]: the benchmark set at the shapes of the PyTorch baselines.
//! - [`compare`]: the one comparison of a computed tensor with the reference interpreter's, used
//!   by every GPU check (element-wise tolerance from the output type's rounding and the reduction
//!   length, relative L2 as a second figure, the worst element reported).
//! - [`random`]: seeded random `#[mugraph]` programs (differential tests of the whole compiler).
//! - [`inputs`]: the one random input generator, the seed of a randomized run
//!   (`MIRAGE_TEST_SEED`), and the input ranges of the golden and coverage programs.
//! - [`rounding`]: the reference interpreter with the device's rounding of stored
//!   intermediates (what correct kernels compute).
//! - [`mutants`]: single-edit mutants of µGraphs by mutation kind, classified by the f32
//!   reference: the verifier's corpus.
//!
//! The comparison lives here rather than in `mirage-runtime`: everything that compares a result
//! also runs the reference interpreter (`mirage::reference`) to have something to compare with,
//! so it links the compiler anyway, and the runtime users ship stays free of test code.

pub mod benchmarks;
pub mod compare;
pub mod inputs;
pub mod mutants;
pub mod programs;
pub mod random;
pub mod rounding;
