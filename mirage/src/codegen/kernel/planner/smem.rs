//! Shared-memory planning from tile lifetimes: first-fit placement of byte ranges whose live
//! intervals overlap.

/// A live range over the kernel's schedule positions, inclusive at both ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interval {
    /// First position where the tile is written.
    pub start: usize,
    /// Last position where it is read.
    pub end: usize,
}

impl Interval {
    fn overlaps(&self, other: &Interval) -> bool {
        self.start <= other.end && other.start <= self.end
    }
}

/// Alignment of every placement (bytes): enough for 16-byte vectors and bank-friendly starts.
pub const ALIGN: usize = 128;

/// Places tiles in one shared-memory arena.
#[derive(Debug, Default)]
pub struct SmemPlanner {
    placed: Vec<(usize, usize, Interval)>,
}

impl SmemPlanner {
    /// Places `bytes` live during `live`; returns the byte offset. Ranges of tiles whose
    /// lifetimes do not overlap may share bytes.
    pub fn alloc(&mut self, bytes: usize, live: Interval) -> usize {
        let bytes = bytes.max(1).div_ceil(ALIGN) * ALIGN;
        let mut candidates: Vec<usize> =
            std::iter::once(0).chain(self.placed.iter().filter(|p| p.2.overlaps(&live)).map(|p| p.0 + p.1)).collect();
        candidates.sort_unstable();
        let offset = candidates
            .into_iter()
            .find(|&off| self.placed.iter().all(|&(o, b, iv)| !iv.overlaps(&live) || off + bytes <= o || o + b <= off))
            .unwrap_or(0);
        self.placed.push((offset, bytes, live));
        offset
    }

    /// Total bytes needed.
    pub fn total(&self) -> usize {
        self.placed.iter().map(|p| p.0 + p.1).max().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disjoint_lifetimes_share_and_overlapping_do_not() {
        let mut p = SmemPlanner::default();
        let a = p.alloc(256, Interval { start: 0, end: 2 });
        let b = p.alloc(256, Interval { start: 1, end: 3 });
        let c = p.alloc(256, Interval { start: 3, end: 4 });
        assert_eq!(a, 0);
        assert_eq!(b, 256);
        assert_eq!(c, 0, "a is dead at 3, so c reuses its bytes");
        assert_eq!(p.total(), 512);
    }
}
