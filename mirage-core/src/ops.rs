//! The operator table: the element-wise operators and, for each, one row of facts from which the
//! rest of mirage derives what it needs.
//!
//! A row ([`UnarySpec`], [`BinarySpec`]) gives the operator's name, how the `#[mugraph]` language
//! writes it, its name in Mirage's µGraph JSON, and its algebraic law. From it:
//!
//! - the `#[mugraph]` checker derives its list of functions (every [`Dsl::Function`] row) and the
//!   infix operators (every [`BinaryDsl::Infix`] row);
//! - the importer of Mirage's JSON derives the names it accepts (the `mirage` column);
//! - the fingerprint verifier and both abstract-expression pruners derive how they treat the
//!   operator ([`Law`]): with its algebra, or as an uninterpreted function whose identity is its
//!   name and parameters (`name` and [`Params`]);
//! - tests derive their operator lists from [`UnaryOp::ALL`] and [`BinaryOp::ALL`], and the
//!   operand range they draw inputs from ([`Domain`]).
//!
//! Every table and every per-operator behaviour elsewhere (the f32 reference, the CUDA
//! expression) is an exhaustive `match`: adding a variant makes the compiler list each place the
//! new operator needs, and `ALL`'s length is checked against the number of variants.
//!
//! ```
//! use mirage_core::ops::{Dsl, Law, UnaryOp};
//!
//! let tanh = UnaryOp::Tanh.spec();
//! assert_eq!((tanh.name, tanh.dsl, tanh.law), ("tanh", Dsl::Function, Law::Uninterpreted));
//! let dsl: Vec<&str> = UnaryOp::ALL.iter().filter(|op| op.spec().dsl == Dsl::Function).map(|op| op.name()).collect();
//! assert!(dsl.contains(&"sigmoid") && !dsl.contains(&"mul_scalar"));
//! assert_eq!(UnaryOp::from_mirage("gelu"), Some(UnaryOp::Gelu));
//! ```

use std::fmt;

use serde::{Deserialize, Serialize};
use strum::EnumCount;

use crate::scalar::Scalar;

/// Element-wise unary operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, EnumCount)]
#[serde(rename_all = "snake_case")]
pub enum UnaryOp {
    /// `e^x`.
    Exp,
    /// `x²`.
    Square,
    /// `√x`.
    Sqrt,
    /// `x / (1 + e^-x)`.
    Silu,
    /// `x/2 · (1 + erf(x/√2))` (the exact form).
    Gelu,
    /// `max(x, 0)`.
    Relu,
    /// `-x`.
    Neg,
    /// `1 / x`.
    Recip,
    /// `tanh(x)`.
    Tanh,
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    /// `min(max(x, lo), hi)`.
    Clamp {
        /// Lower bound.
        lo: Scalar,
        /// Upper bound.
        hi: Scalar,
    },
    /// `c · x`.
    MulScalar {
        /// The constant factor.
        c: Scalar,
    },
}

/// How the `#[mugraph]` language writes a unary operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dsl {
    /// A function of one tensor: `name(x)`, or the method `x.name()`.
    Function,
    /// A function with parameters, checked by its own rule in the macro's checker (`clamp(x, lo,
    /// hi)`).
    Special,
    /// Not called by name: produced by arithmetic with float literals (`x * 0.5` is `mul_scalar`).
    Arithmetic,
}

/// What the verifier and the pruners may assume about a unary operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Law {
    /// `e^x`: the fingerprint's field exponential (`exp(a + b) = exp(a) · exp(b)` holds), the
    /// pruners' `exp`.
    Exp,
    /// `x · x`.
    Square,
    /// `0 - x`.
    Neg,
    /// `1 / x`.
    Recip,
    /// `c · x`.
    Scale(Scalar),
    /// No law the search relies on: the fingerprint draws a random function of the argument per
    /// trial, keyed by the name and the parameters; the pruners treat it as an uninterpreted
    /// function of them. Two applications are equal only when name, parameters and argument are.
    Uninterpreted,
}

