//! Random well-typed `#[mugraph]` programs, seeded and reproducible: the same seed gives the same
//! source text on every machine (the generator is [`StdRng`], a fixed algorithm).
//!
//! A program has one element type (f16, bf16 or f32), a rank from 1 to 4 and a result shape of
//! odd and even sizes (1 included); its body is a tree of the language's operators over fresh or
//! shared parameters, some subtrees bound by `let` (a few with a type annotation, some used
//! twice), sometimes with a second result:
//!
//! - element-wise functions (`silu`, `gelu`, `gelu_tanh`, `relu`, `tanh`, `sigmoid`, `clamp`,
//!   `square`, `exp`, `sqrt`, `recip`) and unary `-`;
//! - scalar arithmetic (`x * c`, `c * x`, `x + c`, `x - c`, `c - x`, `x / c`);
//! - `+ - * /` between tensors, one side broadcast over size-1 dims;
//! - reductions (`sum`, `max`) broadcast back into a larger expression;
//! - matmuls (batched at rank 3 and 4, chained, column-major weights through `#[strides]`);
//! - `rms_norm`, `rms_norm_weighted`, `layer_norm`, `softmax` and `concat`.
//!
//! Every value stays in a moderate range for inputs in [-1, 1) ([`INPUT_RANGE`]), so the f16
//! and bf16 kernels can be compared with the f32 reference: the operators with a restricted
//! domain or a fast growth get a bounded operand (`exp(tanh(e))`, `sqrt(square(e) + 0.5)`,
//! `recip(square(e) + 1.0)`, `a / (square(b) + 1.0)`, `softmax(tanh(e), d)`, `square(tanh(e))`),
//! and sums are scaled by the reciprocal of their length.
//!
//! ```
//! use mirage::testing::random::random_program;
//! let p = random_program(7);
//! assert_eq!(p.source, random_program(7).source);
//! assert_eq!(mirage::lower::lower_source(&p.source).unwrap()[0].name, p.name);
//! ```

use std::ops::Range;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The range every input of a random program is drawn from.
pub const INPUT_RANGE: Range<f32> = -1.0..1.0;

/// Most programs of one run (CI's or the GPU pack's) whose f32 reference is not finite on any
/// draw of inputs ([`crate::testing::inputs::finite_reference`]): such a program is printed and
/// counted apart, and a run with more fails (the generator bounds every value for inputs in
/// [`INPUT_RANGE`], so a program without a finite reference is a generator bug to fix, not a
/// mismatch).
pub const MAX_WITHOUT_FINITE_REFERENCE: usize = 2;

/// Most elements of any tensor of a random program (keeps the reference and the search fast).
const MAX_ELEMENTS: usize = 4096;

/// Dim sizes drawn from: odd, even, powers of two and their neighbours, and 1.
const SIZES: &[usize] = &[1, 2, 3, 5, 7, 8, 12, 16, 17, 24, 31, 32, 33, 48, 64, 65, 96, 128];

/// A generated program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RandomProgram {
    /// The seed it was generated from.
    pub seed: u64,
    /// The function's name (`random_<seed>`).
    pub name: String,
    /// The `#[mugraph]` function, a complete item.
    pub source: String,
}

/// The program of `seed`.
pub fn random_program(seed: u64) -> RandomProgram {
    let mut g = Gen::new(seed);
    let name = format!("random_{seed}");
    let source = g.program(&name);
    RandomProgram { seed, name, source }
}

/// A kernels file holding the programs of `seeds` (with the prelude import a user's file has).
pub fn random_programs_file(seeds: impl IntoIterator<Item = u64>) -> String {
    let mut file =
        String::from("//! Random #[mugraph] programs (mirage::testing::random).\n\nuse mirage::prelude::*;\n");
    for seed in seeds {
        file.push('\n');
        file.push_str(&random_program(seed).source);
    }
    file
}

