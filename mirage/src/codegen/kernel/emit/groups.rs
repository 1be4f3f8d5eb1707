//! Element-wise groups: every member computed per element in registers, in one pass.

use std::fmt::Write;

use crate::ir::{BlockOp, TensorRef};

use super::super::super::CodegenError;
use super::super::planner::{Tile, element_bytes, pass_vector};
use super::Emitter;
use super::expr::{binary_expr, unary_expr, unflatten};

/// The C type moving `v` elements of tile `t` at once (a vector of the element-wise pass).
fn vector_type(v: usize, t: &Tile) -> &'static str {
    let element = element_bytes(t.ctype).unwrap_or(2);
    match v * element {
        16 => "uint4",
        8 => "uint2",
        4 => "unsigned int",
        _ => "unsigned short",
    }
}

impl<'a> Emitter<'a> {
    /// Emits element-wise group `gid` as one pass (see
    /// [`ElementwiseGroups`](super::super::planner::ElementwiseGroups)): an `rms_norm` head's row
    /// sums first, then one loop over the elements computing every member, storing the members
    /// read outside the group and writing the group's savers; `v` elements of a row per thread
    /// and step where every tile allows vectors of them ([`pass_vector`]; not under an `rms_norm`
    /// head, whose scaling reads its row sum per element, nor under a `reduce_sum` head, whose
    /// terms lie along another dim).
    pub(super) fn group(&mut self, indent: usize, gid: usize) -> Result<(), CodegenError> {
        let plan = self.plan;
        let members = &plan.groups.groups[gid];
        let shape = &plan.groups.shapes[gid];
        let numel: usize = shape.iter().product();
        let nodes = self.bg().nodes();
        let names: Vec<String> = members.iter().map(|&i| nodes[i].op.name()).collect();
        if !matches!(nodes[members[0]].op, BlockOp::RmsNorm { .. } | BlockOp::ReduceSum { .. }) {
            let v = pass_vector(shape, &self.group_tiles(gid), plan.threads);
            if v > 1 {
                return self.group_vector(indent, gid, v);
            }
        }
        self.line(indent, &format!("// one pass: {}", names.join(", ")));
        if let BlockOp::RmsNorm { .. } = nodes[members[0]].op {
            self.rms_row_sums(indent, members[0]);
        }
        let idx = unflatten("e", shape);
        let operand = |t: TensorRef| -> String {
            if t.port == 0 && members.contains(&t.node) { format!("v{}", t.node) } else { self.tile(t).load(&idx) }
        };
        let mut body = String::new();
        for &i in members {
            let Some(value) = self.member_value(i, shape, &idx, &operand, &mut body)? else { continue };
            writeln!(body, "const float v{i} = {value};").ok();
            if !plan.groups.in_register[i] {
                let t = plan.tiles[i][0].as_ref().expect("stored group members have tiles");
                let store = t.store(&idx, &self.zero_padding(i, &idx, format!("v{i}")));
                if plan.groups.scalar[i] {
                    // Every element computes the scalar; the first stores it.
                    writeln!(body, "if (e == 0) {{ {store} }}").ok();
                } else {
                    writeln!(body, "{store}").ok();
                }
            }
        }
        self.elementwise(indent, numel, body.trim_end());
        Ok(())
    }

    /// The f32 expression of group member `i` at multi-index `idx` of the pass over `shape`, its
    /// operands given by `operand`; for a saver, its store is written to `body` instead (`None`).
    fn member_value(
        &self,
        i: usize,
        shape: &[usize],
        idx: &[String],
        operand: &dyn Fn(TensorRef) -> String,
        body: &mut String,
    ) -> Result<Option<String>, CodegenError> {
        let nd = &self.bg().nodes()[i];
        Ok(Some(match &nd.op {
            BlockOp::Unary { op } => unary_expr(op, &operand(nd.inputs[0])),
            BlockOp::Binary { op } => binary_expr(*op, &operand(nd.inputs[0]), &operand(nd.inputs[1])),
            BlockOp::RmsNorm { eps } => {
                let row = shape.last().copied().unwrap_or(1);
                self.rms_scale(i, &operand(nd.inputs[0]), row, eps.0)
            }
            BlockOp::ReduceSum { dim } => {
                // A sum over a leading dim heading the pass (`ElementwiseGroups`): this element's
                // terms in order from zero, padding of a runtime size left out, as the
                // reduction's own pass added them.
                let x = nd.inputs[0];
                let t = self.tile(x);
                let mut at = idx.to_vec();
                at[*dim] = format!("k{i}");
                let term = match self.valid_along(x, *dim, &at[*dim]) {
                    Some(c) => format!("(({c}) ? {} : 0.0f)", t.load(&at)),
                    None => t.load(&at),
                };
                writeln!(body, "float r{i} = 0.0f;").ok();
                writeln!(body, "for (int k{i} = 0; k{i} < {}; ++k{i}) {{ r{i} = r{i} + {term}; }}", t.shape[*dim]).ok();
                format!("r{i}")
            }
            BlockOp::Output { .. } => {
                let value = format!("v{}", nd.inputs[0].node);
                writeln!(body, "{}", self.saver_store(i, shape, idx, &value)).ok();
                return Ok(None);
            }
            _ => return Err(CodegenError::Unsupported(format!("{} in an element-wise group", nd.op.name()))),
        }))
    }