/// The range of operands on which an operator is finite and well-conditioned (tests draw
/// random inputs from it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Domain {
    /// Every real number of moderate size.
    Real,
    /// Positive numbers (`sqrt`, `recip`).
    Positive,
}

/// The constant parameters of an operator, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Params {
    /// None.
    None,
    /// One constant.
    One(Scalar),
    /// Two constants.
    Two(Scalar, Scalar),
}

impl Params {
    /// The parameters' bits in one word (`a << 32 | b`; 0 without parameters): the identity of
    /// an uninterpreted operator's parameters.
    pub const fn bits(&self) -> u64 {
        match self {
            Params::None => 0,
            Params::One(a) => a.0.to_bits() as u64,
            Params::Two(a, b) => (a.0.to_bits() as u64) << 32 | b.0.to_bits() as u64,
        }
    }
}

impl fmt::Display for Params {
    /// `(0.5)`, `(-0.25, 0.5)`, or nothing.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Params::None => Ok(()),
            Params::One(a) => write!(f, "({a})"),
            Params::Two(a, b) => write!(f, "({a}, {b})"),
        }
    }
}

/// One row of the unary operator table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnarySpec {
    /// The name: the DSL function, the IR's JSON, messages and generated code.
    pub name: &'static str,
    /// The operator's constants.
    pub params: Params,
    /// How the `#[mugraph]` language writes it.
    pub dsl: Dsl,
    /// Mirage's name (`kn_<name>_op`, `tb_<name>_op`) and the operator that an import of it
    /// yields (Mirage serializes no parameters); `None` when Mirage cannot serialize it.
    pub mirage: Option<(&'static str, UnaryOp)>,
    /// What the verifier and the pruners may assume about it.
    pub law: Law,
    /// Where it is finite and well-conditioned.
    pub domain: Domain,
}

impl UnaryOp {
    /// Every unary operator once, in declaration order; those with parameters with example
    /// values. Its length is the number of variants, and the names are distinct (checked at
    /// compile time), so it lists every operator.
    pub const ALL: [UnaryOp; UnaryOp::COUNT] = [
        UnaryOp::Exp,
        UnaryOp::Square,
        UnaryOp::Sqrt,
        UnaryOp::Silu,
        UnaryOp::Gelu,
        UnaryOp::Relu,
        UnaryOp::Neg,
        UnaryOp::Recip,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::Clamp { lo: Scalar(-0.25), hi: Scalar(0.5) },
        UnaryOp::MulScalar { c: Scalar(0.75) },
    ];

    /// The operator's row of the table.
    pub const fn spec(&self) -> UnarySpec {
        use Domain::{Positive, Real};
        let op = *self;
        match op {
            UnaryOp::Exp => UnarySpec {
                name: "exp",
                params: Params::None,
                dsl: Dsl::Function,
                mirage: Some(("exp", op)),
                law: Law::Exp,
                domain: Real,
            },
            UnaryOp::Square => UnarySpec {
                name: "square",
                params: Params::None,
                dsl: Dsl::Function,
                mirage: Some(("square", op)),
                law: Law::Square,
                domain: Real,
            },
            UnaryOp::Sqrt => UnarySpec {
                name: "sqrt",
                params: Params::None,
                dsl: Dsl::Function,
                mirage: Some(("sqrt", op)),
                law: Law::Uninterpreted,
                domain: Positive,
            },
            UnaryOp::Silu => UnarySpec {
                name: "silu",
                params: Params::None,
                dsl: Dsl::Function,
                mirage: Some(("silu", op)),
                law: Law::Uninterpreted,
                domain: Real,
            },
            UnaryOp::Gelu => UnarySpec {
                name: "gelu",
                params: Params::None,
                dsl: Dsl::Function,
                mirage: Some(("gelu", op)),
                law: Law::Uninterpreted,
                domain: Real,
            },
            UnaryOp::Relu => UnarySpec {
                name: "relu",
                params: Params::None,
                dsl: Dsl::Function,
                mirage: Some(("relu", op)),
                law: Law::Uninterpreted,
                domain: Real,
            },
            UnaryOp::Neg => UnarySpec {
                name: "neg",
                params: Params::None,
                dsl: Dsl::Function,
                mirage: None,
                law: Law::Neg,
                domain: Real,
            },
            UnaryOp::Recip => UnarySpec {
                name: "recip",
                params: Params::None,
                dsl: Dsl::Function,
                mirage: None,
                law: Law::Recip,
                domain: Positive,
            },
            UnaryOp::Tanh => UnarySpec {
                name: "tanh",
                params: Params::None,
                dsl: Dsl::Function,
                mirage: None,
                law: Law::Uninterpreted,
                domain: Real,
            },
            UnaryOp::Sigmoid => UnarySpec {
                name: "sigmoid",
                params: Params::None,
                dsl: Dsl::Function,
                // Mirage's enum has a sigmoid, but its JSON reader does not.
                mirage: None,
                law: Law::Uninterpreted,
                domain: Real,
            },
            UnaryOp::Clamp { lo, hi } => UnarySpec {
                name: "clamp",
                params: Params::Two(lo, hi),
                dsl: Dsl::Special,
                // Mirage does not serialize clamp bounds; its runtime hard-codes [0, 1].
                mirage: Some(("clamp", UnaryOp::Clamp { lo: Scalar(0.0), hi: Scalar(1.0) })),
                law: Law::Uninterpreted,
                domain: Real,
            },
            UnaryOp::MulScalar { c } => UnarySpec {
                name: "mul_scalar",
                params: Params::One(c),
                dsl: Dsl::Arithmetic,
                mirage: None,
                law: Law::Scale(c),
                domain: Real,
            },
        }
    }

