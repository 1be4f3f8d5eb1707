//! The kernel graph: a DAG of operators over device tensors (DESIGN §4).

use serde::{Deserialize, Serialize};

use super::IrError;
use super::block::BlockGraph;
use super::ops::{
    BinaryOp, UnaryOp, broadcast_shape, check_dim, check_rms_norm_weight, concat_shape, matmul_shape, reduce_shape,
};
use super::types::{DType, Scalar, TensorDesc, TensorRef, check_shape, check_strides, fmt_shape, row_major_strides};

/// A kernel-graph operator.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum KernelOp {
    /// A program input: the next parameter, with the given shape, layout and element type.
    Input {
        /// The parameter's tensor.
        desc: TensorDesc,
    },
    /// Marks its operand as the next program output, with an optional device layout.
    Output {
        /// Element strides of the output buffer; `None` = row-major.
        strides: Option<Vec<usize>>,
    },
    /// Batched matrix product.
    Matmul,
    /// Element-wise unary function.
    Unary {
        /// Which function.
        op: UnaryOp,
    },
    /// Element-wise binary function with size-1 broadcasting.
    Binary {
        /// Which function.
        op: BinaryOp,
    },
    /// Sum over `dim`, keeping it with size 1.
    ReduceSum {
        /// The reduced dim.
        dim: usize,
    },
    /// Maximum over `dim`, keeping it with size 1.
    ReduceMax {
        /// The reduced dim.
        dim: usize,
    },
    /// `x / sqrt(mean(x², last dim) + eps)`, times `weight` (second operand, shape `[last]`
    /// broadcast, given as a tensor of the same rank with leading dims 1) when present.
    RmsNorm {
        /// Added to the mean square.
        eps: Scalar,
    },
    /// Concatenation along `dim`.
    Concat {
        /// The concatenation dim.
        dim: usize,
    },
    /// A graph-defined kernel: one CUDA launch.
    Custom {
        /// The kernel's block graph.
        block: Box<BlockGraph>,
    },
}

impl KernelOp {
    /// The operator's name in messages.
    pub fn name(&self) -> String {
        match self {
            KernelOp::Input { .. } => "input".into(),
            KernelOp::Output { .. } => "output".into(),
            KernelOp::Matmul => "matmul".into(),
            KernelOp::Unary { op } => op.to_string(),
            KernelOp::Binary { op } => op.to_string(),
            KernelOp::ReduceSum { dim } => format!("reduce_sum({dim})"),
            KernelOp::ReduceMax { dim } => format!("reduce_max({dim})"),
            KernelOp::RmsNorm { .. } => "rms_norm".into(),
            KernelOp::Concat { dim } => format!("concat({dim})"),
            KernelOp::Custom { .. } => "custom".into(),
        }
    }
}

/// One operator with its operands and the tensors it produces.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KernelNode {
    /// The operator.
    pub op: KernelOp,
    /// Operands, produced by earlier nodes.
    pub inputs: Vec<TensorRef>,
    /// Produced tensors (none for `Output`).
    pub outputs: Vec<TensorDesc>,
}

/// A kernel graph. Nodes are kept in a topological order (operands before users); inputs and
/// outputs are numbered by the order of their `Input` and `Output` nodes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct KernelGraph {
    nodes: Vec<KernelNode>,
}

fn same_dtype(op: &str, descs: &[&TensorDesc]) -> Result<DType, IrError> {
    let dtype = descs[0].dtype;
    if let Some(other) = descs.iter().find(|d| d.dtype != dtype) {
        return Err(IrError::rule(
            op,
            descs.iter().map(|d| format!("{}:{}", fmt_shape(&d.shape), d.dtype)).collect::<Vec<_>>().join(", "),
            format!("operands must have one element type, found {dtype} and {}", other.dtype),
        ));
    }
    Ok(dtype)
}

