//! The kernel's skeleton: signature, shared-memory pointers and register declarations, the loads
//! before the loop, the loop-invariant section, the for-loop with its pipeline, and the epilogue,
//! in that order. The sections' operators come from the other emitters.

use std::fmt::Write;

use crate::ir::BlockOp;

use super::super::super::CodegenError;
use super::super::KernelSizes;
use super::super::planner::{BulkCopies, KernelPlan, MatmulPlan, ctype};
use super::copy::stage_ptr;
use super::{BLOCK_INDEX, Emitter, input_param, output_param, register_accumulator};

/// The most pipeline stages whose prologue is written out copy by copy; deeper pipelines (of
/// small stages: [`super::super::pipeline_depth`]) issue theirs in a loop.
const PROLOGUE_UNROLLED_STAGES: usize = 4;

/// The CUDA source of the `extern "C" __global__` function `name` for `plan`.
pub(in super::super) fn emit_kernel(
    plan: &KernelPlan<'_>,
    name: &str,
    sizes: &KernelSizes,
) -> Result<String, CodegenError> {
    emit(plan, name, Entry::Kernel, sizes)
}

/// [`emit_kernel`] for a kernel launched after another kernel of the same program that may
/// overlap it (programmatic dependent launch on sm_90): it waits for that kernel's completion
/// and memory (`griddepcontrol.wait`) before anything else. Without such a launch the wait
/// returns at once.
pub(in super::super) fn emit_dependent_kernel(
    plan: &KernelPlan<'_>,
    name: &str,
    sizes: &KernelSizes,
) -> Result<String, CodegenError> {
    emit(plan, name, Entry::DependentKernel, sizes)
}

/// The CUDA source of the task body `name` for `plan`: the kernel's body as a `__device__`
/// function of the block index, `name(int bx, int by, int bz, inputs..., outputs...)`, for a
/// persistent megakernel whose blocks run many tiles. Inputs are plain `const T*` (no
/// `__restrict__`): buffers another block wrote earlier in the same launch must not be read
/// through the non-coherent read-only path.
pub(in super::super) fn emit_task_body(
    plan: &KernelPlan<'_>,
    name: &str,
    sizes: &KernelSizes,
) -> Result<String, CodegenError> {
    if !sizes.is_static() {
        return Err(CodegenError::Unsupported(format!("task body `{name}`: runtime-sized dims in a megakernel")));
    }
    emit(plan, name, Entry::TaskBody, sizes)
}

/// What the generated function is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Entry {
    /// A `__global__` kernel: one block graph, the block index from `blockIdx`.
    Kernel,
    /// A [`Entry::Kernel`] that first waits for the grid launched before it
    /// ([`emit_dependent_kernel`]).
    DependentKernel,
    /// A `__device__` task body: the block index passed in.
    TaskBody,
}

fn emit(plan: &KernelPlan<'_>, name: &str, entry: Entry, sizes: &KernelSizes) -> Result<String, CodegenError> {
    let mut e = Emitter::new(plan, sizes);
    if sizes.is_static() {
        e.bulk = plan.bulk_tiles();
        if entry == Entry::TaskBody && plan.bulk != BulkCopies::Runs {
            // Task bodies take bulk copies only of single runs (`KernelOptions::bulk_runs`).
            e.bulk.clear();
        }
    }
    e.signature(name, entry);
    e.declarations(entry);
    e.loads_before_the_loop();
    e.hoisted()?;
    let barrier_owed = e.main_loop()?;
    e.line(1, "// after the loop");
    e.finish_accumulators(barrier_owed);
    e.epilogue()?;
    if entry == Entry::TaskBody && !e.bulk.is_empty() {
        // The next task of the worker runs in the same shared memory: every thread is past its
        // last wait before the stages' mbarriers are invalidated (the next call initializes them).
        e.line(0, "#if MIRAGE_BULK");
        e.sync(1);
        e.line(
            1,
            &format!("if (tid == 0) {{ for (int s = 0; s < {}; ++s) mirage::mbar_inval(&mbar[s]); }}", plan.stages),
        );
        e.line(0, "#endif");
    }
    e.line(0, "}");
    Ok(e.out)
}

