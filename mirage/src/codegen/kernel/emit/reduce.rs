//! Reductions of a shared-memory tile along one dim, by the strategy the plan chose: sums,
//! maxima, and argmax (a value and its position travel together).

use super::super::planner::{ReduceStrategy, Reduction, Tile};
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
        };
        match strategy {
            ReduceStrategy::PerThread => self.reduce_per_thread(indent, &p),
            ReduceStrategy::SplitWarps { warps_per_output } => self.reduce_split_warps(indent, &p, warps_per_output),
            ReduceStrategy::LaneGroups { lanes } => self.reduce_lane_groups(indent, &p, lanes),
            ReduceStrategy::PerWarp => self.reduce_per_warp(indent, &p),
        }
    }

    fn reduce_per_thread(&mut self, indent: usize, p: &Parts) {
        let close = self.open_strided(indent, "o", "tid", p.outputs, self.plan.threads);
        let inner = indent + close;
        self.line(inner, p.combine.declare());
        self.line(inner, &format!("for (int r = {}; r < {}; r += {}) {{ {} }}", p.start, p.extent, p.width, p.step));
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
        self.line(
            indent + 2,
            &format!(
                "for (int r = {} + (part * 32 + lane) * {}; r < {}; r += {}) {{ {} }}",
                p.start,
                p.width,
                p.extent,
                32 * wpo * p.width,
                p.step
            ),
        );
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
        self.line(
            indent + 2,
            &format!(
                "for (int r = {} + part * {}; r < {}; r += {}) {{ {} }}",
                p.start,
                p.width,
                p.extent,
                l * p.width,
                p.step
            ),
        );
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
        self.line(
            inner,
            &format!(
                "for (int r = {} + lane * {}; r < {}; r += {}) {{ {} }}",
                p.start,
                p.width,
                p.extent,
                32 * p.width,
                p.step
            ),
        );
        self.line(inner, p.combine.warp());
        self.line(inner, &format!("if (lane == 0) {{ {} }}", p.store));
        self.close(indent, close);
    }
}
