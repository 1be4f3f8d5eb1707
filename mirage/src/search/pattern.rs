//! Pieces the written templates (`search::attention`, `search::norm_split`) share: walking a
//! program's kernel graph back from its output to recognize it, and starting a candidate graph
//! over the program's own inputs.

use crate::ir::{IrError, KernelGraph, KernelOp, TensorRef};

/// The operator producing `t` and its operands.
pub(crate) fn producer(g: &KernelGraph, t: TensorRef) -> (&KernelOp, &[TensorRef]) {
    let n = &g.nodes()[t.node];
    (&n.op, &n.inputs)
}

/// The position of `t` among the program inputs, when it is one.
pub(crate) fn input_position(g: &KernelGraph, t: TensorRef) -> Option<usize> {
    if !matches!(g.nodes()[t.node].op, KernelOp::Input { .. }) {
        return None;
    }
    Some(g.nodes()[..t.node].iter().filter(|n| matches!(n.op, KernelOp::Input { .. })).count())
}

/// A new graph with `program`'s inputs (shapes, strides and types, in order) and those inputs.
pub(crate) fn graph_over_inputs(program: &KernelGraph) -> Result<(KernelGraph, Vec<TensorRef>), IrError> {
    let mut g = KernelGraph::new();
    let ins = program
        .inputs()
        .iter()
        .map(|d| g.input_strided(&d.shape, &d.strides, d.dtype))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((g, ins))
}
