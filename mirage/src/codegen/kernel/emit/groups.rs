//! Element-wise groups: every member computed per element in registers, in one pass.

use std::fmt::Write;

use crate::ir::{BlockOp, TensorRef};

use super::super::super::CodegenError;
use super::Emitter;
use super::expr::{binary_expr, unary_expr, unflatten};

impl Emitter<'_> {
    /// Emits element-wise group `gid` as one pass (see
    /// [`ElementwiseGroups`](super::super::planner::ElementwiseGroups)): an `rms_norm` head's row
    /// sums first, then one loop over the elements computing every member, storing the members
    /// read outside the group and writing the group's savers.
    pub(super) fn group(&mut self, indent: usize, gid: usize) -> Result<(), CodegenError> {
        let plan = self.plan;
        let members = &plan.groups.groups[gid];
        let shape = &plan.groups.shapes[gid];
        let numel: usize = shape.iter().product();
        let nodes = self.bg().nodes();
        let names: Vec<String> = members.iter().map(|&i| nodes[i].op.name()).collect();
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
            let nd = &nodes[i];
            let value = match &nd.op {
                BlockOp::Unary { op } => unary_expr(op, &operand(nd.inputs[0])),
                BlockOp::Binary { op } => binary_expr(*op, &operand(nd.inputs[0]), &operand(nd.inputs[1])),
                BlockOp::RmsNorm { eps } => {
                    let row = shape.last().copied().unwrap_or(1);
                    self.rms_scale(i, &operand(nd.inputs[0]), row, eps.0)
                }
                BlockOp::Output { .. } => {
                    let value = format!("v{}", nd.inputs[0].node);
                    writeln!(body, "{}", self.saver_store(i, shape, &idx, &value)).ok();
                    continue;
                }
                _ => return Err(CodegenError::Unsupported(format!("{} in an element-wise group", nd.op.name()))),
            };
            writeln!(body, "const float v{i} = {value};").ok();
            if !plan.groups.in_register[i] {
                let t = plan.tiles[i][0].as_ref().expect("stored group members have tiles");
                writeln!(body, "{}", t.store(&idx, &self.zero_padding(i, &idx, format!("v{i}")))).ok();
            }
        }
        self.elementwise(indent, numel, body.trim_end());
        Ok(())
    }
}
