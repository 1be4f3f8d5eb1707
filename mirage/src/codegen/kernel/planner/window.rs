//! Window copies: a copy unit of `vec` elements that starts at any element-aligned address, read
//! with 16-byte loads of the aligned-down window around it.
//!
//! A guarded vector copy along a runtime-sized contiguous dim (`TileCopy::guard`) copies whole
//! vectors when the size `n` is a multiple of the vector. When it is not, the rows of the tensor
//! start at element-aligned addresses only and a row's last vector straddles `n`. The window copy
//! serves that case with the same copy units as the vector path: for the unit's first byte at
//! address `a`, it loads the aligned 16-byte chunks at `a & !15` and, when the unit's valid bytes
//! reach past that chunk, the next one; it shifts the unit's bytes out of the two chunks with a
//! select network over 32-bit words and `__byte_perm`, zeroes the bytes of the elements past the
//! valid count, and the caller stores the unit as one vector into the (aligned) shared-memory tile.
//!
//! Memory safety does not rest on the tensor's alignment or size: a chunk is loaded only when it
//! lies wholly inside the tensor's bytes `[lo, hi)`. A unit whose needed chunks do not (the first
//! or last chunk of a tensor whose base is not 16-byte aligned or whose byte size is not a multiple
//! of 16) is copied element by element instead.
//!
//! [`WindowPlan`] is the formula, in Rust, of `mirage::window_copy` in the device library
//! (`mirage/cuda/mirage_device.cuh`): the chunk, the word and byte shift, the loads and the masks.
//! Its tests check it against element copies for every size, tile offset and base misalignment.

/// Bytes in one aligned chunk (one `uint4` load).
pub const CHUNK_BYTES: u64 = 16;

/// Whether guarded copies of `vec` elements of `esize` bytes fall back to window copies: units
/// of 4, 8 or 16 bytes of 2- or 4-byte elements (the types `mirage::window_copy` converts a zero
/// to); others copy element by element.
pub fn supports(esize: usize, vec: usize) -> bool {
    matches!(esize, 2 | 4) && matches!(vec * esize, 4 | 8 | 16)
}

/// How one copy unit is read through its aligned-down window (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowPlan {
    /// The address of the first aligned chunk (the unit's first byte, aligned down to 16).
    pub chunk: u64,
    /// The unit's first byte within that chunk, as 32-bit words (`b >> 2`): the select network's
    /// word shift.
    pub q: u32,
    /// The rest of the byte shift (`b & 3`): the `__byte_perm` selector is `0x3210 + 0x1111 * r`.
    pub r: u32,
    /// Which of the two chunks hold valid bytes and are loaded (`[first, second]`).
    pub loads: [bool; 2],
    /// Whether every loaded chunk lies inside the tensor's bytes; when not, the unit is copied
    /// element by element and nothing is loaded in 16-byte chunks.
    pub whole: bool,
    /// Per 32-bit word of the unit: the bits kept (the bytes of valid elements).
    pub masks: Vec<u32>,
}

impl WindowPlan {
    /// The plan for a unit of `unit_bytes` bytes (4, 8 or 16) at byte address `addr`, whose first
    /// `valid_bytes` bytes are elements (the rest zeros), in a tensor occupying `[lo, hi)`.
    pub fn new(addr: u64, unit_bytes: u32, valid_bytes: u32, lo: u64, hi: u64) -> Self {
        let b = (addr & (CHUNK_BYTES - 1)) as u32;
        let chunk = addr - u64::from(b);
        let need0 = valid_bytes > 0;
        let need1 = b + valid_bytes > CHUNK_BYTES as u32;
        let inside = |c: u64| c >= lo && c + CHUNK_BYTES <= hi;
        let whole = (!need0 || inside(chunk)) && (!need1 || inside(chunk + CHUNK_BYTES));
        let masks = (0..unit_bytes / 4)
            .map(|j| {
                let keep = valid_bytes.saturating_sub(4 * j).min(4);
                if keep >= 4 { u32::MAX } else { (1u32 << (8 * keep)) - 1 }
            })
            .collect();
        WindowPlan { chunk, q: b >> 2, r: b & 3, loads: [need0, need1], whole, masks }
    }

