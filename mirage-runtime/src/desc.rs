//! Plain descriptions the rest of the crate speaks about: a device's compute capability
//! ([`ComputeCapability`]) and a kernel's launch configuration ([`LaunchConfig`]). No CUDA calls
//! and no crate imports: this module and `error` are the bottom of the crate.

use std::fmt;

/// A compute capability `major.minor` (9.0 is Hopper, 8.0 is Ampere A100).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ComputeCapability {
    /// Major version.
    pub major: u32,
    /// Minor version.
    pub minor: u32,
}

impl ComputeCapability {
    /// A compute capability from its two parts.
    pub const fn new(major: u32, minor: u32) -> Self {
        ComputeCapability { major, minor }
    }
}

impl fmt::Display for ComputeCapability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// How a kernel is launched: grid and block dimensions and dynamic shared memory per block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LaunchConfig {
    /// Blocks in the grid, (x, y, z).
    pub grid: (u32, u32, u32),
    /// Threads in a block, (x, y, z).
    pub block: (u32, u32, u32),
    /// Dynamic shared memory per block, in bytes.
    pub dynamic_smem_bytes: u32,
}

impl fmt::Display for LaunchConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (g, b) = (self.grid, self.block);
        write!(
            f,
            "grid ({}, {}, {}), block ({}, {}, {}), {} bytes of dynamic shared memory",
            g.0, g.1, g.2, b.0, b.1, b.2, self.dynamic_smem_bytes
        )
    }
}

impl LaunchConfig {
    /// A configuration from its parts.
    pub const fn new(grid: (u32, u32, u32), block: (u32, u32, u32), dynamic_smem_bytes: u32) -> Self {
        LaunchConfig { grid, block, dynamic_smem_bytes }
    }

    /// Threads per block (product of the block dimensions), without overflow.
    pub fn threads_per_block(&self) -> u64 {
        u64::from(self.block.0) * u64::from(self.block.1) * u64::from(self.block.2)
    }
}