    /// The operator's name in the DSL, JSON, messages and generated code.
    pub const fn name(&self) -> &'static str {
        self.spec().name
    }

    /// The operator a Mirage µGraph's `kn_<name>_op` / `tb_<name>_op` imports as.
    pub fn from_mirage(name: &str) -> Option<UnaryOp> {
        UnaryOp::ALL.iter().find_map(|op| op.spec().mirage.filter(|(n, _)| *n == name).map(|(_, op)| op))
    }
}

impl fmt::Display for UnaryOp {
    /// The name and its parameters: `exp`, `clamp(-0.25, 0.5)`, `mul_scalar(0.75)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let spec = self.spec();
        write!(f, "{}{}", spec.name, spec.params)
    }
}

/// Element-wise binary operators with size-1 broadcasting between operands of equal rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, EnumCount)]
#[serde(rename_all = "snake_case")]
pub enum BinaryOp {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a · b`.
    Mul,
    /// `a / b`.
    Div,
    /// `a ^ b`.
    Pow,
}

/// How the `#[mugraph]` language writes a binary operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryDsl {
    /// An infix operator between tensors: `a + b`.
    Infix(&'static str),
    /// A function of two tensors with its own rule in the checker (`pow(a, b)` also takes a
    /// literal exponent).
    Special,
}

/// One row of the binary operator table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BinarySpec {
    /// The name: the IR's JSON, messages and generated code.
    pub name: &'static str,
    /// How the `#[mugraph]` language writes it.
    pub dsl: BinaryDsl,
    /// Mirage's name (`kn_<name>_op`, `tb_<name>_op`), or `None` when it has none.
    pub mirage: Option<&'static str>,
    /// Whether `a op b == b op a`.
    pub commutative: bool,
}

impl BinaryOp {
    /// Every binary operator once, in declaration order (checked at compile time to list every
    /// operator).
    pub const ALL: [BinaryOp; BinaryOp::COUNT] =
        [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Pow];

    /// The operator's row of the table.
    pub const fn spec(self) -> BinarySpec {
        match self {
            BinaryOp::Add => {
                BinarySpec { name: "add", dsl: BinaryDsl::Infix("+"), mirage: Some("add"), commutative: true }
            }
            BinaryOp::Sub => {
                BinarySpec { name: "sub", dsl: BinaryDsl::Infix("-"), mirage: Some("sub"), commutative: false }
            }
            BinaryOp::Mul => {
                BinarySpec { name: "mul", dsl: BinaryDsl::Infix("*"), mirage: Some("mul"), commutative: true }
            }
            BinaryOp::Div => {
                BinarySpec { name: "div", dsl: BinaryDsl::Infix("/"), mirage: Some("div"), commutative: false }
            }
            BinaryOp::Pow => {
                BinarySpec { name: "pow", dsl: BinaryDsl::Special, mirage: Some("pow"), commutative: false }
            }
        }
    }

