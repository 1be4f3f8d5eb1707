//! The IR's error type.

/// An operator was applied against its shape, type or structure rule, or a serialized graph was
/// malformed. Messages name the operator, the shapes involved and the rule that was broken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IrError {
    /// An operator's rule was broken.
    #[error("{op} on {shapes}: {rule}")]
    Rule {
        /// The operator (`matmul`, `input iterator`, ...).
        op: String,
        /// The shapes (or other operands) it was applied to.
        shapes: String,
        /// The rule that failed, with what was expected and found.
        rule: String,
    },
    /// A serialized graph could not be read.
    #[error("invalid µGraph JSON: {0}")]
    Format(String),
}

impl IrError {
    /// Builds an [`IrError::Rule`].
    pub fn rule(op: impl Into<String>, shapes: impl Into<String>, rule: impl Into<String>) -> Self {
        IrError::Rule { op: op.into(), shapes: shapes.into(), rule: rule.into() }
    }
}
