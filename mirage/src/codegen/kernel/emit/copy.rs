//! Tile copies from device memory to shared memory, and the pipeline's completion tracking.
//!
//! This is the one place that writes copy instructions: [`CopyMethod`] picks the instruction,
//! [`Emitter::commit`] closes a group of asynchronous copies and [`Emitter::wait`] waits until
//! at most a given number of groups are still in flight. A new copy mechanism (bulk copies,
//! TMA) is a new method here and in the planner.

use crate::ir::{BlockGraph, BlockOp};

use super::super::planner::{CopyMethod, Tile, ctype, window};
use super::expr::unflatten;
use super::{BLOCK_INDEX, DimSize, Emitter, bound_coord, input_param, layout_strides, size_bound};

/// The C expressions of the first element of input tile `i` of `bg` in iteration `iter`, one
/// per device dim: the block's slab along the dims its grid axes map, plus the iteration's slab
/// along the dim the loop walks.
pub(super) fn block_offset(bg: &BlockGraph, i: usize, iter: &str) -> Vec<String> {
    let nd = &bg.nodes()[i];
    let BlockOp::Input { input, imap, forloop_dim } = &nd.op else { return vec![] };
    let kdesc = &bg.inputs()[*input];
    let grid = bg.grid();
    let tile = &nd.outputs[0].shape;
    (0..kdesc.shape.len())
        .map(|d| {
            let mut terms = Vec::new();
            for (a, axis) in BLOCK_INDEX.iter().enumerate() {
                if imap[a] == Some(d) {
                    terms.push(format!("{axis}*{}", kdesc.shape[d] / grid[a]));
                }
            }
            if *forloop_dim == Some(d) {
                terms.push(format!("({iter})*{}", tile[d]));
            }
            if terms.is_empty() { "0".into() } else { terms.join(" + ") }
        })
        .collect()
}

