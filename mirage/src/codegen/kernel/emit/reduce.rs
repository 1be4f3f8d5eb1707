//! Reductions of a shared-memory tile along one dim, by the strategy the plan chose: sums,
//! maxima, and argmax (a value and its position travel together).

use super::super::planner::{ReduceStrategy, Reduction, Tile, element_bytes};
use super::Emitter;
use super::expr::unflatten;

/// How reduced elements combine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Combine {
    /// Addition.
    Sum,
    /// Maximum.
    Max,
    /// The position of the maximum (`mirage::argmax_beats`: NaN above every number, ties to the
    /// lowest position): the state is the best value `v` and its position `k`, the result `k`.
    ArgMax,
}

impl Combine {
    /// The declaration of the running state.
    fn declare(self) -> &'static str {
        match self {
            Combine::Sum => "float v = 0.0f;",
            Combine::Max => "float v = __int_as_float(0xff800000);",
            Combine::ArgMax => "float v = __int_as_float(0xff800000); int k = 0x7fffffff;",
        }
    }

    fn apply(self, a: &str, b: &str) -> String {
        match self {
            Combine::Sum => format!("{a} + {b}"),
            Combine::Max | Combine::ArgMax => format!("fmaxf({a}, {b})"),
        }
    }

    /// The statement folding element `x` at reduced index `r` into the state.
    fn step(self, x: &str) -> String {
        match self {
            Combine::Sum | Combine::Max => format!("v = {};", self.apply("v", x)),
            Combine::ArgMax => {
                format!("const float y = {x}; if (mirage::argmax_beats(y, r, v, k)) {{ v = y; k = r; }}")
            }
        }
    }

    /// The statement combining the states of a warp's lanes.
    fn warp(self) -> &'static str {
        match self {
            Combine::Sum => "v = mirage::warp_sum(v);",
            Combine::Max => "v = mirage::warp_max(v);",
            Combine::ArgMax => "mirage::warp_argmax(v, k);",
        }
    }

    fn shuffle(self, off: usize) -> String {
        match self {
            Combine::Sum => format!("v += __shfl_xor_sync(0xffffffffu, v, {off});"),
            Combine::Max => format!("v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, {off}));"),
            Combine::ArgMax => format!("mirage::shfl_argmax(v, k, {off});"),
        }
    }

    /// The reduced value a store writes.
    fn result(self) -> &'static str {
        match self {
            Combine::Sum | Combine::Max => "v",
            Combine::ArgMax => "(float)k",
        }
    }
}

/// The text pieces every strategy uses.
struct Parts {
    outputs: usize,
    extent: usize,
    width: usize,
    /// The first reduced index of output `o`.
    start: String,
    /// The statement folding the mapped element at reduced index `r` into the state.
    step: String,
    /// The store statement of `v` for output `o`.
    store: String,
    combine: Combine,
    /// Where each output's elements lie contiguously in 16-byte runs: the loads by vectors.
    vector: Option<VectorFold>,
}

/// A reduction that reads 16 bytes at a time: `lanes` elements of type `ctype` from the tile
/// address `at` (a C expression of the output `o` and the run's first reduced index `r0`), each
/// folded by `step` (which reads element `u` of the array `xs`).
struct VectorFold {
    lanes: usize,
    ctype: &'static str,
    at: String,
    step: String,
}

/// Elements of a 16-byte vector of `src`'s element type along `dim`, when a reduction to one
/// value per output (`width` 1) of `extent` elements, unmasked, not an argmax and not of
/// integers, can load its operand 16 bytes at a time: every run of that many elements starting
/// at a multiple of it contiguous and 16-byte aligned ([`Tile::runs_aligned`]).
fn vector_lanes(src: &Tile, dim: usize, width: usize, extent: usize, masked: bool, combine: Combine) -> Option<usize> {
    if src.ctype == "int" {
        return None;
    }
    let lanes = 16 / element_bytes(src.ctype)?;
    let usable = width == 1
        && !masked
        && combine != Combine::ArgMax
        && extent.is_multiple_of(lanes)
        && src.runs_aligned(dim, lanes);
    usable.then_some(lanes)
}

