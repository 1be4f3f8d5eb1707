//! The bodies of block operators outside element-wise groups: one function per operator.

use crate::ir::{BinaryOp, BlockOp, TensorRef, UnaryOp};

use super::super::planner::{MatmulPlan, Reduction};
use super::Emitter;
use super::expr::{binary_expr, float_lit, unary_expr, unflatten};
use super::mma::TiledOut;
use super::reduce::Combine;

impl Emitter<'_> {
    /// Emits operator `i` (in-loop, hoisted or after the loop) where its plan says: row-owned
    /// matmuls and unary functions of register values on fragments, the rest on shared-memory
    /// tiles. Inputs, savers and accumulators have their own emitters.
    pub(super) fn operator(&mut self, indent: usize, i: usize) {
        let plan = self.plan;
        let nd = &self.bg().nodes()[i];
        match &nd.op {
            BlockOp::Matmul => self.matmul(indent, i),
            BlockOp::Unary { op } if plan.registers.reg[i] => {
                let x = nd.inputs[0].node;
                self.unary_regs(indent, op, plan.register_bands(x), x, i);
            }
            BlockOp::Unary { op } => self.unary(indent, i, op),
            BlockOp::Binary { op } => self.binary(indent, i, *op),
            BlockOp::ReduceSum { .. } | BlockOp::ReduceSumTo { .. } => self.reduction(indent, i, Combine::Sum),
            BlockOp::ReduceMax { .. } => self.reduction(indent, i, Combine::Max),
            BlockOp::RmsNorm { eps } => self.rms_norm(indent, i, eps.0),
            BlockOp::Concat { dim } => self.concat(indent, i, *dim),
            BlockOp::RunningMax { .. } => self.running_max(indent, i),
            BlockOp::Rope { layout } => self.rope(indent, i, *layout),
            BlockOp::Gather { table, imap } => self.gather(indent, i, *table, imap),
            BlockOp::Argmax { .. } => self.reduction(indent, i, Combine::ArgMax),
            BlockOp::Input { .. } | BlockOp::Output { .. } | BlockOp::Accum { .. } => {}
        }
    }

    /// Matmul `i` as planned.
    fn matmul(&mut self, indent: usize, i: usize) {
        let plan = self.plan;
        let inputs = &self.bg().nodes()[i].inputs;
        match plan.matmuls[i].as_ref().expect("every matmul is planned") {
            MatmulPlan::Rows(p) => self.matmul_rows(indent, i, p),
            MatmulPlan::Fma(p) => {
                self.matmul_fma(indent, p, self.tile(inputs[0]), self.tile(inputs[1]), plan.out_tile(i))
            }
            MatmulPlan::Vector(p) => self.matmul_vector(indent, i, p, self.tile(inputs[0]), self.tile(inputs[1])),
            MatmulPlan::Tiled(p) => {
                let out = if p.accumulates { TiledOut::Accumulator(i) } else { TiledOut::Smem(plan.out_tile(i)) };
                self.matmul_tiled(indent, p, self.tile(inputs[0]), self.tile(inputs[1]), out);
            }
        }
    }

    /// The mask of reduction `i` over `dim` of its operand: the condition on the reduced index
    /// `r` that the element is not padding of a runtime-sized dim (none when the dim is fixed).
    pub(super) fn reduction_mask(&self, i: usize, dim: usize) -> Option<String> {
        self.valid_along(self.bg().nodes()[i].inputs[0], dim, "r")
    }

    /// `value`, the element at `idx` of element-wise operator `i`'s result, or zero where that is
    /// padding of a runtime-sized dim that a matmul contracts: reductions and accumulators mask
    /// their padding, but a contraction does not, and `exp(0 − m)` at a padded key would reach it
    /// (as 1, or as `inf` with a very negative maximum: `inf · 0` is a NaN).
    pub(super) fn zero_padding(&self, i: usize, idx: &[String], value: String) -> String {
        let t = TensorRef { node: i, port: 0 };
        let rank = idx.len();
        let contracted = |d: usize| {
            self.bg().nodes().iter().any(|n| {
                matches!(n.op, BlockOp::Matmul)
                    && ((n.inputs[0] == t && d + 1 == rank) || (n.inputs.get(1) == Some(&t) && d + 2 == rank))
            })
        };
        let conds: Vec<String> =
            (0..rank).filter(|&d| contracted(d)).filter_map(|d| self.valid_along(t, d, &idx[d])).collect();
        if conds.is_empty() { value } else { format!("(({}) ? {value} : 0.0f)", conds.join(" && ")) }
    }

    /// The planned reduction of node `i`.
    pub(super) fn reduction_of(&self, i: usize) -> Reduction {
        self.plan.reductions[i].expect("every reducing operator is planned")
    }

    /// `out = op(x)` element by element.
    fn unary(&mut self, indent: usize, i: usize, op: &UnaryOp) {
        let out = self.plan.out_tile(i);
        let x = self.tile(self.bg().nodes()[i].inputs[0]);
        let idx = unflatten("e", &out.shape);
        let body = out.store(&idx, &self.zero_padding(i, &idx, unary_expr(op, &x.load(&idx))));
        self.elementwise(indent, out.numel(), &body);
    }

    /// `out = a op b` element by element (broadcast dims of size 1 read index 0).
    fn binary(&mut self, indent: usize, i: usize, op: BinaryOp) {
        let out = self.plan.out_tile(i);
        let inputs = &self.bg().nodes()[i].inputs;
        let (a, b) = (self.tile(inputs[0]), self.tile(inputs[1]));
        let idx = unflatten("e", &out.shape);
        let body = out.store(&idx, &self.zero_padding(i, &idx, binary_expr(op, &a.load(&idx), &b.load(&idx))));
        self.elementwise(indent, out.numel(), &body);
    }

    /// `reduce_sum`, `reduce_sum_to`, `reduce_max`, `argmax` (its position stored as a float).
    fn reduction(&mut self, indent: usize, i: usize, combine: Combine) {
        let out = self.plan.out_tile(i);
        let x = self.tile(self.bg().nodes()[i].inputs[0]);
        let r = self.reduction_of(i);
        let mask = self.reduction_mask(i, r.dim);
        self.reduce(indent, r, x, "{x}", combine, &format!("{}[{{o}}] = {{v}};", out.var), mask);
    }

    /// The row sums of squares of `rms_norm` node `i` into its scratch tile, and a barrier.
    pub(super) fn rms_row_sums(&mut self, indent: usize, i: usize) {
        let x = self.tile(self.bg().nodes()[i].inputs[0]);
        let scratch = self.plan.scratch[i].as_ref().expect("rms scratch planned");
        let r = self.reduction_of(i);
        self.reduce(indent, r, x, "({x})*({x})", Combine::Sum, &format!("{}[{{o}}] = {{v}};", scratch.var), None);
        self.sync(indent);
    }

    /// `x / sqrt(mean(x²) + eps)` for element `e` of `rms_norm` node `i` with value `x` and rows
    /// of `row` elements.
    pub(super) fn rms_scale(&self, i: usize, x: &str, row: usize, eps: f32) -> String {
        let scratch = self.plan.scratch[i].as_ref().expect("rms scratch planned");
        format!("{x} * rsqrtf({}[e / {row}] / {} + {})", scratch.var, float_lit(row as f32), float_lit(eps))
    }

    /// `rms_norm` over the last dim: row sums of squares, then the scaling element by element.
    fn rms_norm(&mut self, indent: usize, i: usize, eps: f32) {
        let out = self.plan.out_tile(i);
        let x = self.tile(self.bg().nodes()[i].inputs[0]);
        let row = x.shape[x.shape.len() - 1];
        self.rms_row_sums(indent, i);
        let idx = unflatten("e", &out.shape);
        let body = out.store(&idx, &self.rms_scale(i, &x.load(&idx), row, eps));
        self.elementwise(indent, out.numel(), &body);
    }

    /// `concat` along `dim`: each element from one operand or the other.
    fn concat(&mut self, indent: usize, i: usize, dim: usize) {
        let out = self.plan.out_tile(i);
        let inputs = &self.bg().nodes()[i].inputs;
        let (a, b) = (self.tile(inputs[0]), self.tile(inputs[1]));
        let idx = unflatten("e", &out.shape);
        let split = a.shape[dim];
        let mut bidx = idx.clone();
        bidx[dim] = format!("({} - {split})", idx[dim]);
        let body = format!("{}[e] = ({} < {split}) ? {} : {};", out.var, idx[dim], a.load(&idx), b.load(&bidx));
        self.elementwise(indent, out.numel(), &body);
    }

    /// `running_max`: the maximum so far (output 0, kept across iterations) and the change of
    /// the maximum in this iteration (output 1).
    fn running_max(&mut self, indent: usize, i: usize) {
        let m = self.plan.tiles[i][0].as_ref().expect("planned");
        let diff = self.plan.tiles[i][1].as_ref().expect("planned");
        let x = self.tile(self.bg().nodes()[i].inputs[0]);
        let store = format!(
            "{{ const float prev = {m}[{{o}}]; const float nm = (it == 0) ? {{v}} : fmaxf(prev, {{v}}); {d}[{{o}}] = (it == 0) ? __int_as_float(0xff800000) : prev - nm; {m}[{{o}}] = nm; }}",
            m = m.var,
            d = diff.var
        );
        let r = self.reduction_of(i);
        let mask = self.reduction_mask(i, r.dim);
        self.reduce(indent, r, x, "{x}", Combine::Max, &store, mask);
    }
}
