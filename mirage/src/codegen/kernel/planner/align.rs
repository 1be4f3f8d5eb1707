//! The alignment every pointer parameter of a kernel needs: what the launcher checks before it
//! hands a caller's device pointer to the kernel (`mirage_runtime::plan::KernelLaunch::arg_align`).
//!
//! A kernel moves device memory at `base + offset` only in two ways:
//! - input tiles, copied in vectors of `vec` elements (16-, 8- or 4-byte `cp.async`, or rows of
//!   the bulk-copy engine, which are 16-byte vectors) or element by element ([`super::TileCopy`]);
//!   every vector's offset is a multiple of the vector (`planner::copies` keeps vectors only where
//!   every static stride and block offset is), so the base must be aligned to the vector;
//! - everything else (savers, gathers) loads or stores single elements: the element's alignment.
//!
//! A guarded copy (vectors along a runtime-sized contiguous dim, `TileCopy::guard`) checks at
//! run time, with the size, that its base is aligned to the vector, and otherwise copies the same
//! units through aligned-down windows or element by element (the emitter's `copy_tile`), which
//! need the element's alignment only: such an input needs no more.

use super::KernelPlan;

/// Per kernel parameter — the block graph's inputs, then its outputs, in the kernel's parameter
/// order — the alignment in bytes its device pointer needs: the widest unguarded vector copied
/// from it (see the module docs), at least the element size.
pub fn param_align(plan: &KernelPlan<'_>) -> Vec<usize> {
    let bg = plan.bg;
    let mut align: Vec<usize> = bg.inputs().iter().map(|d| d.dtype.size_bytes()).collect();
    for copy in plan.copies.iter().flatten() {
        let es = bg.inputs()[copy.input].dtype.size_bytes();
        let mut need = if copy.guard.is_some() { es } else { copy.vec * es };
        if copy.bulk.is_some() {
            // Rows of the bulk-copy engine start 16-byte aligned.
            need = need.max(16);
        }
        align[copy.input] = align[copy.input].max(need);
    }
    align.extend(bg.output_descs().iter().map(|d| d.dtype.size_bytes()));
    align
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AccKind, BlockGraph, DType, IrError, TensorDesc};

    /// `y[8, 1] = sum(x[8, w], 1)`, one row per block, the row copied once.
    fn row_sum(w: usize, dtype: DType) -> Result<BlockGraph, IrError> {
        let mut bg = BlockGraph::new(vec![TensorDesc::new(&[8, w], dtype)], [8, 1, 1], 128, 1)?;
        let x = bg.input(0, [Some(0), None, None], None)?;
        let s = bg.accum(AccKind::SumLast, &[x])?;
        bg.output(s, [Some(0), None, None])?;
        Ok(bg)
    }

    #[test]
    fn an_input_needs_its_widest_vector_and_an_output_its_element() -> Result<(), IrError> {
        // 64 halves a row: 16-byte vectors; 12 (24 bytes a row): 8-byte; 6 (12 bytes): 4-byte;
        // 9: element by element.
        for (w, dtype, want) in [
            (64, DType::F16, 16),
            (12, DType::F16, 8),
            (6, DType::F16, 4),
            (9, DType::F16, 2),
            (64, DType::F32, 16),
            (5, DType::F32, 4),
        ] {
            let bg = row_sum(w, dtype)?;
            let plan = super::super::plan(&bg, 1);
            let es = dtype.size_bytes();
            assert_eq!(param_align(&plan), vec![want, es], "rows of {w} {}", dtype.name());
        }
        Ok(())
    }
}