/// Infers the output tensors of `op` applied to `inputs` (the shape rule of every operator).
pub fn infer_kernel_op(op: &KernelOp, inputs: &[&TensorDesc]) -> Result<Vec<TensorDesc>, IrError> {
    let name = op.name();
    let arity = match op {
        KernelOp::Input { .. } => 0,
        KernelOp::Output { .. } | KernelOp::Unary { .. } | KernelOp::ReduceSum { .. } | KernelOp::ReduceMax { .. } => 1,
        KernelOp::Matmul | KernelOp::Binary { .. } | KernelOp::Concat { .. } => 2,
        KernelOp::RmsNorm { .. } => {
            if inputs.len() == 1 || inputs.len() == 2 {
                inputs.len()
            } else {
                usize::MAX
            }
        }
        KernelOp::Custom { block } => block.inputs().len(),
    };
    if inputs.len() != arity {
        return Err(IrError::rule(&name, format!("{} operands", inputs.len()), format!("expects {arity} operands")));
    }
    let plain = |shape: Vec<usize>, dtype: DType| {
        check_shape(&name, &shape)?;
        Ok(vec![TensorDesc::new(&shape, dtype)])
    };
    match op {
        KernelOp::Input { desc } => {
            check_shape("input", &desc.shape)?;
            check_strides("input", &desc.shape, &desc.strides)?;
            Ok(vec![desc.clone()])
        }
        KernelOp::Output { strides } => {
            if let Some(s) = strides {
                check_strides("output", &inputs[0].shape, s)?;
            }
            Ok(vec![])
        }
        KernelOp::Matmul => {
            let dtype = same_dtype(&name, inputs)?;
            plain(matmul_shape(&inputs[0].shape, &inputs[1].shape, true)?, dtype)
        }
        KernelOp::Unary { .. } => plain(inputs[0].shape.clone(), inputs[0].dtype),
        KernelOp::Binary { op } => {
            let dtype = same_dtype(&name, inputs)?;
            plain(broadcast_shape(op.name(), &inputs[0].shape, &inputs[1].shape)?, dtype)
        }
        KernelOp::ReduceSum { dim } | KernelOp::ReduceMax { dim } => {
            plain(reduce_shape(&name, &inputs[0].shape, *dim, 1)?, inputs[0].dtype)
        }
        KernelOp::RmsNorm { .. } => {
            let x = &inputs[0].shape;
            if let Some(w) = inputs.get(1) {
                same_dtype(&name, inputs)?;
                check_rms_norm_weight(&name, x, &w.shape)?;
            }
            plain(x.clone(), inputs[0].dtype)
        }
        KernelOp::Concat { dim } => {
            let dtype = same_dtype(&name, inputs)?;
            check_dim(&name, &inputs[0].shape, *dim)?;
            plain(concat_shape(&inputs[0].shape, &inputs[1].shape, *dim)?, dtype)
        }
        KernelOp::Custom { block } => {
            for (i, (given, expected)) in inputs.iter().zip(block.inputs()).enumerate() {
                if *given != expected {
                    return Err(IrError::rule(
                        "custom",
                        format!("operand {i}: {} strides {:?} {}", fmt_shape(&given.shape), given.strides, given.dtype),
                        format!(
                            "the block graph was built for {} strides {:?} {}",
                            fmt_shape(&expected.shape),
                            expected.strides,
                            expected.dtype
                        ),
                    ));
                }
            }
            block.validate()?;
            Ok(block.output_descs())
        }
    }
}

impl KernelGraph {
    /// An empty graph.
    pub fn new() -> Self {
        Self::default()
    }

    /// The nodes in topological order.
    pub fn nodes(&self) -> &[KernelNode] {
        &self.nodes
    }

    /// The description of a tensor of this graph.
    pub fn desc(&self, t: TensorRef) -> Result<&TensorDesc, IrError> {
        self.nodes.get(t.node).and_then(|n| n.outputs.get(t.port)).ok_or_else(|| {
            IrError::rule("operand", t.to_string(), format!("no such tensor in a graph of {} nodes", self.nodes.len()))
        })
    }

    /// Appends `op` applied to `inputs` after checking its rule; returns its outputs.
    pub fn push(&mut self, op: KernelOp, inputs: &[TensorRef]) -> Result<Vec<TensorRef>, IrError> {
        let descs = inputs.iter().map(|&t| self.desc(t)).collect::<Result<Vec<_>, _>>()?;
        let outputs = infer_kernel_op(&op, &descs)?;
        let node = self.nodes.len();
        let refs = (0..outputs.len()).map(|port| TensorRef { node, port }).collect();
        self.nodes.push(KernelNode { op, inputs: inputs.to_vec(), outputs });
        Ok(refs)
    }

    fn push1(&mut self, op: KernelOp, inputs: &[TensorRef]) -> Result<TensorRef, IrError> {
        Ok(self.push(op, inputs)?[0])
    }

    /// Builds a graph from nodes (e.g. deserialized), checking every rule and the topological order.
    pub fn from_nodes(nodes: Vec<KernelNode>) -> Result<Self, IrError> {
        let mut g = KernelGraph::new();
        for (i, node) in nodes.into_iter().enumerate() {
            if let Some(bad) = node.inputs.iter().find(|t| t.node >= i) {
                return Err(IrError::rule(
                    node.op.name(),
                    format!("node {i}"),
                    format!("operand {bad} is not produced by an earlier node"),
                ));
            }
            let refs = g.push(node.op, &node.inputs)?;
            let inferred = &g.nodes[i].outputs;
            if *inferred != node.outputs {
                return Err(IrError::rule(
                    g.nodes[i].op.name(),
                    format!("node {i}"),
                    format!("recorded outputs {:?} differ from the inferred {:?}", node.outputs, inferred),
                ));
            }
            debug_assert_eq!(refs.len(), inferred.len());
        }
        Ok(g)
    }

    /// Checks every rule again (used after deserialization).
    pub fn validate(&self) -> Result<(), IrError> {
        Self::from_nodes(self.nodes.clone()).map(|_| ())
    }

    /// Adds the next program input, row-major.
    pub fn input(&mut self, shape: &[usize], dtype: DType) -> Result<TensorRef, IrError> {
        check_shape("input", shape)?;
        self.push1(KernelOp::Input { desc: TensorDesc::new(shape, dtype) }, &[])
    }

