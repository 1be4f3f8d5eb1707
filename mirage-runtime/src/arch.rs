//! Which code of a module image a device runs (pure: no CUDA call): the architectures a cubin or
//! fatbin holds code for ([`image_archs`]) and the one the driver will pick for a compute
//! capability ([`select_arch`]), so that an image without code for the device is an error naming
//! both before the driver is asked.
//!
//! The rules are CUDA's binary compatibility: a cubin for `sm_XY` runs on compute capability
//! `X.Z` with `Z >= Y`; an architecture-specific cubin (`sm_90a`) only on exactly `X.Y`; PTX for
//! `compute_XY` is compiled by the driver for any compute capability at least `X.Y`.

use std::fmt;

use crate::desc::ComputeCapability;

/// One architecture a module image holds code for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ImageArch {
    /// The SM version, `10 * major + minor` (80, 90, ...).
    pub sm: u32,
    /// Architecture-specific machine code (`sm_90a`): runs on exactly that compute capability.
    pub specific: bool,
    /// PTX rather than machine code (compiled by the driver when loaded).
    pub ptx: bool,
}

impl fmt::Display for ImageArch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let prefix = if self.ptx { "compute" } else { "sm" };
        write!(f, "{prefix}_{}{}", self.sm, if self.specific { "a" } else { "" })
    }
}

impl ImageArch {
    /// Whether a device of compute capability `cc` runs this code.
    pub fn runs_on(&self, cc: ComputeCapability) -> bool {
        let (major, minor) = (self.sm / 10, self.sm % 10);
        if self.specific {
            cc.major == major && cc.minor == minor
        } else if self.ptx {
            cc >= ComputeCapability::new(major, minor)
        } else {
            cc.major == major && cc.minor >= minor
        }
    }
}

const ELF_MAGIC: [u8; 4] = [0x7f, b'E', b'L', b'F'];
const FATBIN_MAGIC: u32 = 0xBA55_ED50;
/// Fatbin entry kinds.
const ENTRY_PTX: u16 = 1;
const ENTRY_ELF: u16 = 2;
/// The fatbin entry flag nvcc sets on architecture-specific (`sm_90a`) code.
const ENTRY_ARCH_SPECIFIC: u32 = 1 << 20;

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The architectures a cubin (one, from its ELF header) or fatbin (one per entry) holds code
/// for; `None` when the bytes are neither or are truncated.
pub fn image_archs(bytes: &[u8]) -> Option<Vec<ImageArch>> {
    if bytes.get(..4)? == ELF_MAGIC {
        // A 64-bit CUDA ELF keeps the SM version in bits 8..16 of e_flags (offset 48). The
        // header does not tell sm_90a from sm_90: count it as plain.
        let flags = u32_at(bytes, 48)?;
        return Some(vec![ImageArch { sm: (flags >> 8) & 0xff, specific: false, ptx: false }]);
    }
    if u32_at(bytes, 0)? != FATBIN_MAGIC {
        return None;
    }
    let header = usize::from(u16_at(bytes, 6)?);
    let size = usize::try_from(u64_at(bytes, 8)?).ok()?;
    let end = header.checked_add(size)?;
    if end > bytes.len() {
        return None;
    }
    let mut archs = Vec::new();
    let mut at = header;
    while at < end {
        let kind = u16_at(bytes, at)?;
        let entry_header = usize::try_from(u32_at(bytes, at + 4)?).ok()?;
        let payload = usize::try_from(u64_at(bytes, at + 8)?).ok()?;
        let sm = u32_at(bytes, at + 28)?;
        let flags = u32_at(bytes, at + 40)?;
        if kind == ENTRY_ELF || kind == ENTRY_PTX {
            let arch = ImageArch { sm, specific: flags & ENTRY_ARCH_SPECIFIC != 0, ptx: kind == ENTRY_PTX };
            if !archs.contains(&arch) {
                archs.push(arch);
            }
        }
        let next = at.checked_add(entry_header)?.checked_add(payload)?;
        if entry_header == 0 || next <= at {
            return None;
        }
        at = next;
    }
    Some(archs)
}

/// The code a device of compute capability `cc` runs from `archs`, as the driver picks it:
/// machine code before PTX, the newest fitting one first; `None` when nothing fits.
pub fn select_arch(cc: ComputeCapability, archs: &[ImageArch]) -> Option<ImageArch> {
    archs.iter().copied().filter(|a| a.runs_on(cc)).max_by_key(|a| (!a.ptx, a.sm, a.specific))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SM80: ImageArch = ImageArch { sm: 80, specific: false, ptx: false };
    const SM90A: ImageArch = ImageArch { sm: 90, specific: true, ptx: false };

    #[test]
    fn selection_follows_binary_compatibility() {
        let both = [SM80, SM90A];
        assert_eq!(select_arch(ComputeCapability::new(8, 0), &both), Some(SM80));
        // L40S (8.9) and A10 (8.6) run sm_80 code.
        assert_eq!(select_arch(ComputeCapability::new(8, 9), &both), Some(SM80));
        assert_eq!(select_arch(ComputeCapability::new(9, 0), &both), Some(SM90A));
        // sm_90a code runs on 9.0 only; Blackwell runs neither.
        assert_eq!(select_arch(ComputeCapability::new(10, 0), &both), None);
        assert_eq!(select_arch(ComputeCapability::new(8, 0), &[SM90A]), None);
        let ptx = ImageArch { sm: 80, specific: false, ptx: true };
        assert_eq!(select_arch(ComputeCapability::new(10, 0), &[SM90A, ptx]), Some(ptx));
        assert_eq!(select_arch(ComputeCapability::new(9, 0), &[SM90A, ptx]), Some(SM90A));
        assert_eq!(SM90A.to_string(), "sm_90a");
        assert_eq!(ptx.to_string(), "compute_80");
    }

    #[test]
    fn image_headers() {
        let mut elf = vec![0u8; 64];
        elf[..4].copy_from_slice(&ELF_MAGIC);
        elf[48..52].copy_from_slice(&0x0600_5004u32.to_le_bytes());
        assert_eq!(image_archs(&elf), Some(vec![SM80]));
        // A fatbin of an sm_80 and an sm_90a entry (headers as nvcc 13 writes them).
        let mut fat = Vec::new();
        fat.extend(FATBIN_MAGIC.to_le_bytes());
        fat.extend(1u16.to_le_bytes());
        fat.extend(16u16.to_le_bytes());
        fat.extend((2 * (64 + 8) as u64).to_le_bytes());
        for (sm, flags) in [(80u32, 0x11u32), (90, 0x10_0011)] {
            let mut entry = vec![0u8; 64];
            entry[..2].copy_from_slice(&ENTRY_ELF.to_le_bytes());
            entry[4..8].copy_from_slice(&64u32.to_le_bytes());
            entry[8..16].copy_from_slice(&8u64.to_le_bytes());
            entry[28..32].copy_from_slice(&sm.to_le_bytes());
            entry[40..44].copy_from_slice(&flags.to_le_bytes());
            fat.extend(entry);
            fat.extend([0u8; 8]);
        }
        assert_eq!(image_archs(&fat), Some(vec![SM80, SM90A]));
        assert_eq!(image_archs(&fat[..fat.len() - 1]), None, "truncated");
        assert_eq!(image_archs(b"not an image"), None);
    }
}