impl Emitter<'_> {
    /// [`block_offset`] of this kernel's input tile `i`.
    fn block_offset(&self, i: usize, iter: &str) -> Vec<String> {
        block_offset(self.bg(), i, iter)
    }

    /// Copies input tile `i` of iteration `iter` into the shared-memory buffer `buf` (a C
    /// pointer expression), by the planned method. A guarded copy (vectors along a runtime-sized
    /// dim, `TileCopy::guard`) checks `n % vec == 0` and that the input's base is aligned to the
    /// vector first and, when either does not hold, copies the same units through aligned-down
    /// windows ([`Self::copy_window`]; element by element for element types the window does not
    /// serve), which need the element's alignment only (`planner::align`).
    pub(super) fn copy_tile(&mut self, indent: usize, i: usize, iter: &str, buf: &str) {
        let plan = self.plan;
        let copy = plan.copies[i].as_ref().expect("input copy planned");
        let (Some(p), Some(c)) = (copy.guard, copy.vec_dim) else {
            self.copy_units(indent, i, iter, buf, copy.vec, &copy.units, copy.method);
            return;
        };
        let n = self.sizes.params[p].clone();
        let mut elements = copy.units.clone();
        elements[c] *= copy.vec;
        let esize = self.bg().inputs()[copy.input].dtype.size_bytes();
        let base = input_param(copy.input);
        let bytes = copy.vec * esize;
        self.line(
            indent,
            &format!("if ({n} % {} == 0 && reinterpret_cast<uintptr_t>({base}) % {bytes} == 0) {{", copy.vec),
        );
        self.copy_units(indent + 1, i, iter, buf, copy.vec, &copy.units, copy.method);
        self.line(indent, "} else {");
        if window::supports(esize, copy.vec) {
            self.copy_window(indent + 1, i, iter, buf);
        } else {
            self.copy_units(indent + 1, i, iter, buf, 1, &elements, CopyMethod::Elements);
        }
        self.line(indent, "}");
    }

    /// Copies input tile `i` of iteration `iter` into `buf` as `units` copy units of `vec`
    /// elements along the tile's vector dim, by `method`.
    #[allow(clippy::too_many_arguments)]
    fn copy_units(
        &mut self,
        indent: usize,
        i: usize,
        iter: &str,
        buf: &str,
        vec: usize,
        units: &[usize],
        method: CopyMethod,
    ) {
        let plan = self.plan;
        let copy = plan.copies[i].as_ref().expect("input copy planned");
        let kdesc = &self.bg().inputs()[copy.input];
        let src = input_param(copy.input);
        let UnitTerms { gterms, sterms, bounds } = self.unit_terms(i, iter, vec, units);
        let conds: Vec<String> = bounds.iter().map(|(_, at, b)| format!("{at} < {b}")).collect();
        let soff = if sterms.is_empty() { "0".to_string() } else { sterms.join(" + ") };
        let total: usize = units.iter().product();
        // `cp_async16`, `cp_async8` or `cp_async4`: one vector per copy unit.
        let bytes = vec * kdesc.dtype.size_bytes();
        let cp_async = format!("mirage::cp_async{bytes}");
        // Runtime-sized dims (the padded-tile rule): elements at or past a size read zeros.
        let bound = if conds.is_empty() { None } else { Some(conds.join(" && ")) };
        if let CopyMethod::CpAsyncStrided { threads, src_step, dst_step } = method {
            let ty = ctype(kdesc.dtype);
            self.line(
                indent,
                &if threads == plan.threads { "{".to_string() } else { format!("if (tid < {threads}) {{") },
            );
            self.line(indent + 1, "const int v = tid;");
            self.line(indent + 1, &format!("const {ty}* src = {src} + ({});", gterms.join(" + ")));
            self.line(indent + 1, &format!("{ty}* dst = {buf} + ({soff});"));
            // The thread's copies at a compile-time count (straight code; only a last partial
            // trip guarded).
            let (full, trips) = (total / threads, total.div_ceil(threads));
            if trips <= super::UNROLL_TRIPS {
                self.line(indent + 1, "#pragma unroll");
            }
            let issue = format!("{cp_async}(dst + q * {dst_step}, src + (long long)q * {src_step});");
            let guarded =
                if full == trips { issue } else { format!("if (q < {full} || tid + q * {threads} < {total}) {issue}") };
            self.line(indent + 1, &format!("for (int q = 0; q < {trips}; ++q) {guarded}"));
            self.line(indent, "}");
            return;
        }
        let close = self.open_strided(indent, "v", "tid", total, plan.threads);
        let inner = indent + close;
        self.line(inner, &format!("const long long go = {};", gterms.join(" + ")));
        match (bound, method.is_async()) {
            (None, true) => self.line(inner, &format!("{cp_async}({buf} + ({soff}), {src} + go);")),
            (None, false) => self.line(inner, &format!("{buf}[{soff}] = {src}[go];")),
            (Some(n), true) => {
                let zero = match bytes {
                    16 => "*reinterpret_cast<uint4*>(d) = make_uint4(0u, 0u, 0u, 0u);",
                    8 => "*reinterpret_cast<uint2*>(d) = make_uint2(0u, 0u);",
                    _ => "*reinterpret_cast<unsigned int*>(d) = 0u;",
                };
                self.line(inner, &format!("auto* d = {buf} + ({soff});"));
                self.line(inner, &format!("if ({n}) {cp_async}(d, {src} + go); else {{ {zero} }}"));
            }
            (Some(n), false) => {
                let ty = ctype(kdesc.dtype);
                self.line(inner, &format!("{buf}[{soff}] = {n} ? {src}[go] : mirage::from_f32<{ty}>(0.0f);"));
            }
        }
        self.close(indent, close);
    }

    /// The index expressions of input tile `i`'s copy units (`units` of `vec` elements along
    /// the vector dim) in iteration `iter`, the unit's index `v`.
    fn unit_terms(&self, i: usize, iter: &str, vec: usize, units: &[usize]) -> UnitTerms {
        let plan = self.plan;
        let tile = plan.out_tile(i);
        let copy = plan.copies[i].as_ref().expect("input copy planned");
        let kdesc = &self.bg().inputs()[copy.input];
        let boff = self.block_offset(i, iter);
        let idx = unflatten("v", units);
        let dims = self.input_dims(copy.input);
        // Strides at the run size when a runtime-sized dim is not the outermost.
        let gstrides: Vec<String> = if dims.is_empty() {
            kdesc.strides.iter().map(usize::to_string).collect()
        } else {
            layout_strides(self.sizes, &kdesc.shape, dims)
        };
        let mut terms = UnitTerms { gterms: Vec::new(), sterms: Vec::new(), bounds: Vec::new() };
        for d in 0..tile.shape.len() {
            let local = if Some(d) == copy.vec_dim && vec > 1 { format!("{}*{}", idx[d], vec) } else { idx[d].clone() };
            terms.gterms.push(format!("(long long)({} + {local})*{}", boff[d], gstrides[d]));
            if tile.shape[d] > 1 {
                terms.sterms.push(format!("({local})*{}", tile.strides[d]));
            }
            if let Some(&s) = dims.get(d)
                && let Some(b) = size_bound(self.sizes, s)
            {
                terms.bounds.push((d, bound_coord(s, &format!("({} + {local})", boff[d])), b));
            }
        }
        terms
    }

    /// The guarded copy's fallback through aligned-down windows (`mirage::window_copy`, the
    /// formula of [`WindowPlan`](super::super::planner::window::WindowPlan)): the vector path's
    /// units, each read with at most two 16-byte loads of the aligned chunks around it, the
    /// elements at or past the runtime size zeroed, stored as one vector. Plain stores: complete
    /// at the barrier before the tile is read, like the element copies.
    fn copy_window(&mut self, indent: usize, i: usize, iter: &str, buf: &str) {
        let plan = self.plan;
        let copy = plan.copies[i].as_ref().expect("input copy planned");
        let c = copy.vec_dim.expect("a guarded copy has a vector dim");
        let vec = copy.vec;
        let kdesc = &self.bg().inputs()[copy.input];
        let src = input_param(copy.input);
        let UnitTerms { gterms, sterms, bounds } = self.unit_terms(i, iter, vec, &copy.units);
        let soff = if sterms.is_empty() { "0".to_string() } else { sterms.join(" + ") };
        // The tensor's elements at the run size: its outermost dim times that dim's stride.
        let dims = self.input_dims(copy.input);
        let strides = layout_strides(self.sizes, &kdesc.shape, dims);
        let outer = match dims.first() {
            Some(DimSize::Var(p)) => self.sizes.params[*p].clone(),
            _ => kdesc.shape[0].to_string(),
        };
        let len = format!("(long long){outer}*{}", strides[0]);
        // Valid elements of the unit along the vector dim; none when another runtime-sized dim
        // puts the whole unit in padding.
        let mut valid = vec.to_string();
        let mut others = Vec::new();
        for (d, at, b) in &bounds {
            if *d == c {
                valid = format!("min(max({b} - {at}, 0), {vec})");
            } else {
                others.push(format!("{at} < {b}"));
            }
        }
        if !others.is_empty() {
            valid = format!("({}) ? {valid} : 0", others.join(" && "));
        }
        let close = self.open_strided(indent, "v", "tid", copy.total, plan.threads);
        let inner = indent + close;
        self.line(inner, &format!("const long long go = {};", gterms.join(" + ")));
        self.line(
            inner,
            &format!("mirage::window_copy<{vec}>({buf} + ({soff}), {src} + go, {valid}, {src}, {src} + {len});"),
        );
        self.close(indent, close);
    }

    /// Copies input tile `i` of iteration `iter` into `buf` row by row with the bulk-copy engine
    /// (`cp.async.bulk`, sm_90), completion counted on mbarrier `bar` (a C pointer expression):
    /// one instruction per row, the threads striding over the rows; one instruction by thread 0
    /// for a tile that is a single run.
    pub(super) fn bulk_tile(&mut self, indent: usize, i: usize, iter: &str, buf: &str, bar: &str) {
        let plan = self.plan;
        let tile = plan.out_tile(i);
        let copy = plan.copies[i].as_ref().expect("input copy planned");
        let bulk = copy.bulk.expect("a bulk-copied tile");
        let c = copy.vec_dim.expect("bulk rows run along the vector dim");
        let kdesc = &self.bg().inputs()[copy.input];
        let src = input_param(copy.input);
        let boff = self.block_offset(i, iter);
        let mut rows = copy.units.clone();
        rows[c] = 1;
        let idx = unflatten("v", &rows);
        let mut gterms = Vec::new();
        let mut sterms = Vec::new();
        for d in 0..tile.shape.len() {
            gterms.push(format!("(long long)({} + {})*{}", boff[d], idx[d], kdesc.strides[d]));
            if tile.shape[d] > 1 && d != c {
                sterms.push(format!("({})*{}", idx[d], tile.strides[d]));
            }
        }
        let soff = if sterms.is_empty() { "0".to_string() } else { sterms.join(" + ") };
        let bytes = bulk.row_bytes;
        if bulk.rows == 1 {
            // The whole tile one run: one instruction from its first element.
            let go: Vec<String> =
                (0..tile.shape.len()).map(|d| format!("(long long)({})*{}", boff[d], kdesc.strides[d])).collect();
            self.line(
                indent,
                &format!("if (tid == 0) mirage::bulk_copy({buf}, {src} + ({}), {bytes}u, {bar});", go.join(" + ")),
            );
            return;
        }
        let total = bulk.rows;
        let close = self.open_strided(indent, "v", "tid", total, plan.threads);
        let inner = indent + close;
        self.line(inner, &format!("const long long go = {};", gterms.join(" + ")));
        self.line(inner, &format!("mirage::bulk_copy({buf} + ({soff}), {src} + go, {bytes}u, {bar});"));
        self.close(indent, close);
    }

    /// Closes the group of asynchronous copies issued since the last commit.
    pub(super) fn commit(&mut self, indent: usize) {
        self.line(indent, "mirage::cp_async_commit();");
    }

    /// Waits until at most `pending` committed groups of asynchronous copies are in flight.
    pub(super) fn wait(&mut self, indent: usize, pending: usize) {
        self.line(indent, &format!("mirage::cp_async_wait<{pending}>();"));
    }
}

/// The index expressions of a tile's copy units: per device dim, the global offset term and the
/// shared-memory offset term (dims of extent 1 have none), and per runtime-sized dim `(dim, the
/// unit's first coordinate along it, its bound)`.
struct UnitTerms {
    gterms: Vec<String>,
    sterms: Vec<String>,
    bounds: Vec<(usize, String, String)>,
}

/// The pointer to stage `stage` (a C expression) of pipelined tile `t`.
pub(super) fn stage_ptr(t: &Tile, stage: &str) -> String {
    format!("reinterpret_cast<{}*>(smem + {} + ({stage})*{})", t.ctype, t.offset, t.bytes)
}