    /// The `__byte_perm` selector that takes bytes `r..r + 4` of the pair `(lo, hi)`.
    pub fn selector(&self) -> u32 {
        0x3210 + 0x1111 * self.r
    }

    /// The unit's bytes from the loaded chunks `w` (8 little-endian words: the first chunk, then
    /// the second; zeros for a chunk not loaded), as `mirage::window_copy` computes them: shift by
    /// two words when `q & 2`, by one when `q & 1`, then by `r` bytes, then mask.
    pub fn gather(&self, w: &[u32; 8]) -> Vec<u32> {
        let s2: Vec<u32> = (0..6).map(|j| if self.q & 2 != 0 { w[j + 2] } else { w[j] }).collect();
        let s1: Vec<u32> = (0..5).map(|j| if self.q & 1 != 0 { s2[j + 1] } else { s2[j] }).collect();
        let sel = self.selector();
        self.masks.iter().enumerate().map(|(j, m)| byte_perm(s1[j], s1[j + 1], sel) & m).collect()
    }
}

/// CUDA's `__byte_perm(x, y, s)` (default mode): byte `i` of the result is byte `s >> 4i & 7` of
/// the 8 bytes `y:x` (x the low four).
pub fn byte_perm(x: u32, y: u32, s: u32) -> u32 {
    let pair = u64::from(x) | (u64::from(y) << 32);
    (0..4).fold(0u32, |acc, i| {
        let k = (s >> (4 * i)) & 7;
        acc | ((((pair >> (8 * k)) & 0xff) as u32) << (8 * i))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tensor of `len` elements of `esize` bytes at byte address `base` in a memory image; the
    /// element `e` has bytes derived from its index, so a wrong element or byte order shows.
    struct Mem {
        bytes: Vec<u8>,
        base: u64,
        len: u64,
        esize: u64,
    }

    impl Mem {
        fn new(base: u64, len: u64, esize: u64) -> Self {
            // The image reaches one chunk past the tensor on both sides (what a load outside the
            // tensor would read), filled with a value no element has.
            let size = (base + len * esize + 2 * CHUNK_BYTES) as usize;
            let mut bytes = vec![0xEE; size];
            for e in 0..len {
                for k in 0..esize {
                    bytes[(base + e * esize + k) as usize] = (e * 7 + k * 3 + 1) as u8 | (0x40 * (k as u8 & 1));
                }
            }
            Mem { bytes, base, len, esize }
        }

        fn word(&self, a: u64) -> u32 {
            let a = a as usize;
            u32::from_le_bytes([self.bytes[a], self.bytes[a + 1], self.bytes[a + 2], self.bytes[a + 3]])
        }

        /// The window plan of the unit of `vec` elements from element `e0` with `valid` valid
        /// elements.
        fn plan(&self, e0: u64, vec: u64, valid: u64) -> WindowPlan {
            let hi = self.base + self.len * self.esize;
            WindowPlan::new(
                self.base + e0 * self.esize,
                (vec * self.esize) as u32,
                (valid * self.esize) as u32,
                self.base,
                hi,
            )
        }

        /// The unit of `vec` elements from element `e0` with `valid` valid elements, through the
        /// window plan (or element by element where the plan says so), as bytes.
        fn window(&self, e0: u64, vec: u64, valid: u64) -> Vec<u8> {
            let hi = self.base + self.len * self.esize;
            let p = self.plan(e0, vec, valid);
            if !p.whole {
                return self.elements(e0, vec, valid);
            }
            let mut w = [0u32; 8];
            for (c, load) in p.loads.iter().enumerate() {
                if !load {
                    continue;
                }
                let a = p.chunk + c as u64 * CHUNK_BYTES;
                assert!(a >= self.base && a + CHUNK_BYTES <= hi, "a 16-byte load outside the tensor at {a}");
                for k in 0..4 {
                    w[c * 4 + k] = self.word(a + 4 * k as u64);
                }
            }
            p.gather(&w).iter().flat_map(|x| x.to_le_bytes()).collect()
        }

        /// The same unit element by element (the reference).
        fn elements(&self, e0: u64, vec: u64, valid: u64) -> Vec<u8> {
            (0..vec * self.esize)
                .map(
                    |k| if k / self.esize < valid { self.bytes[(self.base + e0 * self.esize + k) as usize] } else { 0 },
                )
                .collect()
        }
    }

    /// Every unit of a `[rows, s]` tensor's key tiles of `tile` elements (units of `vec`), every
    /// tile offset, matches the element copy; returns how many units went element by element.
    fn check(base: u64, rows: u64, s: u64, tile: u64, vec: u64, esize: u64) -> usize {
        let mem = Mem::new(base, rows * s, esize);
        let mut by_elements = 0;
        for row in 0..rows {
            for t0 in (0..s.div_ceil(tile) * tile).step_by(tile as usize) {
                for u in (0..tile).step_by(vec as usize) {
                    let s0 = t0 + u;
                    let valid = s.saturating_sub(s0).min(vec);
                    let e0 = row * s + s0;
                    let got = mem.window(e0, vec, valid);
                    let want = mem.elements(e0, vec, valid);
                    assert_eq!(got, want, "S = {s}, base {base}, row {row}, key {s0}, vec {vec}, esize {esize}");
                    by_elements += usize::from(!mem.plan(e0, vec, valid).whole);
                }
            }
        }
        by_elements
    }

    #[test]
    fn byte_perm_takes_the_selected_bytes_of_the_pair() {
        assert_eq!(byte_perm(0x3322_1100, 0x7766_5544, 0x3210), 0x3322_1100);
        assert_eq!(byte_perm(0x3322_1100, 0x7766_5544, 0x5432), 0x5544_3322);
        assert_eq!(byte_perm(0x3322_1100, 0x7766_5544, 0x4321), 0x4433_2211);
        assert_eq!(byte_perm(0x3322_1100, 0x7766_5544, 0x6543), 0x6655_4433);
    }

    #[test]
    fn window_units_match_element_copies_for_every_size_and_tile_offset() {
        // bf16 keys in 16-byte units (the K of attention over S), 8-byte units (a guard of 4),
        // and f32 in 16-byte units; key tiles of 16 and 64; bases aligned and misaligned by
        // whole elements.
        for s in 1..=64 {
            for tile in [16, 64] {
                for base in [0, 2, 6, 14, 32] {
                    check(base, 3, s, tile, 8, 2);
                    check(base, 3, s, tile, 4, 2);
                }
                for base in [0, 4, 12] {
                    check(base, 3, s, tile, 4, 4);
                }
            }
        }
        for s in [255, 4097] {
            check(0, 2, s, 128, 8, 2);
        }
    }

    #[test]
    fn an_aligned_tensor_of_whole_chunks_needs_no_element_copies() {
        // Base 16-byte aligned and byte size a multiple of 16 (rows·S·2 ≡ 0 mod 16): every chunk
        // holding a valid byte lies inside the tensor.
        for s in 1..=64 {
            assert_eq!(check(0, 8, s, 64, 8, 2), 0, "S = {s}");
        }
        // Otherwise only units that need the tensor's first or last chunk go element by element:
        // 51 keys (102 bytes) in rows of 17, the last row's units at keys 8 and 16; a base 2
        // bytes past alignment, the first unit and the last.
        assert_eq!(check(0, 3, 17, 64, 8, 2), 2);
        assert_eq!(check(2, 1, 64, 64, 8, 2), 2);
    }

    #[test]
    fn masks_keep_the_bytes_of_valid_elements() {
        let p = WindowPlan::new(6, 16, 6, 0, 64);
        assert_eq!((p.chunk, p.q, p.r, p.loads, p.whole), (0, 1, 2, [true, false], true));
        assert_eq!(p.masks, vec![u32::MAX, 0xffff, 0, 0]);
        assert_eq!(p.selector(), 0x5432);
        let p = WindowPlan::new(14, 16, 16, 0, 64);
        assert_eq!((p.chunk, p.q, p.r, p.loads), (0, 3, 2, [true, true]));
        let p = WindowPlan::new(30, 16, 0, 0, 32);
        assert_eq!((p.loads, p.whole, p.masks), ([false, false], true, vec![0; 4]));
    }
}
