//! Reductions of a shared-memory tile along one dim, by the strategy the plan chose.

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
}

impl Combine {
    fn init(self) -> &'static str {
        match self {
            Combine::Sum => "0.0f",
            Combine::Max => "__int_as_float(0xff800000)",
        }
    }

    fn apply(self, a: &str, b: &str) -> String {
        match self {
            Combine::Sum => format!("{a} + {b}"),
            Combine::Max => format!("fmaxf({a}, {b})"),
        }
    }

    fn warp_op(self) -> &'static str {
        match self {
            Combine::Sum => "mirage::warp_sum",
            Combine::Max => "mirage::warp_max",
        }
    }

    fn shuffle(self, off: usize) -> String {
        match self {
            Combine::Sum => format!("v += __shfl_xor_sync(0xffffffffu, v, {off});"),
            Combine::Max => format!("v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, {off}));"),
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
    /// `v` combined with the mapped element at reduced index `r`.
    step: String,
    /// The store statement of `v` for output `o`.
    store: String,
    combine: Combine,
}

impl Emitter<'_> {
    /// Reduction `r` of `src` with strided grouping; `map` transforms each element (`{x}`);
    /// `store` is a statement template with `{o}` (flat output index) and `{v}` (the reduced
    /// value).
    pub(super) fn reduce(&mut self, indent: usize, r: Reduction, src: &Tile, map: &str, combine: Combine, store: &str) {
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
            step: combine.apply("v", &x),
            store: store.replace("{o}", "o").replace("{v}", "v"),
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
        self.line(indent, &format!("for (int o = tid; o < {}; o += {}) {{", p.outputs, self.plan.threads));
        self.line(indent + 1, &format!("float v = {};", p.combine.init()));
        self.line(
            indent + 1,
            &format!("for (int r = {}; r < {}; r += {}) {{ v = {}; }}", p.start, p.extent, p.width, p.step),
        );
        self.line(indent + 1, &p.store);
        self.line(indent, "}");
    }

    fn reduce_split_warps(&mut self, indent: usize, p: &Parts, wpo: usize) {
        let outputs = p.outputs;
        self.line(indent, "{");
        self.line(indent + 1, &format!("const int o = warp / {wpo}, part = warp % {wpo};"));
        self.line(indent + 1, &format!("float v = {};", p.combine.init()));
        self.line(indent + 1, &format!("if (o < {outputs}) {{"));
        self.line(
            indent + 2,
            &format!(
                "for (int r = {} + (part * 32 + lane) * {}; r < {}; r += {}) {{ v = {}; }}",
                p.start,
                p.width,
                p.extent,
                32 * wpo * p.width,
                p.step
            ),
        );
        self.line(indent + 1, "}");
        self.line(indent + 1, &format!("v = {}(v);", p.combine.warp_op()));
        self.line(indent + 1, "if (lane == 0) red[warp] = v;");
        self.line(indent + 1, "__syncthreads();");
        self.line(indent + 1, &format!("if (tid < {outputs}) {{"));
        self.line(indent + 2, &format!("const int o = tid; float v = red[o * {wpo}];"));
        self.line(
            indent + 2,
            &format!(
                "for (int q = 1; q < {wpo}; ++q) {{ v = {}; }}",
                p.combine.apply("v", &format!("red[o * {wpo} + q]"))
            ),
        );
        self.line(indent + 2, &p.store);
        self.line(indent + 1, "}");
        self.line(indent, "}");
    }

    fn reduce_lane_groups(&mut self, indent: usize, p: &Parts, l: usize) {
        let outputs = p.outputs;
        self.line(indent, "{");
        self.line(indent + 1, &format!("const int o = tid / {l}, part = tid % {l};"));
        self.line(indent + 1, &format!("float v = {};", p.combine.init()));
        self.line(indent + 1, &format!("if (o < {outputs}) {{"));
        self.line(
            indent + 2,
            &format!(
                "for (int r = {} + part * {}; r < {}; r += {}) {{ v = {}; }}",
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
        self.line(indent, &format!("for (int o = warp; o < {}; o += {}) {{", p.outputs, self.plan.warps));
        self.line(indent + 1, &format!("float v = {};", p.combine.init()));
        self.line(
            indent + 1,
            &format!(
                "for (int r = {} + lane * {}; r < {}; r += {}) {{ v = {}; }}",
                p.start,
                p.width,
                p.extent,
                32 * p.width,
                p.step
            ),
        );
        self.line(indent + 1, &format!("v = {}(v);", p.combine.warp_op()));
        self.line(indent + 1, &format!("if (lane == 0) {{ {} }}", p.store));
        self.line(indent, "}");
    }
}