    /// The operator's name in JSON, messages and generated code.
    pub const fn name(self) -> &'static str {
        self.spec().name
    }

    /// Whether `a op b == b op a`.
    pub const fn is_commutative(self) -> bool {
        self.spec().commutative
    }

    /// The operator written `symbol` between two tensors in the DSL.
    pub fn from_infix(symbol: &str) -> Option<BinaryOp> {
        BinaryOp::ALL.into_iter().find(|op| matches!(op.spec().dsl, BinaryDsl::Infix(s) if s == symbol))
    }

    /// The operator a Mirage µGraph's `kn_<name>_op` / `tb_<name>_op` imports as.
    pub fn from_mirage(name: &str) -> Option<BinaryOp> {
        BinaryOp::ALL.into_iter().find(|op| op.spec().mirage == Some(name))
    }
}

impl fmt::Display for BinaryOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

// `ALL` has one entry per variant (its type says so) and distinct names, so it lists every
// operator exactly once.
const _: () = {
    let all = UnaryOp::ALL;
    let mut i = 0;
    while i < all.len() {
        let mut j = i + 1;
        while j < all.len() {
            assert!(!str_eq(all[i].name(), all[j].name()), "UnaryOp::ALL lists an operator twice, or two share a name");
            j += 1;
        }
        i += 1;
    }
    let all = BinaryOp::ALL;
    let mut i = 0;
    while i < all.len() {
        let mut j = i + 1;
        while j < all.len() {
            assert!(
                !str_eq(all[i].name(), all[j].name()),
                "BinaryOp::ALL lists an operator twice, or two share a name"
            );
            j += 1;
        }
        i += 1;
    }
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_names_are_the_table_names() {
        for op in UnaryOp::ALL {
            let json = serde_json::to_value(op).expect("serializes");
            let tag =
                json.as_str().map(str::to_string).or_else(|| json.as_object().and_then(|o| o.keys().next().cloned()));
            assert_eq!(tag.as_deref(), Some(op.name()), "{json}");
            assert_eq!(serde_json::from_value::<UnaryOp>(json).ok(), Some(op));
        }
        for op in BinaryOp::ALL {
            assert_eq!(serde_json::to_value(op).ok(), Some(serde_json::Value::from(op.name())));
        }
    }

    #[test]
    fn display_shows_the_parameters() {
        assert_eq!(UnaryOp::Exp.to_string(), "exp");
        assert_eq!(UnaryOp::Clamp { lo: Scalar(-0.25), hi: Scalar(0.5) }.to_string(), "clamp(-0.25, 0.5)");
        assert_eq!(UnaryOp::MulScalar { c: Scalar(0.75) }.to_string(), "mul_scalar(0.75)");
        assert_eq!(
            Params::Two(Scalar(1.0), Scalar(2.0)).bits(),
            (1.0f32.to_bits() as u64) << 32 | 2.0f32.to_bits() as u64
        );
    }

    #[test]
    fn mirage_names() {
        assert_eq!(UnaryOp::from_mirage("clamp"), Some(UnaryOp::Clamp { lo: Scalar(0.0), hi: Scalar(1.0) }));
        assert_eq!(UnaryOp::from_mirage("sigmoid"), None);
        assert_eq!(BinaryOp::from_mirage("pow"), Some(BinaryOp::Pow));
        for op in UnaryOp::ALL {
            if let Some((name, imported)) = op.spec().mirage {
                assert_eq!(imported.name(), op.name(), "{name} imports as its own operator");
            }
        }
    }

    #[test]
    fn infix_operators() {
        assert_eq!(BinaryOp::from_infix("-"), Some(BinaryOp::Sub));
        assert_eq!(BinaryOp::from_infix("%"), None);
        assert!(BinaryOp::Mul.is_commutative() && !BinaryOp::Div.is_commutative());
    }
}
