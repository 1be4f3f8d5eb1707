//! Canonical hashes: equal for graphs that differ only in node numbering or in the insertion
//! order of independent operators; different when wiring, shapes, strides, dtypes, maps, ranges
//! or constants differ.
//!
//! Each node is hashed from its operator and the hashes of its operands (so numbering does not
//! enter); inputs and outputs also hash their position (the signature's order is meaningful). The
//! graph's hash is that of the sorted list of its node hashes.

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::{BlockGraph, BlockOp, KernelGraph, KernelOp};

/// A 256-bit canonical hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CanonicalHash(pub [u8; 32]);

impl CanonicalHash {
    /// Lower-case hex, as used in cache keys and artifact names.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl std::fmt::Display for CanonicalHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_hex())
    }
}

fn json<T: Serialize>(v: &T) -> Vec<u8> {
    // Plain data (no maps with non-string keys): serialization cannot fail.
    serde_json::to_vec(v).unwrap_or_default()
}

struct NodeHasher(Sha256);

impl NodeHasher {
    fn new(tag: &str) -> Self {
        let mut h = Sha256::new();
        h.update(tag.as_bytes());
        h.update([0]);
        NodeHasher(h)
    }
    fn bytes(mut self, b: &[u8]) -> Self {
        self.0.update((b.len() as u64).to_le_bytes());
        self.0.update(b);
        self
    }
    fn finish(self) -> [u8; 32] {
        self.0.finalize().into()
    }
}

fn operand_hashes(node_hashes: &[[u8; 32]], inputs: &[super::TensorRef]) -> Vec<u8> {
    let mut out = Vec::new();
    for t in inputs {
        out.extend_from_slice(&node_hashes[t.node]);
        out.extend_from_slice(&(t.port as u64).to_le_bytes());
    }
    out
}

fn combine(tag: &str, header: &[u8], mut node_hashes: Vec<[u8; 32]>) -> [u8; 32] {
    node_hashes.sort_unstable();
    let mut h = NodeHasher::new(tag).bytes(header);
    for n in &node_hashes {
        h = h.bytes(n);
    }
    h.finish()
}

impl BlockGraph {
    /// The canonical hash of this block graph.
    pub fn canonical_hash(&self) -> CanonicalHash {
        let mut hashes: Vec<[u8; 32]> = Vec::with_capacity(self.nodes().len());
        let mut saver = 0u64;
        for node in self.nodes() {
            let operands = operand_hashes(&hashes, &node.inputs);
            let mut h =
                NodeHasher::new("block-node").bytes(&json(&node.op)).bytes(&operands).bytes(&json(&node.outputs));
            if matches!(node.op, BlockOp::Output { .. }) {
                h = h.bytes(&saver.to_le_bytes());
                saver += 1;
            }
            hashes.push(h.finish());
        }
        let header = json(&(self.grid(), self.threads(), self.forloop_range(), self.inputs()));
        CanonicalHash(combine("block-graph", &header, hashes))
    }
}

impl KernelGraph {
    /// The canonical hash of this kernel graph.
    pub fn canonical_hash(&self) -> CanonicalHash {
        let mut hashes: Vec<[u8; 32]> = Vec::with_capacity(self.nodes().len());
        let (mut input, mut output) = (0u64, 0u64);
        for node in self.nodes() {
            let operands = operand_hashes(&hashes, &node.inputs);
            let h = match &node.op {
                KernelOp::Input { desc } => {
                    input += 1;
                    NodeHasher::new("input").bytes(&json(desc)).bytes(&(input - 1).to_le_bytes())
                }
                KernelOp::Output { strides } => {
                    output += 1;
                    NodeHasher::new("output").bytes(&json(strides)).bytes(&operands).bytes(&(output - 1).to_le_bytes())
                }
                KernelOp::Custom { block } => {
                    NodeHasher::new("custom").bytes(&block.canonical_hash().0).bytes(&operands)
                }
                op => NodeHasher::new("kernel-node").bytes(&json(op)).bytes(&operands).bytes(&json(&node.outputs)),
            };
            hashes.push(h.finish());
        }
        CanonicalHash(combine("kernel-graph", &[], hashes))
    }
}
