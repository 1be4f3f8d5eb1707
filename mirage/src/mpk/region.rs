//! Boxes of tensor elements: what a task reads and writes. Dependencies are derived from their
//! overlaps, and the weight regions a task prefetches are boxes turned into contiguous runs.

use crate::ir::{BlockGraph, BlockOp, normalize_map};

use super::graph::TensorId;

/// A half-open box `[lo, hi)` of logical indices of one tensor (row-major index space; the
/// storage layout enters only when a box becomes byte runs).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Region {
    /// The tensor.
    pub tensor: TensorId,
    /// First index of each dim.
    pub lo: Vec<usize>,
    /// One past the last index of each dim.
    pub hi: Vec<usize>,
}

impl Region {
    /// The whole of a tensor of `shape`.
    pub fn whole(tensor: TensorId, shape: &[usize]) -> Region {
        Region { tensor, lo: vec![0; shape.len()], hi: shape.to_vec() }
    }

    /// A box from its first index and extent.
    pub fn at(tensor: TensorId, lo: Vec<usize>, extent: &[usize]) -> Region {
        let hi = lo.iter().zip(extent).map(|(l, e)| l + e).collect();
        Region { tensor, lo, hi }
    }

    /// Number of elements.
    pub fn volume(&self) -> usize {
        self.lo.iter().zip(&self.hi).map(|(l, h)| h.saturating_sub(*l)).product()
    }

    /// Whether two boxes share an element (same tensor, every dim's ranges intersect).
    pub fn overlaps(&self, other: &Region) -> bool {
        self.tensor == other.tensor
            && self.lo.len() == other.lo.len()
            && (0..self.lo.len()).all(|d| self.lo[d] < other.hi[d] && other.lo[d] < self.hi[d])
    }

    /// Whether `other` lies inside this box.
    pub fn contains(&self, other: &Region) -> bool {
        self.tensor == other.tensor
            && self.lo.len() == other.lo.len()
            && (0..self.lo.len()).all(|d| self.lo[d] <= other.lo[d] && other.hi[d] <= self.hi[d])
    }

    /// The box as a strided pattern of contiguous byte runs in a tensor with element `strides`
    /// and elements of `elem_bytes` ([`RunPattern`]), cut to at most about `limit` bytes
    /// (whole runs, outermost dims cut first). `None` for an empty box or a limit of 0.
    pub fn run_pattern(&self, strides: &[usize], elem_bytes: usize, limit: usize) -> Option<RunPattern> {
        let rank = self.lo.len();
        let extent: Vec<usize> = (0..rank).map(|d| self.hi[d].saturating_sub(self.lo[d])).collect();
        if rank == 0 || extent.contains(&0) || limit == 0 {
            return None;
        }
        let offset = (0..rank).map(|d| self.lo[d] * strides[d]).sum::<usize>() * elem_bytes;
        // The run: the stride-1 dim, then every dim whose step continues it contiguously.
        let inner = (0..rank).rev().find(|&d| strides[d] == 1 && extent[d] > 1);
        let mut run = 1usize;
        let mut merged = vec![false; rank];
        if let Some(i) = inner {
            run = extent[i];
            merged[i] = true;
            while let Some(d) = (0..rank).find(|&d| !merged[d] && extent[d] > 1 && strides[d] == run) {
                run *= extent[d];
                merged[d] = true;
            }
        }
        let mut outer: Vec<(usize, usize)> =
            (0..rank).filter(|&d| !merged[d] && extent[d] > 1).map(|d| (extent[d], strides[d] * elem_bytes)).collect();
        // Outermost (largest stride) first.
        outer.sort_by_key(|&(_, stride)| std::cmp::Reverse(stride));
        let run_bytes = run * elem_bytes;
        let mut count = [1usize; 3];
        let mut stride = [0usize; 3];
        for (k, &(c, s)) in outer.iter().enumerate() {
            count[k] = c;
            stride[k] = s;
        }
        // Cut to the limit: the outermost count first.
        for k in 0..3 {
            let inner_bytes = run_bytes * count[k + 1..].iter().product::<usize>();
            let total = inner_bytes * count[k];
            if total > limit {
                count[k] = (limit / inner_bytes).max(1);
                if count[k] > 1 || inner_bytes <= limit {
                    break;
                }
            }
        }
        let run_bytes = run_bytes.min(limit);
        Some(RunPattern { offset, run_bytes, count, stride })
    }
}

/// Contiguous runs of bytes laid out in up to three strided dims: run `(i, j, k)` starts at
/// `offset + i·stride[0] + j·stride[1] + k·stride[2]` and is `run_bytes` long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunPattern {
    /// Byte offset of the first run.
    pub offset: usize,
    /// Bytes per run.
    pub run_bytes: usize,
    /// Runs along each strided dim.
    pub count: [usize; 3],
    /// Byte stride of each strided dim.
    pub stride: [usize; 3],
}