impl Emitter<'_> {
    /// A comment with the plan's geometry, and the function's signature: the block graph's
    /// inputs, then its outputs.
    fn signature(&mut self, name: &str, entry: Entry) {
        let plan = self.plan;
        let bg = self.bg();
        let mut params = Vec::new();
        if entry == Entry::TaskBody {
            params.extend(BLOCK_INDEX.iter().map(|b| format!("const int {b}")));
        }
        let restrict = if entry != Entry::TaskBody { " __restrict__" } else { "" };
        for (j, d) in bg.inputs().iter().enumerate() {
            params.push(format!("const {}*{restrict} {}", ctype(d.dtype), input_param(j)));
        }
        for (k, d) in bg.output_descs().iter().enumerate() {
            params.push(format!("{}* __restrict__ {}", ctype(d.dtype), output_param(k)));
        }
        params.extend(self.sizes.params.iter().map(|p| format!("const int {p}")));
        writeln!(
            self.out,
            "// block graph: grid {:?}, {} threads, forloop_range {}, {} pipeline stage(s), {} B shared memory",
            bg.grid(),
            plan.threads,
            bg.forloop_range(),
            plan.stages,
            plan.smem_bytes
        )
        .ok();
        let head = match entry {
            Entry::Kernel | Entry::DependentKernel => {
                format!("extern \"C\" __global__ void __launch_bounds__({})", plan.threads)
            }
            Entry::TaskBody => "__device__ __noinline__ void".to_string(),
        };
        writeln!(self.out, "{head} {name}({}) {{", params.join(", ")).ok();
    }

    /// Shared memory, the thread and block indices, the pointers of the tiles that are not
    /// pipelined (and the `rms_norm` scratch), and the register accumulators, zeroed.
    fn declarations(&mut self, entry: Entry) {
        let plan = self.plan;
        self.line(1, "extern __shared__ __align__(128) unsigned char smem[];");
        if plan.static_smem_bytes > 0 {
            self.line(1, &format!("__shared__ float red[{}];", plan.warps));
        }
        self.line(1, "const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;");
        let [bx, by, bz] = BLOCK_INDEX;
        if entry != Entry::TaskBody {
            self.line(1, &format!("const int {bx} = blockIdx.x, {by} = blockIdx.y, {bz} = blockIdx.z;"));
        }
        self.line(1, &format!("(void)warp; (void)lane; (void){bx}; (void){by}; (void){bz};"));
        if entry == Entry::DependentKernel {
            // The kernel before it may still be running (programmatic dependent launch): nothing
            // it wrote may be read before it has completed and flushed.
            self.line(0, "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900");
            self.line(1, "asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");");
            self.line(0, "#endif");
        }
        if let Some(l) = self.sizes.forloop {
            // The loop walks a runtime-sized dim: the iterations holding this block's valid part.
            let n = &self.sizes.params[l.param];
            let valid = match l.axis {
                Some(a) => format!("{n} - {}*{}", BLOCK_INDEX[a], l.whole),
                None => n.clone(),
            };
            self.line(
                1,
                &format!(
                    "const int iters = min({}, (max({valid}, 0) + {}) / {});",
                    self.bg().forloop_range(),
                    l.part - 1,
                    l.part
                ),
            );
        }
        if !self.bulk.is_empty() {
            self.line(0, "#if MIRAGE_BULK");
            self.line(1, &format!("__shared__ __align__(8) unsigned long long mbar[{}];", plan.stages));
            self.line(
                1,
                &format!(
                    "if (tid == 0) {{ for (int s = 0; s < {}; ++s) mirage::mbar_init(&mbar[s], 1); mirage::mbar_init_fence(); }}",
                    plan.stages
                ),
            );
            if entry == Entry::TaskBody {
                // Operands written by earlier tasks (acquired through the counters) are read
                // by the bulk-copy engine, another proxy.
                self.line(1, "mirage::fence_proxy_async_all();");
            }
            self.sync(1);
            self.line(0, "#endif");
        }
        for i in 0..plan.tiles.len() {
            if plan.schedule.alias[i].is_some() {
                continue;
            }
            for t in plan.tiles[i].iter().flatten().filter(|t| !t.pipelined) {
                self.line(
                    1,
                    &format!("{0}* const {1} = reinterpret_cast<{0}*>(smem + {2});", t.ctype, t.var, t.offset),
                );
            }
            if let Some(s) = &plan.scratch[i] {
                self.line(1, &format!("float* const {} = reinterpret_cast<float*>(smem + {});", s.var, s.offset));
            }
        }
        for i in self.thread_sums() {
            self.line(1, &format!("float {} = 0.0f;", Self::thread_sum_var(i)));
        }
        for (i, len) in plan.register_accumulators.iter().enumerate() {
            let Some(len) = len else { continue };
            let acc = register_accumulator(i);
            self.line(1, &format!("float {acc}[{len}][4];"));
            self.line(1, &format!("#pragma unroll\n  for (int j = 0; j < {len}; ++j) {{ {acc}[j][0] = {acc}[j][1] = {acc}[j][2] = {acc}[j][3] = 0.0f; }}"));
        }
    }

    /// The tiles loaded once (one commit group), then the pipeline prologue: the pipelined tiles
    /// of the first `stages - 1` iterations, one commit group each.
    fn loads_before_the_loop(&mut self) {
        let plan = self.plan;
        let frange = self.trip();
        self.line(1, "// tiles loaded once, before the loop");
        for &i in &plan.loads.once {
            self.copy_tile(1, i, "0", &plan.out_tile(i).var);
        }
        self.commit(1);
        let s = plan.stages;
        if plan.loads.pipelined.is_empty() {
            return;
        }
        self.line(1, &format!("// pipeline prologue: iterations 0..{}", s - 1));
        if s > PROLOGUE_UNROLLED_STAGES {
            // A deep pipeline of small stages (`pipeline_depth`): the prologue as a loop.
            self.line(1, "#pragma unroll 1");
            self.line(1, &format!("for (int st = 0; st < {}; ++st) {{", s - 1));
            self.line(2, &format!("if (st < {frange}) {{"));
            self.copy_stage(3, "st", "st");
            self.line(2, "}");
            self.commit(2);
            self.line(1, "}");
            return;
        }
        for st in 0..s - 1 {
            self.line(1, &format!("if ({st} < {frange}) {{"));
            self.copy_stage(2, &st.to_string(), &st.to_string());
            self.line(1, "}");
            self.commit(1);
        }
    }

    /// The copies of the pipelined tiles of iteration `iter` into stage `stage` (C expressions):
    /// the bulk-copied tiles through the bulk-copy engine on sm_90 (`#if MIRAGE_BULK`: one
    /// arrival expecting the stage's bytes on its mbarrier, then one bulk copy per row) and by
    /// `cp.async` elsewhere, then the other tiles by `cp.async`.
    fn copy_stage(&mut self, indent: usize, iter: &str, stage: &str) {
        let plan = self.plan;
        let bulk = self.bulk.clone();
        if !bulk.is_empty() {
            self.line(0, "#if MIRAGE_BULK");
            self.line(
                indent,
                &format!("if (tid == 0) mirage::mbar_expect_tx(&mbar[{stage}], {});", plan.bulk_stage_bytes()),
            );
            self.line(indent, "mirage::fence_proxy_async();");
            for &i in &bulk {
                let buf = stage_ptr(plan.out_tile(i), stage);
                self.bulk_tile(indent, i, iter, &buf, &format!("&mbar[{stage}]"));
            }
            self.line(0, "#else");
            for &i in &bulk {
                let buf = stage_ptr(plan.out_tile(i), stage);
                self.copy_tile(indent, i, iter, &buf);
            }
            self.line(0, "#endif");
        }
        for &i in plan.loads.pipelined.iter().filter(|i| !bulk.contains(i)) {
            let buf = stage_ptr(plan.out_tile(i), stage);
            self.copy_tile(indent, i, iter, &buf);
        }
    }

    /// The loop-invariant operators, once, and the preloaded A fragments of row-owned matmuls.
    fn hoisted(&mut self) -> Result<(), CodegenError> {
        let plan = self.plan;
        let preloads: Vec<usize> = (0..plan.tiles.len()).filter(|&i| plan.registers.preload_a[i]).collect();
        if plan.schedule.hoisted.is_empty() && preloads.is_empty() {
            return Ok(());
        }
        // The once-loaded tiles are the first commit group: complete when at most the
        // prologue's groups are pending.
        self.line(1, "// loop-invariant operators, once");
        self.wait(1, if plan.loads.pipelined.is_empty() { 0 } else { plan.stages - 1 });
        self.sync(1);
        for &i in &plan.schedule.hoisted {
            if !self.section_operator(1, i)? {
                continue;
            }
            self.sync(1);
        }
        for &i in &preloads {
            let Some(MatmulPlan::Rows(p)) = &plan.matmuls[i] else { unreachable!("preloaded matmuls are row-owned") };
            self.preload_a(1, i, p);
        }
        Ok(())
    }

    /// Operator `i` of a section other than an accumulator or saver: its element-wise group at
    /// the group's head, alone otherwise. Whether it emitted anything (false for group members
    /// other than the head).
    fn section_operator(&mut self, indent: usize, i: usize) -> Result<bool, CodegenError> {
        let groups = &self.plan.groups;
        match groups.group_of[i] {
            Some(gid) if groups.groups[gid][0] != i => return Ok(false),
            Some(gid) => self.group(indent, gid)?,
            None => self.operator(indent, i),
        }
        Ok(true)
    }

    /// The for-loop: this iteration's stage waited for, the stage pointers, the per-iteration
    /// copies, a barrier, then the next stage's copies issued (into the buffer of the previous
    /// iteration, which every thread has left at that barrier), then the body's operators and
    /// accumulators with a barrier after each but the last (none between operators whose
    /// results stay with their warp). The barrier at the top of the next iteration orders the
    /// last operator before anything that overwrites what it read, and one barrier after the
    /// loop orders it before the epilogue (owed: the returned flag). With one stage (no room for two), the copies of an
    /// iteration are issued at its top into the buffer the previous one read, so every
    /// operator, the last included, is followed by a barrier.
    fn main_loop(&mut self) -> Result<bool, CodegenError> {
        let plan = self.plan;
        let frange = self.trip();
        let s = plan.stages;
        self.line(1, &format!("for (int it = 0; it < {frange}; ++it) {{"));
        let pipelined = !plan.loads.pipelined.is_empty();
        let refill_after_barrier = pipelined && s >= 2;
        if pipelined && s < 2 {
            self.line(2, &format!("{{ const int nit = it + 0; if (nit < {frange}) {{"));
            self.copy_stage(3, "nit", "nit % 1");
            self.line(2, "} }");
            self.commit(2);
            self.wait(2, 0);
            if !self.bulk.is_empty() {
                // One stage: this iteration's bulk copies complete phase `it` of its mbarrier.
                self.line(0, "#if MIRAGE_BULK");
                self.line(2, "mirage::mbar_wait(&mbar[0], it & 1);");
                self.line(0, "#endif");
            }
        } else if pipelined {
            // Committed so far: the prologue's s - 1 stages and one refill per earlier
            // iteration, the last for iteration it + s - 2: this one's is complete when at most
            // s - 2 groups are pending.
            self.wait(2, s - 2);
            if !self.bulk.is_empty() {
                self.line(0, "#if MIRAGE_BULK");
                self.line(2, &format!("mirage::mbar_wait(&mbar[it % {s}], (it / {s}) & 1);"));
                self.line(0, "#endif");
            }
        } else {
            self.wait(2, 0);
        }
        for &i in &plan.loads.pipelined {
            let t = plan.out_tile(i);
            self.line(2, &format!("{}* const {} = {};", t.ctype, t.var, stage_ptr(t, &format!("it % {s}"))));
        }
        if !plan.loads.per_iteration.is_empty() {
            self.sync(2);
            for &i in &plan.loads.per_iteration {
                self.copy_tile(2, i, "it", &plan.out_tile(i).var);
            }
        }
        self.sync(2);
        if refill_after_barrier {
            self.line(2, &format!("{{ const int nit = it + {}; if (nit < {frange}) {{", s - 1));
            self.copy_stage(3, "nit", &format!("nit % {s}"));
            self.line(2, "} }");
            self.commit(2);
        }
        self.thread_sums_in_loop();
        let body = &plan.schedule.body;
        // The last operator that emits code here: a loaded tile's thread sum ran after the first
        // barrier, a computed tile's runs in its place — after the barrier its tile's operator
        // owes it, which that operator would skip if it were the last.
        let last = if refill_after_barrier {
            body.iter().rposition(|&i| self.emits(i) && !(self.thread_summed(i) && self.thread_sum_of_load(i)))
        } else {
            None
        };
        for (k, &i) in body.iter().enumerate() {
            if self.thread_summed(i) {
                // A computed tile's thread sum at its place: after the barrier that followed
                // the tile's operator (a thread sum of a loaded tile ran after the first one).
                if !self.thread_sum_of_load(i) {
                    self.thread_sum_at(i);
                }
                continue;
            }
            if let BlockOp::Accum { acc } = self.bg().nodes()[i].op {
                self.body_accumulator(i, acc);
            } else if !self.section_operator(2, i)? {
                continue;
            }
            if Some(k) == last {
                self.line(2, "// no barrier: the next iteration's first barrier precedes any overwrite");
                continue;
            }
            // Operators whose results stay with the warp that computed them (register values,
            // register accumulators, row sums of owned rows) need no barrier between them: each
            // reads only tiles that were complete before the first of them ran.
            let next = body.get(k + 1);
            if plan.registers.warp_local(i) && next.is_some_and(|&j| plan.registers.warp_local(j)) {
                self.line(2, "// no barrier: the next operator reads only this warp's registers and completed tiles");
                continue;
            }
            self.sync(2);
        }
        self.line(1, "}");
        Ok(last.is_some())
    }

    /// Whether body operator `i` emits code of its own: an accumulator, an operator outside
    /// element-wise groups or a group's head (the other members are emitted with their head).
    fn emits(&self, i: usize) -> bool {
        matches!(self.bg().nodes()[i].op, BlockOp::Accum { .. })
            || self.plan.groups.group_of[i].is_none_or(|gid| self.plan.groups.groups[gid][0] == i)
    }

    /// After the loop: the after-loop operators (element-wise groups at their heads) and the
    /// output savers, a barrier after each operator.
    fn epilogue(&mut self) -> Result<(), CodegenError> {
        let plan = self.plan;
        for &i in &plan.schedule.epilogue {
            if matches!(self.bg().nodes()[i].op, BlockOp::Output { .. }) && plan.groups.group_of[i].is_none() {
                self.saver(1, i);
            } else if self.section_operator(1, i)? {
                self.sync(1);
            }
        }
        Ok(())
    }
}
