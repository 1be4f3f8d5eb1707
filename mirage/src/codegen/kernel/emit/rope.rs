//! Rotary embeddings: each element of a head combined with its partner in the rotated pair.

use crate::ir::RopeLayout;

use super::Emitter;
use super::expr::unflatten;

impl Emitter<'_> {
    /// `rope` node `i`: for element `p` of a row (last dim), with `j = p mod h` its place in its
    /// head of `h = 2·cos.last` elements, the pair (`mirage::rope_pair_*`, the pairs of
    /// [`RopeLayout::pair`]) gives its partner and angle `k`:
    /// `y = x·cos_k ∓ x_partner·sin_k`.
    pub(super) fn rope(&mut self, indent: usize, i: usize, layout: RopeLayout) {
        let out = self.plan.out_tile(i);
        let inputs = &self.bg().nodes()[i].inputs;
        let (x, cos, sin) = (self.tile(inputs[0]), self.tile(inputs[1]), self.tile(inputs[2]));
        let last = out.shape.len() - 1;
        let head = 2 * cos.shape[last];
        let idx = unflatten("e", &out.shape);
        let mut partner = idx.clone();
        partner[last] = "pp".into();
        let mut angle = idx.clone();
        angle[last] = "q.angle".into();
        let pair = match layout {
            RopeLayout::HalfSplit => "mirage::rope_pair_half_split",
            RopeLayout::Interleaved => "mirage::rope_pair_interleaved",
        };
        let body = format!(
            "const int p = {p}, j = p % {head};\n\
             const mirage::RopePair q = {pair}(j, {head});\n\
             const int pp = p - j + q.partner;\n\
             const float c = {c}, s = {s}, a = {a}, b = {b};\n\
             {store}",
            p = idx[last],
            c = cos.load(&angle),
            s = sin.load(&angle),
            a = x.load(&idx),
            b = x.load(&partner),
            store = out.store(&idx, "q.first ? a * c - b * s : a * c + b * s"),
        );
        self.elementwise(indent, out.numel(), &body);
    }
}