    /// Adds the next program input with explicit element strides.
    pub fn input_strided(&mut self, shape: &[usize], strides: &[usize], dtype: DType) -> Result<TensorRef, IrError> {
        let desc = TensorDesc { shape: shape.to_vec(), strides: strides.to_vec(), dtype };
        self.push1(KernelOp::Input { desc }, &[])
    }

    /// Marks `t` as the next program output (row-major, or with `strides`).
    pub fn output(&mut self, t: TensorRef, strides: Option<Vec<usize>>) -> Result<(), IrError> {
        self.push(KernelOp::Output { strides }, &[t]).map(|_| ())
    }

    /// `a @ b`.
    pub fn matmul(&mut self, a: TensorRef, b: TensorRef) -> Result<TensorRef, IrError> {
        self.push1(KernelOp::Matmul, &[a, b])
    }

    /// An element-wise unary function.
    pub fn unary(&mut self, op: UnaryOp, a: TensorRef) -> Result<TensorRef, IrError> {
        self.push1(KernelOp::Unary { op }, &[a])
    }

    /// An element-wise binary function with broadcasting.
    pub fn binary(&mut self, op: BinaryOp, a: TensorRef, b: TensorRef) -> Result<TensorRef, IrError> {
        self.push1(KernelOp::Binary { op }, &[a, b])
    }

    /// `e^a`.
    pub fn exp(&mut self, a: TensorRef) -> Result<TensorRef, IrError> {
        self.unary(UnaryOp::Exp, a)
    }

    /// `silu(a)`.
    pub fn silu(&mut self, a: TensorRef) -> Result<TensorRef, IrError> {
        self.unary(UnaryOp::Silu, a)
    }

    /// `a + b`.
    pub fn add(&mut self, a: TensorRef, b: TensorRef) -> Result<TensorRef, IrError> {
        self.binary(BinaryOp::Add, a, b)
    }

    /// `a · b`.
    pub fn mul(&mut self, a: TensorRef, b: TensorRef) -> Result<TensorRef, IrError> {
        self.binary(BinaryOp::Mul, a, b)
    }

    /// `a / b`.
    pub fn div(&mut self, a: TensorRef, b: TensorRef) -> Result<TensorRef, IrError> {
        self.binary(BinaryOp::Div, a, b)
    }

    /// Sum over `dim` (kept, size 1).
    pub fn reduce_sum(&mut self, a: TensorRef, dim: usize) -> Result<TensorRef, IrError> {
        self.push1(KernelOp::ReduceSum { dim }, &[a])
    }

    /// Max over `dim` (kept, size 1).
    pub fn reduce_max(&mut self, a: TensorRef, dim: usize) -> Result<TensorRef, IrError> {
        self.push1(KernelOp::ReduceMax { dim }, &[a])
    }

    /// RMS normalization over the last dim, optionally scaled by `weight`.
    pub fn rms_norm(&mut self, x: TensorRef, eps: f32, weight: Option<TensorRef>) -> Result<TensorRef, IrError> {
        let mut inputs = vec![x];
        inputs.extend(weight);
        self.push1(KernelOp::RmsNorm { eps: Scalar(eps) }, &inputs)
    }

    /// Concatenation along `dim`.
    pub fn concat(&mut self, a: TensorRef, b: TensorRef, dim: usize) -> Result<TensorRef, IrError> {
        self.push1(KernelOp::Concat { dim }, &[a, b])
    }

    /// A graph-defined kernel over `inputs`; returns one tensor per output saver of `block`.
    pub fn custom(&mut self, inputs: &[TensorRef], block: BlockGraph) -> Result<Vec<TensorRef>, IrError> {
        self.push(KernelOp::Custom { block: Box::new(block) }, inputs)
    }

    /// The program inputs, in parameter order.
    pub fn inputs(&self) -> Vec<&TensorDesc> {
        self.nodes
            .iter()
            .filter_map(|n| match &n.op {
                KernelOp::Input { desc } => Some(desc),
                _ => None,
            })
            .collect()
    }

    /// The program outputs, in order: the tensor each `Output` node marks and its strides.
    pub fn outputs(&self) -> Vec<(TensorRef, Vec<usize>)> {
        self.nodes
            .iter()
            .filter_map(|n| match &n.op {
                KernelOp::Output { strides } => {
                    let t = n.inputs[0];
                    let shape = &self.nodes[t.node].outputs[t.port].shape;
                    Some((t, strides.clone().unwrap_or_else(|| row_major_strides(shape))))
                }
                _ => None,
            })
            .collect()
    }

    /// Number of CUDA launches the graph needs: every operator except inputs and outputs.
    pub fn num_kernels(&self) -> usize {
        self.nodes.iter().filter(|n| !matches!(n.op, KernelOp::Input { .. } | KernelOp::Output { .. })).count()
    }
}

/// The serialized form of a kernel graph, checked on the way in.
#[derive(Deserialize)]
struct KernelGraphData {
    nodes: Vec<KernelNode>,
}

impl<'de> Deserialize<'de> for KernelGraph {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let data = KernelGraphData::deserialize(deserializer)?;
        KernelGraph::from_nodes(data.nodes).map_err(serde::de::Error::custom)
    }
}