impl Emitter<'_> {
    /// Reduction `r` of `src` with strided grouping; `map` transforms each element (`{x}`);
    /// `store` is a statement template with `{o}` (flat output index) and `{v}` (the reduced
    /// value: the position, as a float, for an argmax). `mask`, a condition on the reduced index
    /// `r`, skips the elements it excludes (the padding of a runtime-sized dim: the reduction's
    /// identity there).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn reduce(
        &mut self,
        indent: usize,
        r: Reduction,
        src: &Tile,
        map: &str,
        combine: Combine,
        store: &str,
        mask: Option<String>,
    ) {
        let Reduction { dim, width, strategy } = r;
        let mut out_shape = src.shape.clone();
        out_shape[dim] = width;
        let idx = unflatten("o", &out_shape);
        let mut sidx = idx.clone();
        sidx[dim] = "r".to_string();
        let x = map.replace("{x}", &src.load(&sidx));
        let vector = vector_lanes(src, dim, width, src.shape[dim], mask.is_some(), combine).map(|lanes| {
            let mut vidx = idx.clone();
            vidx[dim] = "r0".to_string();
            VectorFold {
                lanes,
                ctype: src.ctype,
                at: format!("{}[{}]", src.var, src.offset_expr(&vidx)),
                step: combine.step(&map.replace("{x}", &src.as_f32("xs[u]"))),
            }
        });
        let p = Parts {
            outputs: out_shape.iter().product(),
            extent: src.shape[dim],
            width,
            start: idx[dim].clone(),
            step: match mask {
                Some(m) => format!("if ({m}) {{ {} }}", combine.step(&x)),
                None => combine.step(&x),
            },
            store: store.replace("{o}", "o").replace("{v}", combine.result()),
            combine,
            vector,
        };
        match strategy {
            ReduceStrategy::PerThread => self.reduce_per_thread(indent, &p),
            ReduceStrategy::SplitWarps { warps_per_output } => self.reduce_split_warps(indent, &p, warps_per_output),
            ReduceStrategy::LaneGroups { lanes } => self.reduce_lane_groups(indent, &p, lanes),
            ReduceStrategy::PerWarp => self.reduce_per_warp(indent, &p),
        }
    }

    /// The loop folding output `o`'s share of elements into the state: the share of thread
    /// `lane` (a C expression; `None`: the thread takes every element) among `lanes` sharing the
    /// output, element by element or, where the reduction allows, 16-byte vector by vector.
    fn fold(&mut self, indent: usize, p: &Parts, lane: Option<&str>, lanes: usize) {
        let first = |unit: usize| match lane {
            Some(l) => format!("{} + {l} * {unit}", p.start),
            None => p.start.clone(),
        };
        let Some(v) = &p.vector else {
            let line = format!(
                "for (int r = {}; r < {}; r += {}) {{ {} }}",
                first(p.width),
                p.extent,
                lanes * p.width,
                p.step
            );
            self.line(indent, &line);
            return;
        };
        let n = v.lanes;
        self.line(indent, &format!("for (int r0 = {}; r0 < {}; r0 += {}) {{", first(n), p.extent, lanes * n));
        self.line(indent + 1, &format!("alignas(16) {} xs[{n}];", v.ctype));
        self.line(indent + 1, &format!("*reinterpret_cast<uint4*>(xs) = *reinterpret_cast<const uint4*>(&{});", v.at));
        self.line(indent + 1, "#pragma unroll");
        self.line(indent + 1, &format!("for (int u = 0; u < {n}; ++u) {{ {} }}", v.step));
        self.line(indent, "}");
    }

    fn reduce_per_thread(&mut self, indent: usize, p: &Parts) {
        let close = self.open_strided(indent, "o", "tid", p.outputs, self.plan.threads);
        let inner = indent + close;
        self.line(inner, p.combine.declare());
        self.fold(inner, p, None, 1);
        self.line(inner, &p.store);
        self.close(indent, close);
    }

    fn reduce_split_warps(&mut self, indent: usize, p: &Parts, wpo: usize) {
        let outputs = p.outputs;
        self.line(indent, "{");
        let warps = self.plan.warps;
        if p.combine == Combine::ArgMax {
            // The positions need a scratch of their own beside the values (static shared memory
            // the plan counts for every split-warp argmax).
            self.line(indent + 1, &format!("__shared__ float red_v[{warps}]; __shared__ int red_k[{warps}];"));
        }
        self.line(indent + 1, &format!("const int o = warp / {wpo}, part = warp % {wpo};"));
        self.line(indent + 1, p.combine.declare());
        self.line(indent + 1, &format!("if (o < {outputs}) {{"));
        self.fold(indent + 2, p, Some("(part * 32 + lane)"), 32 * wpo);
        self.line(indent + 1, "}");
        self.line(indent + 1, p.combine.warp());
        if p.combine == Combine::ArgMax {
            self.line(indent + 1, "if (lane == 0) { red_v[warp] = v; red_k[warp] = k; }");
        } else {
            self.line(indent + 1, "if (lane == 0) red[warp] = v;");
        }
        self.line(indent + 1, "__syncthreads();");
        self.line(indent + 1, &format!("if (tid < {outputs}) {{"));
        if p.combine == Combine::ArgMax {
            self.line(indent + 2, &format!("const int o = tid; float v = red_v[o * {wpo}]; int k = red_k[o * {wpo}];"));
            self.line(
                indent + 2,
                &format!(
                    "for (int q = 1; q < {wpo}; ++q) {{ if (mirage::argmax_beats(red_v[o * {wpo} + q], red_k[o * {wpo} + q], v, k)) {{ v = red_v[o * {wpo} + q]; k = red_k[o * {wpo} + q]; }} }}"
                ),
            );
        } else {
            self.line(indent + 2, &format!("const int o = tid; float v = red[o * {wpo}];"));
            self.line(
                indent + 2,
                &format!(
                    "for (int q = 1; q < {wpo}; ++q) {{ v = {}; }}",
                    p.combine.apply("v", &format!("red[o * {wpo} + q]"))
                ),
            );
        }
        self.line(indent + 2, &p.store);
        self.line(indent + 1, "}");
        self.line(indent, "}");
    }

    fn reduce_lane_groups(&mut self, indent: usize, p: &Parts, l: usize) {
        let outputs = p.outputs;
        self.line(indent, "{");
        self.line(indent + 1, &format!("const int o = tid / {l}, part = tid % {l};"));
        self.line(indent + 1, p.combine.declare());
        self.line(indent + 1, &format!("if (o < {outputs}) {{"));
        self.fold(indent + 2, p, Some("part"), l);
        self.line(indent + 1, "}");
        let mut off = l / 2;
        while off >= 1 {
            self.line(indent + 1, &p.combine.shuffle(off));
            off /= 2;
        }
        self.line(indent + 1, &format!("if (o < {outputs} && part == 0) {{ {} }}", p.store));
        self.line(indent, "}");
    }

    fn reduce_per_warp(&mut self, indent: usize, p: &Parts) {
        let close = self.open_strided(indent, "o", "warp", p.outputs, self.plan.warps);
        let inner = indent + close;
        self.line(inner, p.combine.declare());
        self.fold(inner, p, Some("lane"), 32);
        self.line(inner, p.combine.warp());
        self.line(inner, &format!("if (lane == 0) {{ {} }}", p.store));
        self.close(indent, close);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::DType;

    /// A shared-memory tile of `shape` with element `strides` at byte `offset`.
    fn tile(dtype: DType, ctype: &'static str, shape: &[usize], strides: &[usize], offset: usize) -> Tile {
        let bytes = shape.iter().zip(strides).map(|(n, s)| (n - 1) * s).sum::<usize>() + 1;
        Tile {
            var: "t0".into(),
            ctype,
            dtype,
            shape: shape.to_vec(),
            strides: strides.to_vec(),
            offset,
            bytes: bytes * dtype.size_bytes(),
            pipelined: false,
        }
    }

    #[test]
    fn contiguous_aligned_rows_fold_by_16_byte_vectors() {
        let bf16 = tile(DType::Bf16, "__nv_bfloat16", &[16, 448], &[456, 1], 0);
        assert_eq!(vector_lanes(&bf16, 1, 1, 448, false, Combine::Sum), Some(8));
        assert_eq!(vector_lanes(&bf16, 1, 1, 448, false, Combine::Max), Some(8));
        let f32 = tile(DType::F32, "float", &[1, 1, 128], &[128, 128, 1], 70400);
        assert_eq!(vector_lanes(&f32, 2, 1, 128, false, Combine::Sum), Some(4));
    }

    #[test]
    fn anything_a_vector_could_misread_folds_element_by_element() {
        let ok = tile(DType::Bf16, "__nv_bfloat16", &[16, 448], &[456, 1], 0);
        // A masked reduction (runtime-sized padding), an argmax, a strided grouping.
        assert_eq!(vector_lanes(&ok, 1, 1, 448, true, Combine::Sum), None);
        assert_eq!(vector_lanes(&ok, 1, 1, 448, false, Combine::ArgMax), None);
        assert_eq!(vector_lanes(&ok, 1, 2, 448, false, Combine::Sum), None);
        // Reduced along a strided dim.
        assert_eq!(vector_lanes(&ok, 0, 1, 16, false, Combine::Sum), None);
        // Rows 2 elements apart in bytes not a multiple of 16, a tile off a 16-byte boundary,
        // a row not a whole number of vectors.
        let pitch = tile(DType::Bf16, "__nv_bfloat16", &[16, 448], &[452, 1], 0);
        assert_eq!(vector_lanes(&pitch, 1, 1, 448, false, Combine::Sum), None);
        let offset = tile(DType::Bf16, "__nv_bfloat16", &[16, 448], &[456, 1], 8);
        assert_eq!(vector_lanes(&offset, 1, 1, 448, false, Combine::Sum), None);
        let short = tile(DType::Bf16, "__nv_bfloat16", &[16, 12], &[16, 1], 0);
        assert_eq!(vector_lanes(&short, 1, 1, 12, false, Combine::Sum), None);
        // A pipelined tile whose stages are not 16-byte multiples apart.
        let mut staged = ok.clone();
        staged.pipelined = true;
        staged.bytes = 14600;
        assert_eq!(vector_lanes(&staged, 1, 1, 448, false, Combine::Sum), None);
        staged.bytes = 14592;
        assert_eq!(vector_lanes(&staged, 1, 1, 448, false, Combine::Sum), Some(8));
        // Integers are not folded by this path.
        let ints = tile(DType::I32, "int", &[1, 64], &[64, 1], 0);
        assert_eq!(vector_lanes(&ints, 1, 1, 64, false, Combine::Sum), None);
    }
}
