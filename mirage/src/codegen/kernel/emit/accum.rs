//! Accumulators: the per-iteration folds in the loop body (on shared-memory tiles or register
//! fragments), and after the loop the register accumulators' stores and the final scaling of
//! `acc_rms_last`.

use crate::ir::{AccKind, BlockOp};

use super::super::planner::{MatmulPlan, RowBands, Tile, TiledMatmul, VectorMatmul};
use super::expr::{float_lit, two, unflatten};
use super::reduce::Combine;
use super::{Emitter, register_accumulator, register_value};

impl Emitter<'_> {
    /// Accumulator `i` of the loop body: row sums of a register value by shuffles, a register
    /// value summed in registers, or a fold of a shared-memory tile.
    pub(super) fn body_accumulator(&mut self, i: usize, acc: AccKind) {
        let plan = self.plan;
        let x = self.bg().nodes()[i].inputs[0].node;
        if plan.registers.reg_sum[i] {
            self.row_sum_regs(2, plan.register_bands(x), x, plan.out_tile(i));
        } else if plan.registers.reg_acc[i] {
            let RowBands { per_warp, nt, .. } = plan.register_bands(x);
            self.line(2, "// sum over the iterations, in registers");
            self.line(2, "#pragma unroll");
            self.line(2, &format!("for (int mi = 0; mi < {per_warp}; ++mi) {{"));
            self.line(3, "#pragma unroll");
            self.line(3, &format!("for (int nt = 0; nt < {nt}; ++nt) {{"));
            self.line(4, "#pragma unroll");
            self.line(
                4,
                &format!(
                    "for (int q = 0; q < 4; ++q) {{ {}[mi * {nt} + nt][q] += {}[mi][nt][q]; }}",
                    register_accumulator(i),
                    register_value(x)
                ),
            );
            self.line(3, "}");
            self.line(2, "}");
        } else {
            self.accumulate(i, acc);
        }
    }

    /// Whether accumulator `i` is a *thread sum*: an `acc_sum_last` or `acc_rms_last` to one
    /// element of a tile the loop walks through a ring of at least two stage buffers (no
    /// padding, a fixed trip count), with dead stage buffers after the loop to hold the warps'
    /// partial sums. (With two stages or more an iteration's refill goes into the buffer the
    /// previous iteration read, behind the iteration's first barrier, so the thread sum needs
    /// no barrier of its own; a one-stage loop copies into the buffer being read.) Each
    /// thread then adds its elements of every iteration's tile to a register of its own, right
    /// after the iteration's first barrier ([`Emitter::thread_sums_in_loop`]), and the warps'
    /// sums meet once after the loop ([`Emitter::finish_thread_sums`]): no reduction and no
    /// barrier in the loop, where the per-iteration fold took a warp's shuffles and a barrier
    /// every iteration (the norm folded into a decode projection: DECISIONS change 92).
    pub(super) fn thread_summed(&self, i: usize) -> bool {
        let plan = self.plan;
        let nd = &self.bg().nodes()[i];
        let BlockOp::Accum { acc: AccKind::SumLast | AccKind::RmsLast } = nd.op else {
            return false;
        };
        let x = nd.inputs[0];
        self.sizes.forloop.is_none()
            && self.bg().forloop_range() > 1
            && plan.stages >= 2
            && plan.schedule.body.contains(&i)
            && plan.out_tile(i).numel() == 1
            && x.port == 0
            && (plan.loads.pipelined.contains(&x.node) || self.computed_before(x.node, i))
            && self.bounds.get(x.node).and_then(|p| p.get(x.port)).is_none_or(|dims| dims.iter().all(Option::is_none))
            && self.dead_stage_buffers(plan.warps * 4).is_some()
    }

    /// Whether node `x`'s output is a shared-memory tile the loop body computes before body node
    /// `i` (an operator, not an accumulator, whose values no warp keeps to itself): a thread sum
    /// of it is taken at `i`'s place in the body, after the barrier that follows `x`
    /// ([`Emitter::thread_sum_at`]). The norm folded into the decoder's gate/up reads such a
    /// tile: the residual plus the output projection's partial sums (DECISIONS change 101).
    fn computed_before(&self, x: usize, i: usize) -> bool {
        let plan = self.plan;
        let body = &plan.schedule.body;
        let (Some(px), Some(pi)) = (body.iter().position(|&n| n == x), body.iter().position(|&n| n == i)) else {
            return false;
        };
        px < pi
            && !matches!(self.bg().nodes()[x].op, BlockOp::Accum { .. })
            && plan.tiles[x].first().is_some_and(Option::is_some)
            && !plan.registers.warp_local(x)
    }

    /// Whether thread sum `i` reads a pipelined input tile (summed right after the iteration's
    /// first barrier) rather than a tile the body computes (summed at its own place).
    pub(super) fn thread_sum_of_load(&self, i: usize) -> bool {
        self.plan.loads.pipelined.contains(&self.bg().nodes()[i].inputs[0].node)
    }

    /// The thread sums of this kernel ([`Emitter::thread_summed`]), in node order.
    pub(super) fn thread_sums(&self) -> Vec<usize> {
        (0..self.bg().nodes().len()).filter(|&i| self.thread_summed(i)).collect()
    }

    /// The register of thread sum `i`.
    pub(super) fn thread_sum_var(i: usize) -> String {
        format!("tsum{i}")
    }

    /// In the loop, after its first barrier: every thread sum adds this thread's elements of the
    /// iteration's tile (squared for `acc_rms_last`) to its register. They write no shared
    /// memory, so no barrier follows them.
    pub(super) fn thread_sums_in_loop(&mut self) {
        for i in self.thread_sums() {
            if self.thread_sum_of_load(i) {
                self.thread_sum_at(i);
            }
        }
    }

    /// Thread sum `i`'s line: this thread's elements of its input tile (squared for
    /// `acc_rms_last`) added to its register. It writes no shared memory, so no barrier follows.
    pub(super) fn thread_sum_at(&mut self, i: usize) {
        let nd = &self.bg().nodes()[i];
        let x = self.tile(nd.inputs[0]);
        let v = x.load(&unflatten("e", &x.shape));
        let term = if nd.op == (BlockOp::Accum { acc: AccKind::RmsLast }) { format!("({v})*({v})") } else { v };
        self.line(2, &format!("// thread sum of node {i}: this thread's elements, in a register"));
        self.elementwise(2, x.numel(), &format!("{} += {term};", Self::thread_sum_var(i)));
    }

    /// After the loop: every thread sum's warps meet — each warp's lanes by shuffles, then the
    /// warps' sums through dead stage buffers, one slot per warp, added in warp order by thread
    /// 0 (the same sum every run) into the accumulator's tile. Returns whether a barrier is
    /// still owed (none was emitted).
    fn finish_thread_sums(&mut self, mut owed: bool) -> bool {
        let warps = self.plan.warps;
        for i in self.thread_sums() {
            let at = self.dead_stage_buffers(warps * 4).expect("checked by thread_summed");
            if std::mem::take(&mut owed) {
                self.sync(1);
            }
            self.line(1, "{");
            self.line(2, &format!("float* const meet = reinterpret_cast<float*>(smem + {at});"));
            self.line(
                2,
                &format!(
                    "{{ const float s = mirage::warp_sum({}); if (lane == 0) meet[warp] = s; }}",
                    Self::thread_sum_var(i)
                ),
            );
            let sum = (1..warps).fold("meet[0]".to_string(), |v, w| format!("{v} + meet[{w}]"));
            self.sync(2);
            self.line(2, &format!("if (tid == 0) {}[0] = {sum};", self.plan.out_tile(i).var));
            self.sync(2);
            self.line(1, "}");
        }
        owed
    }

    /// The per-iteration fold of accumulator `i` on shared-memory tiles.
    fn accumulate(&mut self, i: usize, acc: AccKind) {
        let inputs = &self.bg().nodes()[i].inputs;
        let x = self.tile(inputs[0]);
        let out = self.plan.out_tile(i);
        let idx = unflatten("e", &out.shape);
        // Padding of a runtime-sized dim folds in as the accumulator's identity.
        let valid = self.valid_at(inputs[0], &idx);
        let xv = |identity: &str| match &valid {
            Some(c) => format!("(({c}) ? {} : {identity})", x.load(&idx)),
            None => x.load(&idx),
        };
        let body = match acc {
            AccKind::Sum => format!("{0}[e] = (it == 0 ? 0.0f : {0}[e]) + {1};", out.var, xv("0.0f")),
            AccKind::Max => {
                format!("{0}[e] = (it == 0) ? {1} : fmaxf({0}[e], {1});", out.var, xv("__int_as_float(0xff800000)"))
            }
            AccKind::Rescale => {
                let r = self.tile(inputs[1]);
                format!("{0}[e] = (it == 0) ? {1} : {0}[e] * {2} + {1};", out.var, xv("0.0f"), r.load(&idx))
            }
            AccKind::SumLast | AccKind::RmsLast | AccKind::SumTo { .. } => {
                let map = if acc == AccKind::RmsLast { "({x})*({x})" } else { "{x}" };
                let store = format!("{0}[{{o}}] = (it == 0 ? 0.0f : {0}[{{o}}]) + {{v}};", out.var);
                let r = self.reduction_of(i);
                let mask = self.reduction_mask(i, r.dim);
                self.reduce(2, r, x, map, Combine::Sum, &store, mask);
                return;
            }
            AccKind::SumLastRescale => {
                let r = self.tile(inputs[1]);
                let rv = r.load(&unflatten("{o}", &out.shape));
                let store = format!("{0}[{{o}}] = (it == 0) ? {{v}} : {0}[{{o}}] * {rv} + {{v}};", out.var);
                let r = self.reduction_of(i);
                let mask = self.reduction_mask(i, r.dim);
                self.reduce(2, r, x, "{x}", Combine::Sum, &store, mask);
                return;
            }
        };
        self.elementwise(2, out.numel(), &body);
    }

    /// `acc[row] += Σ_cols x[row, cols]` for register value `x`: each lane sums its pairs, the
    /// four lanes of a row meet by two shuffles, one adds to the shared-memory accumulator (the
    /// rows of a band belong to one warp, so no other warp touches them).
    fn row_sum_regs(&mut self, indent: usize, bands: RowBands, x: usize, acc: &Tile) {
        let RowBands { per_warp, nt, mt, .. } = bands;
        let x = register_value(x);
        let r = acc.shape.len();
        let at = |row: &str| acc.offset_expr(&two(row, "0", r));
        self.line(indent, "// row sums of register fragments");
        self.line(indent, "#pragma unroll");
        self.line(indent, &format!("for (int mi = 0; mi < {per_warp}; ++mi) {{"));
        self.line(indent + 1, &format!("const int mt = warp + mi * {};", self.plan.warps));
        self.line(indent + 1, "float v0 = 0.0f, v1 = 0.0f;");
        self.line(indent + 1, "#pragma unroll");
        self.line(indent + 1, &format!("for (int nt = 0; nt < {nt}; ++nt) {{ v0 += {x}[mi][nt][0] + {x}[mi][nt][1]; v1 += {x}[mi][nt][2] + {x}[mi][nt][3]; }}"));
        self.line(indent + 1, "v0 += __shfl_xor_sync(0xffffffffu, v0, 1); v0 += __shfl_xor_sync(0xffffffffu, v0, 2);");
        self.line(indent + 1, "v1 += __shfl_xor_sync(0xffffffffu, v1, 1); v1 += __shfl_xor_sync(0xffffffffu, v1, 2);");
        self.line(indent + 1, &format!("if (mt < {mt} && (lane & 3) == 0) {{"));
        self.line(indent + 2, "const int r = mt * 16 + (lane >> 2);");
        self.line(indent + 2, &format!("{0}[{1}] = (it == 0 ? 0.0f : {0}[{1}]) + v0;", acc.var, at("r")));
        self.line(indent + 2, &format!("{0}[{1}] = (it == 0 ? 0.0f : {0}[{1}]) + v1;", acc.var, at("r+8")));
        self.line(indent + 1, "}");
        self.line(indent, "}");
    }

    /// After the loop: every register accumulator stored to its accumulator's tile, then
    /// `acc_rms_last` tiles turned from sums of squares into root means, then a barrier. With
    /// `barrier_owed` (the loop's last operator was not followed by one), a barrier first
    /// orders that operator before these stores.
    pub(super) fn finish_accumulators(&mut self, barrier_owed: bool) {
        let plan = self.plan;
        let nodes = self.bg().nodes();
        // The loop's last operator has no barrier after it (`main_loop`): one before the first
        // store here, or the closing one when there is none.
        let mut owed = self.finish_thread_sums(barrier_owed);
        for (i, nd) in nodes.iter().enumerate() {
            let fused = plan.registers.fused[i];
            if !plan.registers.reg_acc[i] && fused.is_none() {
                continue;
            }
            if std::mem::take(&mut owed) {
                self.sync(1);
            }
            if plan.registers.reg_acc[i] {
                self.store_row_accumulator(i, plan.register_bands(nd.inputs[0].node), plan.out_tile(i));
                continue;
            }
            let Some(u) = fused else { continue };
            match plan.matmuls[i].as_ref().expect("every matmul is planned") {
                MatmulPlan::Rows(p) => self.store_row_accumulator(i, p.bands, plan.out_tile(u)),
                MatmulPlan::Tiled(p) => self.store_tiled_accumulator(i, p, plan.out_tile(u)),
                MatmulPlan::Vector(p) => self.store_vector_accumulator(i, p, plan.out_tile(u)),
                MatmulPlan::Fma(_) => unreachable!("f32 matmuls are never fused"),
            }
        }
        for (i, nd) in nodes.iter().enumerate() {
            if let BlockOp::Accum { acc: AccKind::RmsLast } = nd.op {
                if std::mem::take(&mut owed) {
                    self.sync(1);
                }
                let x = self.tile(nd.inputs[0]);
                let count = self.bg().forloop_range() * x.shape.last().copied().unwrap_or(1);
                let t = plan.out_tile(i);
                self.elementwise(
                    1,
                    t.numel(),
                    &format!("{0}[e] = sqrtf({0}[e] / {1});", t.var, float_lit(count as f32)),
                );
            }
        }
        self.sync(1);
    }

    /// Stores the row-owned register accumulator of node `i` (bands `bands`) to tile `c`.
    fn store_row_accumulator(&mut self, i: usize, bands: RowBands, c: &Tile) {
        let RowBands { mt, per_warp, nt, .. } = bands;
        let (m, n) = (mt * 16, nt * 8);
        self.line(1, "#pragma unroll");
        self.line(1, &format!("for (int mi = 0; mi < {per_warp}; ++mi) {{"));
        self.line(2, &format!("const int mt = warp + mi * {}; if (mt < {mt}) {{", self.plan.warps));
        self.line(3, "#pragma unroll");
        self.line(3, &format!("for (int nt = 0; nt < {nt}; ++nt) {{"));
        self.line(4, &format!("const float* d = {}[mi * {nt} + nt];", register_accumulator(i)));
        self.store_fragment(4, c, m, n, "=");
        self.line(3, "}");
        self.line(2, "}");
        self.line(1, "}");
    }

    /// Stores the register accumulator of CUDA-core matmul `i` to tile `c`: the row groups of a
    /// warp meet by shuffles (lanes `lanes` apart own the same columns), then the warps (or, with
    /// a warp per row group or more, the row groups) store or add in turn, a barrier between
    /// turns: a fixed order, so the sums are the same on every run. Idle lanes (past the row's
    /// `n / 8` vectors) hold zeros and never write.
    fn store_vector_accumulator(&mut self, i: usize, p: &VectorMatmul, c: &Tile) {
        let VectorMatmul { m, n, lanes, groups, .. } = *p;
        let acc = register_accumulator(i);
        let r = c.shape.len();
        self.line(1, "{");
        self.line(2, &format!("const int vc = (tid % {lanes}) * 8;"));
        let (turns, who, writer) = if lanes < 32 {
            self.line(2, "// the row groups of a warp meet by shuffles");
            self.line(2, "#pragma unroll");
            self.line(2, &format!("for (int s = {lanes}; s < 32; s <<= 1) {{"));
            self.line(3, "#pragma unroll");
            self.line(3, &format!("for (int j = 0; j < {}; ++j) {{", 2 * m));
            self.line(4, "#pragma unroll");
            self.line(
                4,
                &format!(
                    "for (int q = 0; q < 4; ++q) {{ {acc}[j][q] += __shfl_xor_sync(0xffffffffu, {acc}[j][q], s); }}"
                ),
            );
            self.line(3, "}");
            self.line(2, "}");
            (self.plan.warps, "warp".to_string(), Some(format!("lane < {}", n / 8)))
        } else if n / 8 < lanes {
            (groups, format!("tid / {lanes}"), Some(format!("vc < {n}")))
        } else {
            (groups, format!("tid / {lanes}"), None)
        };
        let slot = m * n;
        if turns > 1
            && let Some(at) = self.dead_stage_buffers(turns * slot * 4)
        {
            // Every turn's partial sums at once into the loop's stage buffers (dead after it:
            // every copy into them was waited for and every read of them precedes the
            // barrier after the loop), then each element summed over the turns in turn
            // order — the sums of the sequential turns below, bit for bit, with two barriers
            // instead of one per turn.
            self.line(2, &format!("float* const meet = reinterpret_cast<float*>(smem + {at});"));
            self.line(2, &format!("if ({}) {{", writer.as_deref().unwrap_or("true")));
            for mi in 0..m {
                for h in 0..2 {
                    for q in 0..4 {
                        self.line(
                            3,
                            &format!(
                                "meet[({who}) * {slot} + {} + vc + {}] = {acc}[{}][{q}];",
                                mi * n,
                                h * 4 + q,
                                2 * mi + h
                            ),
                        );
                    }
                }
            }
            self.line(2, "}");
            self.sum_meeting_slots(c, turns, slot, n);
            self.line(1, "}");
            return;
        }
        for turn in 0..turns {
            let op = if turn == 0 { "=" } else { "+=" };
            let and_writer = writer.as_deref().map(|w| format!(" && {w}")).unwrap_or_default();
            self.line(2, &format!("if ({who} == {turn}{and_writer}) {{"));
            for mi in 0..m {
                for h in 0..2 {
                    for q in 0..4 {
                        let col = format!("vc + {}", h * 4 + q);
                        self.line(
                            3,
                            &format!(
                                "{}[{}] {op} {acc}[{}][{q}];",
                                c.var,
                                c.offset_expr(&two(&mi.to_string(), &col, r)),
                                2 * mi + h
                            ),
                        );
                    }
                }
            }
            self.line(2, "}");
            self.sync(2);
        }
        self.line(1, "}");
    }

    /// After the slots of a meeting (`turns` partial sums of `slot` f32 elements each at `meet`,
    /// `n` columns a row) were written: a barrier, each element of result tile `c` the sum of its
    /// slots in slot order (the additions of turn-by-turn accumulation, in the same order), a
    /// barrier.
    fn sum_meeting_slots(&mut self, c: &Tile, turns: usize, slot: usize, n: usize) {
        self.sync(2);
        let sum = (1..turns).fold("meet[e]".to_string(), |v, t| format!("{v} + meet[{} + e]", t * slot));
        let r = c.shape.len();
        let store =
            format!("{}[{}] = {sum};", c.var, c.offset_expr(&two(&format!("(e / {n})"), &format!("(e % {n})"), r)));
        let close = self.open_strided(2, "e", "tid", slot, self.plan.threads);
        self.line(2 + close, &store);
        self.close(2, close);
        self.sync(2);
    }

    /// The shared-memory offset of the stage buffers of a pipelined input tile holding at least
    /// `bytes`, for use after the loop (none with bulk copies, whose buffers an mbarrier tracks).
    fn dead_stage_buffers(&self, bytes: usize) -> Option<usize> {
        if !self.bulk.is_empty() {
            return None;
        }
        let stages = self.plan.stages;
        self.plan.tiles.iter().flatten().flatten().find(|t| t.pipelined && t.bytes * stages >= bytes).map(|t| t.offset)
    }

    /// Stores the register accumulator of tiled matmul `i` to tile `c`. With its k-steps split
    /// over the warps, one round per k-slice: the slice-0 items store, the others add, a barrier
    /// between rounds (each tile has one item per slice: no two writers in a round).
    fn store_tiled_accumulator(&mut self, i: usize, p: &TiledMatmul, c: &Tile) {
        let TiledMatmul { m, n, tiles, nt, split, per_warp, .. } = *p;
        let warps = self.plan.warps;
        let acc = register_accumulator(i);
        if p.k_strided {
            let rounds = warps.min(p.kt);
            let slot = m * n;
            if rounds > 1
                && c.ctype == "float"
                && let Some(at) = self.dead_stage_buffers(rounds * slot * 4)
            {
                // Every warp that ran k-steps holds a partial sum of every tile: all of them at
                // once into the loop's stage buffers (dead after it), then each element summed
                // over the warps in warp order — the sums of the rounds below, bit for bit, with
                // two barriers instead of one per warp.
                self.line(1, "{");
                self.line(2, &format!("float* const meet = reinterpret_cast<float*>(smem + {at});"));
                self.line(2, &format!("if (warp < {rounds}) {{"));
                self.line(3, "#pragma unroll");
                self.line(3, &format!("for (int j = 0; j < {tiles}; ++j) {{"));
                self.line(4, &format!("const int mt = j / {nt}, nt = j % {nt}; const float* d = {acc}[j];"));
                let slot_tile = Tile {
                    var: format!("(meet + warp * {slot})"),
                    shape: vec![m, n],
                    strides: vec![n, 1],
                    pipelined: false,
                    ..c.clone()
                };
                self.store_fragment(4, &slot_tile, m, n, "=");
                self.line(3, "}");
                self.line(2, "}");
                self.sum_meeting_slots(c, rounds, slot, n);
                self.line(1, "}");
                return;
            }
            // Without dead stage buffers large enough: one round per warp that ran k-steps, warp
            // 0 stores, the others add in warp order (the same sums every run).
            for round in 0..rounds {
                self.line(1, &format!("if (warp == {round}) {{"));
                self.line(2, "#pragma unroll");
                self.line(2, &format!("for (int j = 0; j < {tiles}; ++j) {{"));
                self.line(3, &format!("const int mt = j / {nt}, nt = j % {nt}; const float* d = {acc}[j];"));
                self.store_fragment(3, c, m, n, if round == 0 { "=" } else { "+=" });
                self.line(2, "}");
                self.line(1, "}");
                self.sync(1);
            }
            return;
        }
        if split > 1 {
            for round in 0..split {
                self.line(1, "#pragma unroll");
                self.line(1, &format!("for (int j = 0; j < {per_warp}; ++j) {{"));
                self.line(
                    2,
                    &format!("const int q = warp + j * {warps}, t = q % {tiles}; if (q / {tiles} == {round}) {{"),
                );
                self.line(3, &format!("const int mt = t / {nt}, nt = t % {nt}; const float* d = {acc}[j];"));
                self.store_fragment(3, c, m, n, if round == 0 { "=" } else { "+=" });
                self.line(2, "}");
                self.line(1, "}");
                self.sync(1);
            }
            return;
        }
        self.line(1, "#pragma unroll");
        self.line(1, &format!("for (int j = 0; j < {per_warp}; ++j) {{"));
        self.line(2, &format!("const int t = warp + j * {warps}; if (t < {tiles}) {{"));
        self.line(3, &format!("const int mt = t / {nt}, nt = t % {nt}; const float* d = {acc}[j];"));
        self.store_fragment(3, c, m, n, "=");
        self.line(2, "}");
        self.line(1, "}");
    }
}