/// The generator's state for one program.
struct Gen {
    rng: StdRng,
    dtype: &'static str,
    /// Parameters: name, shape, strides (`None`: row-major).
    params: Vec<(String, Vec<usize>, Option<Vec<usize>>)>,
    /// `let` bindings in order: name, shape, text of the statement.
    lets: Vec<(String, Vec<usize>, String)>,
    /// Operators still to place.
    budget: usize,
}

impl Gen {
    fn new(seed: u64) -> Gen {
        // Mixed so that neighbouring seeds do not start from neighbouring generator states.
        let mut rng = StdRng::seed_from_u64(seed ^ 0x6d69_7261_6765_2d72);
        let dtype = ["f16", "bf16", "f32"][rng.random_range(0..3)];
        let budget = rng.random_range(2..7);
        Gen { rng, dtype, params: Vec::new(), lets: Vec::new(), budget }
    }

    fn chance(&mut self, p: f64) -> bool {
        self.rng.random_bool(p)
    }

    fn size(&mut self) -> usize {
        SIZES[self.rng.random_range(0..SIZES.len())]
    }

    /// A shape of `rank` dims of at most [`MAX_ELEMENTS`] / `room` elements.
    fn shape(&mut self, rank: usize, room: usize) -> Vec<usize> {
        loop {
            let s: Vec<usize> = (0..rank).map(|_| self.size()).collect();
            if s.iter().product::<usize>() * room <= MAX_ELEMENTS {
                return s;
            }
        }
    }

    fn ty(&self, shape: &[usize]) -> String {
        let dims: Vec<String> = shape.iter().map(ToString::to_string).collect();
        format!("Tensor<{}, {}>", self.dtype, dims.join(", "))
    }

