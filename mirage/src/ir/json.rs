//! Versioned JSON serialization of µGraphs.

use serde::{Deserialize, Serialize};

use super::{BlockGraph, IrError, KernelGraph};

/// The `format` field of every document this module writes.
pub const FORMAT: &str = "mirage-rs/mugraph";
/// The current version of the format; documents of other versions are rejected.
pub const VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
struct Envelope<T> {
    format: String,
    version: u32,
    graph: T,
}

fn write<T: Serialize>(graph: T) -> String {
    let env = Envelope { format: FORMAT.to_string(), version: VERSION, graph };
    // Serializing plain data structs to a string cannot fail: no maps with non-string keys.
    serde_json::to_string_pretty(&env).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

fn read<T: for<'de> Deserialize<'de>>(json: &str) -> Result<T, IrError> {
    #[derive(Deserialize)]
    struct Header {
        format: String,
        version: u32,
    }
    let header: Header = serde_json::from_str(json).map_err(|e| IrError::Format(e.to_string()))?;
    if header.format != FORMAT {
        return Err(IrError::Format(format!("expected format \"{FORMAT}\", found \"{}\"", header.format)));
    }
    if header.version != VERSION {
        return Err(IrError::Format(format!("expected version {VERSION}, found {}", header.version)));
    }
    let env: Envelope<T> = serde_json::from_str(json).map_err(|e| IrError::Format(e.to_string()))?;
    Ok(env.graph)
}

impl KernelGraph {
    /// Serializes to versioned JSON.
    pub fn to_json(&self) -> String {
        write(self)
    }

    /// Reads versioned JSON, checking every operator's rules.
    pub fn from_json(json: &str) -> Result<Self, IrError> {
        read(json)
    }
}

impl BlockGraph {
    /// Serializes to versioned JSON.
    pub fn to_json(&self) -> String {
        write(self)
    }

    /// Reads versioned JSON, checking every operator's rules.
    pub fn from_json(json: &str) -> Result<Self, IrError> {
        read(json)
    }
}
