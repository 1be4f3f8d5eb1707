//! Gathers: rows of a kernel operand read from device memory at the ids of a tile.

use crate::ir::GridMap;

use super::expr::unflatten;
use super::{BLOCK_INDEX, Emitter, input_param};

impl Emitter<'_> {
    /// `gather` node `i`: element `(ids.., c)` of the output tile is column `c0 + c` of row `id`
    /// of kernel operand `table` (`c0` the block's slab of the width), read straight from device
    /// memory in its own layout; an id outside `0..rows` (negative, too large) gives 0. Ids travel
    /// as f32 values, exact below 2^24 (the most rows a table may have).
    pub(super) fn gather(&mut self, indent: usize, i: usize, table: usize, imap: &GridMap) {
        let out = self.plan.out_tile(i);
        let ids = self.tile(self.bg().nodes()[i].inputs[0]);
        let desc = &self.bg().inputs()[table];
        let (rows, width) = (desc.shape[0], out.shape[out.shape.len() - 1]);
        let idx = unflatten("e", &out.shape);
        let r = ids.shape.len();
        let mut col = idx[r].clone();
        for (a, axis) in BLOCK_INDEX.iter().enumerate() {
            if imap[a] == Some(1) {
                col = format!("{axis}*{width} + {col}");
            }
        }
        let body = format!(
            "const float id = {id};\n\
             const float v = (id >= 0.0f && id < {rows}.0f) ? mirage::to_f32({t}[(long long)id*{s0} + (long long)({col})*{s1}]) : 0.0f;\n\
             {store}",
            id = ids.load(&idx[..r]),
            t = input_param(table),
            s0 = desc.strides[0],
            s1 = desc.strides[1],
            store = out.store(&idx, "v"),
        );
        self.elementwise(indent, out.numel(), &body);
    }
}