    fn program(&mut self, name: &str) -> String {
        let rank = self.rng.random_range(1..5);
        let out = self.shape(rank, 2);
        let mut results = vec![(self.expr(&out, 3), out.clone())];
        if self.chance(0.2) {
            let second = if self.chance(0.5) { out.clone() } else { self.shape(rank, 2) };
            self.budget = self.rng.random_range(1..4);
            results.push((self.expr(&second, 2), second));
        }
        let params: Vec<String> = self
            .params
            .iter()
            .map(|(n, s, strides)| {
                let attr = strides.as_ref().map_or(String::new(), |st| {
                    format!("#[strides({})] ", st.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))
                });
                format!("{attr}{n}: {}", self.ty(s))
            })
            .collect();
        let (ret, result) = if results.len() == 1 {
            (self.ty(&results[0].1), results[0].0.clone())
        } else {
            let tys: Vec<String> = results.iter().map(|r| self.ty(&r.1)).collect();
            let exprs: Vec<&str> = results.iter().map(|r| r.0.as_str()).collect();
            (format!("({})", tys.join(", ")), format!("({})", exprs.join(", ")))
        };
        let mut text = format!("#[mugraph]\npub fn {name}({}) -> {ret} {{\n", params.join(", "));
        for (_, _, stmt) in &self.lets {
            text.push_str(&format!("    {stmt}\n"));
        }
        text.push_str(&format!("    {result}\n}}\n"));
        text
    }

    /// A new parameter of `shape` (column-major sometimes when `column_major_ok`).
    fn param(&mut self, shape: &[usize], column_major_ok: bool) -> String {
        let name = format!("p{}", self.params.len());
        let strides = (column_major_ok && shape.len() == 2 && self.chance(0.3)).then(|| vec![1, shape[0]]);
        self.params.push((name.clone(), shape.to_vec(), strides));
        name
    }

    /// A leaf of `shape`: an existing parameter or binding of that shape, or a new parameter.
    fn leaf(&mut self, shape: &[usize]) -> String {
        let existing: Vec<String> = self
            .params
            .iter()
            .filter(|p| p.1 == shape && p.2.is_none())
            .map(|p| p.0.clone())
            .chain(self.lets.iter().filter(|l| l.1 == shape).map(|l| l.0.clone()))
            .collect();
        if !existing.is_empty() && self.chance(0.3) {
            return existing[self.rng.random_range(0..existing.len())].clone();
        }
        self.param(shape, false)
    }

    /// An expression of `shape`, at most `depth` operators deep.
    fn expr(&mut self, shape: &[usize], depth: usize) -> String {
        if depth == 0 || self.budget == 0 {
            return self.leaf(shape);
        }
        self.budget -= 1;
        let rank = shape.len();
        let e = loop {
            let pick = self.rng.random_range(0..9);
            let text = match pick {
                0 => self.unary(shape, depth),
                1 => self.scalar(shape, depth),
                2 | 3 => self.binary(shape, depth),
                4 if shape.contains(&1) => self.reduction(shape, depth),
                5 if rank >= 2 => self.matmul(shape, depth),
                6 => self.norm(shape, depth),
                7 if shape.iter().any(|&d| d >= 2) => self.concat(shape, depth),
                8 => self.broadcast_reduction(shape, depth),
                _ => continue,
            };
            break text;
        };
        if self.chance(0.3) { self.bind(shape, e) } else { e }
    }

    /// Binds `e` to a new `let` (annotated sometimes) and returns its name.
    fn bind(&mut self, shape: &[usize], e: String) -> String {
        let name = format!("t{}", self.lets.len());
        let annotation = if self.chance(0.3) { format!(": {}", self.ty(shape)) } else { String::new() };
        let stmt = format!("let {name}{annotation} = {e};");
        self.lets.push((name.clone(), shape.to_vec(), stmt));
        name
    }

    fn unary(&mut self, shape: &[usize], depth: usize) -> String {
        let a = self.expr(shape, depth - 1);
        match self.rng.random_range(0..12) {
            0 => format!("silu({a})"),
            1 => format!("gelu({a})"),
            2 => format!("gelu_tanh({a})"),
            3 => format!("relu({a})"),
            4 => format!("tanh({a})"),
            5 => format!("{a}.sigmoid()"),
            6 => format!("clamp({a}, -0.25, 0.5)"),
            7 => format!("square(tanh({a}))"),
            8 => format!("exp(tanh({a}))"),
            9 => format!("sqrt(square({a}) + 0.5)"),
            10 => format!("recip(square({a}) + 1.0)"),
            _ => format!("-({a})"),
        }
    }

    fn scalar(&mut self, shape: &[usize], depth: usize) -> String {
        let a = self.expr(shape, depth - 1);
        match self.rng.random_range(0..6) {
            0 => format!("({a} * 0.5)"),
            1 => format!("(1.5 * {a})"),
            2 => format!("({a} + 0.25)"),
            3 => format!("({a} - 0.75)"),
            4 => format!("(0.5 - {a})"),
            _ => format!("({a} / 2.0)"),
        }
    }

    /// `shape` with some dims (maybe none) set to 1.
    fn broadcast_of(&mut self, shape: &[usize]) -> Vec<usize> {
        shape.iter().map(|&d| if self.chance(0.35) { 1 } else { d }).collect()
    }

    fn binary(&mut self, shape: &[usize], depth: usize) -> String {
        let narrow = self.broadcast_of(shape);
        let (sa, sb) = if self.chance(0.5) { (shape.to_vec(), narrow) } else { (narrow, shape.to_vec()) };
        let a = self.expr(&sa, depth - 1);
        let b = self.expr(&sb, depth - 1);
        match self.rng.random_range(0..4) {
            0 => format!("({a} + {b})"),
            1 => format!("({a} - {b})"),
            2 => format!("({a} * {b})"),
            _ => format!("({a} / (square({b}) + 1.0))"),
        }
    }

    /// A reduction into `shape` along one of its size-1 dims, scaled by the reciprocal of the
    /// reduced length when it is a sum.
    fn reduction(&mut self, shape: &[usize], depth: usize) -> String {
        let ones: Vec<usize> = (0..shape.len()).filter(|&d| shape[d] == 1).collect();
        let dim = ones[self.rng.random_range(0..ones.len())];
        let room: usize = shape.iter().product();
        let mut src = shape.to_vec();
        src[dim] = loop {
            let n = self.size();
            if n * room <= MAX_ELEMENTS {
                break n;
            }
        };
        let a = self.expr(&src, depth - 1);
        if self.chance(0.3) {
            format!("max({a}, {dim})")
        } else {
            format!("(sum({a}, {dim}) * {})", float(1.0 / src[dim] as f64))
        }
    }

    /// `e op reduce(e', d)`: a reduction broadcast back over the dim it reduced.
    fn broadcast_reduction(&mut self, shape: &[usize], depth: usize) -> String {
        let dim = self.rng.random_range(0..shape.len());
        let a = self.expr(shape, depth - 1);
        let src = if self.chance(0.5) { a.clone() } else { self.expr(shape, depth - 1) };
        let n = shape[dim];
        let r = format!("{src}.sum({dim})");
        if self.chance(0.5) {
            format!("({a} - {r} * {})", float(1.0 / n as f64))
        } else {
            format!("({a} * ({r} * {}))", float(1.0 / n as f64))
        }
    }

    fn matmul(&mut self, shape: &[usize], depth: usize) -> String {
        let r = shape.len();
        let k = loop {
            let k = self.size();
            if k * shape[..r - 1].iter().product::<usize>() <= MAX_ELEMENTS
                && k * shape[..r - 2].iter().product::<usize>() * shape[r - 1] <= MAX_ELEMENTS
            {
                break k;
            }
        };
        let mut sa = shape.to_vec();
        sa[r - 1] = k;
        let mut sb = shape.to_vec();
        sb[r - 2] = k;
        let a = self.expr(&sa, depth - 1);
        let b = if self.chance(0.7) { self.param(&sb, true) } else { self.expr(&sb, depth - 1) };
        if self.chance(0.5) { format!("{a}.matmul({b})") } else { format!("matmul({a}, {b})") }
    }

    fn norm(&mut self, shape: &[usize], depth: usize) -> String {
        let a = self.expr(shape, depth - 1);
        // Over a last dim of one element the norms degenerate: `layer_norm` is identically zero
        // and the eps-free `rms_norm` of that zero is 0/0 (seed 1163 generated
        // `rms_norm(layer_norm(p0, 1e-5))` over [24, 65, 1, 1]: NaN for every input). Only the
        // softmax form is drawn there.
        let pick = if shape[shape.len() - 1] == 1 { 4 } else { self.rng.random_range(0..5) };
        match pick {
            0 => format!("rms_norm({a})"),
            1 => {
                let mut w = vec![1; shape.len()];
                w[shape.len() - 1] = shape[shape.len() - 1];
                let w = self.param(&w, false);
                format!("rms_norm_weighted({a}, {w}, 0.000001)")
            }
            2 => format!("layer_norm({a}, 0.00001)"),
            _ => {
                let dim = self.rng.random_range(0..shape.len());
                format!("softmax(tanh({a}), {dim})")
            }
        }
    }

    fn concat(&mut self, shape: &[usize], depth: usize) -> String {
        let dims: Vec<usize> = (0..shape.len()).filter(|&d| shape[d] >= 2).collect();
        let dim = dims[self.rng.random_range(0..dims.len())];
        let left = self.rng.random_range(1..shape[dim]);
        let (mut sa, mut sb) = (shape.to_vec(), shape.to_vec());
        sa[dim] = left;
        sb[dim] = shape[dim] - left;
        let a = self.expr(&sa, depth - 1);
        let b = self.expr(&sb, depth - 1);
        format!("concat({a}, {b}, {dim})")
    }
}

/// A float literal the DSL accepts (always with a decimal point).
fn float(v: f64) -> String {
    let s = format!("{v}");
    if s.contains('.') || s.contains('e') { s } else { format!("{s}.0") }
}
