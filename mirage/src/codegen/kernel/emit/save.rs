//! Output savers: each block writes its slab of a kernel output.

use crate::ir::{BlockOp, row_major_strides};

use super::super::planner::ctype;
use super::expr::unflatten;
use super::{BLOCK_INDEX, Emitter, bound_coord, layout_strides, output_param, size_bound};

impl Emitter<'_> {
    /// Saver `i` writes its operand tile to its output, element by element.
    pub(super) fn saver(&mut self, indent: usize, i: usize) {
        let t = self.tile(self.bg().nodes()[i].inputs[0]);
        let idx = unflatten("e", &t.shape);
        let store = self.saver_store(i, &t.shape, &idx, &t.load(&idx));
        self.elementwise(indent, t.numel(), &store);
    }

    /// The statement of saver `i` writing `value`, the element at multi-index `idx` of its
    /// operand tile of shape `shape`, to the row-major output at the block's slab.
    pub(super) fn saver_store(&self, i: usize, shape: &[usize], idx: &[String], value: &str) -> String {
        let BlockOp::Output { omap, .. } = &self.bg().nodes()[i].op else { return String::new() };
        let saver = self.plan.schedule.saver_of[i].expect("savers are numbered");
        let desc = &self.bg().output_descs()[saver];
        let dims = self.output_dims(saver);
        let gstr: Vec<String> = if dims.is_empty() {
            row_major_strides(&desc.shape).iter().map(usize::to_string).collect()
        } else {
            layout_strides(self.sizes, &desc.shape, dims)
        };
        let coords: Vec<String> = (0..shape.len())
            .map(|d| {
                let mut off = Vec::new();
                for (a, axis) in BLOCK_INDEX.iter().enumerate() {
                    if omap[a] == Some(d) {
                        off.push(format!("{axis}*{}", shape[d]));
                    }
                }
                off.push(idx[d].clone());
                off.join(" + ")
            })
            .collect();
        let terms: Vec<String> = coords.iter().zip(&gstr).map(|(c, s)| format!("(long long)({c})*{s}")).collect();
        let store = format!(
            "{}[{}] = mirage::from_f32<{}>({value});",
            output_param(saver),
            terms.join(" + "),
            ctype(desc.dtype)
        );
        // Runtime-sized dims: elements at or past a size are not written.
        let conds: Vec<String> = (0..shape.len())
            .filter_map(|d| {
                dims.get(d)
                    .and_then(|&s| size_bound(self.sizes, s).map(|n| format!("({}) < {n}", bound_coord(s, &coords[d]))))
            })
            .collect();
        if conds.is_empty() { store } else { format!("if ({}) {store}", conds.join(" && ")) }
    }
}