    /// The shared-memory tiles pass `gid` touches: the operands it reads from tiles (not members
    /// in registers) and the members it stores.
    fn group_tiles(&self, gid: usize) -> Vec<&'a Tile> {
        let plan = self.plan;
        let members = &plan.groups.groups[gid];
        let nodes = self.bg().nodes();
        let mut tiles = Vec::new();
        for &i in members {
            let nd = &nodes[i];
            if matches!(nd.op, BlockOp::Output { .. }) {
                continue;
            }
            for &t in &nd.inputs {
                if !(t.port == 0 && members.contains(&t.node)) {
                    tiles.push(self.tile(t));
                }
            }
            if !plan.groups.in_register[i] {
                tiles.push(plan.tiles[i][0].as_ref().expect("stored group members have tiles"));
            }
        }
        tiles
    }

    /// Element-wise group `gid` with `v` consecutive elements of one row per thread and step
    /// ([`pass_vector`]): each operand tile varying along the row is read as one vector into
    /// registers, each stored member written as one vector; the members are computed element by
    /// element (the same expressions as the scalar pass, so the same values), savers store per
    /// element.
    fn group_vector(&mut self, indent: usize, gid: usize, v: usize) -> Result<(), CodegenError> {
        let plan = self.plan;
        let members = &plan.groups.groups[gid];
        let shape = &plan.groups.shapes[gid];
        let numel: usize = shape.iter().product();
        let r = shape.len();
        let nodes = self.bg().nodes();
        let names: Vec<String> = members.iter().map(|&i| nodes[i].op.name()).collect();
        self.line(indent, &format!("// one pass: {} ({v} elements of a row per thread and step)", names.join(", ")));
        let idx0 = unflatten("e0", shape);
        let mut idx = idx0.clone();
        idx[r - 1] = format!("({} + u)", idx0[r - 1]);
        let vectored = |t: &Tile| t.shape.len() == r && t.shape[r - 1] > 1;
        // Operand tiles read as vectors, in first-use order: (operand, register array).
        let mut loads: Vec<(TensorRef, String)> = Vec::new();
        let mut pre = String::new();
        for &i in members {
            if matches!(nodes[i].op, BlockOp::Output { .. }) {
                continue;
            }
            for &t in &nodes[i].inputs {
                if (t.port == 0 && members.contains(&t.node)) || loads.iter().any(|(l, _)| *l == t) {
                    continue;
                }
                let tile = self.tile(t);
                if !vectored(tile) {
                    continue;
                }
                let name = format!("x{}_{}", t.node, t.port);
                let vt = vector_type(v, tile);
                writeln!(
                    pre,
                    "alignas(16) {} {name}[{v}];\n*reinterpret_cast<{vt}*>({name}) = *reinterpret_cast<const {vt}*>(&{}[{}]);",
                    tile.ctype,
                    tile.var,
                    tile.offset_expr(&idx0)
                )
                .ok();
                loads.push((t, name));
            }
        }
        let operand = |t: TensorRef| -> String {
            if t.port == 0 && members.contains(&t.node) {
                return format!("v{}", t.node);
            }
            match loads.iter().find(|(l, _)| *l == t) {
                Some((_, name)) => self.tile(t).as_f32(&format!("{name}[u]")),
                None => self.tile(t).load(&idx),
            }
        };
        let mut body = String::new();
        let mut post = String::new();
        for &i in members {
            let Some(value) = self.member_value(i, shape, &idx, &operand, &mut body)? else { continue };
            writeln!(body, "const float v{i} = {value};").ok();
            if plan.groups.in_register[i] {
                continue;
            }
            let t = plan.tiles[i][0].as_ref().expect("stored group members have tiles");
            let stored = self.zero_padding(i, &idx, format!("v{i}"));
            if plan.groups.scalar[i] {
                // Every element computes the scalar; the first stores it.
                writeln!(body, "if (e0 == 0 && u == 0) {{ {} }}", t.store(&idx, &stored)).ok();
                continue;
            }
            if !vectored(t) {
                writeln!(body, "{}", t.store(&idx, &stored)).ok();
                continue;
            }
            let name = format!("s{i}");
            let vt = vector_type(v, t);
            writeln!(pre, "alignas(16) {} {name}[{v}];", t.ctype).ok();
            writeln!(body, "{name}[u] = {};", t.f32_to_element(&stored)).ok();
            writeln!(
                post,
                "*reinterpret_cast<{vt}*>(&{}[{}]) = *reinterpret_cast<const {vt}*>({name});",
                t.var,
                t.offset_expr(&idx0)
            )
            .ok();
        }
        let threads = plan.threads;
        let close = self.open_strided(indent, "e0", &format!("tid * {v}"), numel, threads * v);
        let inner = indent + close;
        for l in pre.lines() {
            self.line(inner, l);
        }
        self.line(inner, "#pragma unroll");
        self.line(inner, &format!("for (int u = 0; u < {v}; ++u) {{"));
        for l in body.lines() {
            self.line(inner + 1, l);
        }
        self.line(inner, "}");
        for l in post.lines() {
            self.line(inner, l);
        }
        self.close(indent, close);
        Ok(())
    }
}