impl RunPattern {
    /// Bytes covered.
    pub fn bytes(&self) -> usize {
        self.run_bytes * self.count.iter().product::<usize>()
    }
}

/// The boxes block `tile` of a block graph reads from each of its operands (over all loop
/// iterations): for each input iterator, its operand's slab along the dims the grid splits,
/// whole along the others. `operands[j]` is the tensor of the block graph's input `j`.
pub fn block_reads(bg: &BlockGraph, operands: &[TensorId], tile: [usize; 3]) -> Vec<Region> {
    let grid = bg.grid();
    let mut out = Vec::new();
    for node in bg.nodes() {
        if let BlockOp::Input { input, imap, .. } = &node.op {
            let shape = &bg.inputs()[*input].shape;
            let imap = normalize_map(imap, grid);
            let mut lo = vec![0; shape.len()];
            let mut hi = shape.clone();
            for a in 0..3 {
                if let Some(d) = imap[a] {
                    let slab = shape[d] / grid[a];
                    lo[d] = tile[a] * slab;
                    hi[d] = lo[d] + slab;
                }
            }
            out.push(Region { tensor: operands[*input], lo, hi });
        }
    }
    out
}

/// The boxes block `tile` writes, one per output saver (in order): its tile at `tile[a] × S[d]`
/// along each dim `d` an axis `a` concatenates along. `outputs[k]` is the tensor of saver `k`.
pub fn block_writes(bg: &BlockGraph, outputs: &[TensorId], tile: [usize; 3]) -> Vec<Region> {
    let grid = bg.grid();
    let mut out = Vec::new();
    for node in bg.nodes() {
        if let BlockOp::Output { omap, .. } = &node.op {
            let t = node.inputs[0];
            let shape = &bg.nodes()[t.node].outputs[t.port].shape;
            let omap = normalize_map(omap, grid);
            let mut lo = vec![0; shape.len()];
            for a in 0..3 {
                if let Some(d) = omap[a] {
                    lo[d] = tile[a] * shape[d];
                }
            }
            out.push(Region::at(outputs[out.len()], lo, shape));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(lo: &[usize], hi: &[usize]) -> Region {
        Region { tensor: TensorId(0), lo: lo.to_vec(), hi: hi.to_vec() }
    }

    #[test]
    fn overlap_and_containment() {
        assert!(r(&[0, 0], &[2, 4]).overlaps(&r(&[1, 3], &[3, 5])));
        assert!(!r(&[0, 0], &[2, 4]).overlaps(&r(&[2, 0], &[3, 4])));
        assert!(!r(&[0, 0], &[2, 4]).overlaps(&Region { tensor: TensorId(1), lo: vec![0, 0], hi: vec![2, 4] }));
        assert!(r(&[0, 0], &[4, 4]).contains(&r(&[1, 1], &[2, 4])));
        assert!(!r(&[0, 0], &[4, 4]).contains(&r(&[1, 1], &[2, 5])));
        assert_eq!(r(&[1, 2], &[3, 5]).volume(), 6);
    }

    #[test]
    fn run_patterns_of_row_major_and_column_major_boxes() {
        let pat = |r: &Region, strides: &[usize], limit| r.run_pattern(strides, 2, limit).expect("a non-empty box");
        // rows 1..3, cols 4..8 of a [4, 16] f16 tensor: two runs of 8 bytes, 32 bytes apart.
        let b = r(&[1, 4], &[3, 8]);
        assert_eq!(
            pat(&b, &[16, 1], usize::MAX),
            RunPattern { offset: 40, run_bytes: 8, count: [2, 1, 1], stride: [32, 0, 0] }
        );
        // whole rows merge into one run.
        let rows = pat(&r(&[1, 0], &[3, 16]), &[16, 1], usize::MAX);
        assert_eq!((rows.offset, rows.run_bytes, rows.count), (32, 64, [1, 1, 1]));
        // column-major [4, 16] (strides [1, 4]): dim 0 is contiguous, dim 1 strides 8 bytes.
        assert_eq!(
            pat(&b, &[1, 4], usize::MAX),
            RunPattern { offset: 34, run_bytes: 4, count: [4, 1, 1], stride: [8, 0, 0] }
        );
        // a 3-D box: [2, 3, 4] of a [4, 8, 16] tensor.
        let c = pat(&r(&[0, 1, 2], &[2, 4, 6]), &[128, 16, 1], usize::MAX);
        assert_eq!((c.run_bytes, c.count, c.stride), (8, [2, 3, 1], [256, 32, 0]));
        assert_eq!(c.bytes(), 48);
        // the limit cuts the outermost count first.
        assert_eq!(pat(&r(&[0, 0], &[4, 8]), &[16, 1], 40).count, [2, 1, 1]);
        assert_eq!(pat(&r(&[0, 0], &[4, 8]), &[16, 1], 10).run_bytes, 10);
        assert!(b.run_pattern(&[16, 1], 2, 0).is_none());
    }
}
