//! The step graph: the operators of one model step wired by named tensors, and the runtime
//! parameters they read.
//!
//! Operators are block graphs (a µGraph's custom kernels, from the search or from default
//! blocks) or built-in decode tasks ([`Builtin`]). Tensors are [`TensorKind::Input`] (written by
//! the host only), [`TensorKind::State`] (persistent, read and written by steps) or
//! [`TensorKind::Buffer`] (written once per step, every element, before it is read: SSA, no
//! reuse inside a step). Operators may be added in any order: the compiler orders them by their
//! buffers (a writer before its readers) and keeps the insertion order among the operators that
//! touch the same state tensor, which is what a state's reads and writes mean.

use std::collections::HashMap;

use crate::codegen::default_blocks::lower_to_blocks;
use crate::ir::{BlockGraph, DType, KernelGraph, KernelOp, TensorDesc, TensorRef, check_shape};

use super::builtin::Builtin;

pub use mirage_runtime::mpk::TensorKind;

/// A tensor of a step graph (index into [`StepGraph::tensors`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(pub usize);

/// A runtime parameter of a step graph (index into [`StepGraph::params`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ParamId(pub usize);

/// An operator of a step graph (index into [`StepGraph::ops`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(pub usize);

/// An integer a task reads at run time: a runtime parameter plus a constant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ParamExpr {
    /// The parameter.
    pub param: ParamId,
    /// Added to its value.
    pub offset: i32,
}

impl ParamExpr {
    /// The parameter's value.
    pub fn of(param: ParamId) -> ParamExpr {
        ParamExpr { param, offset: 0 }
    }

    /// The parameter's value plus `offset`.
    pub fn plus(self, offset: i32) -> ParamExpr {
        ParamExpr { offset: self.offset + offset, ..self }
    }

    /// Its value for a step's parameter values.
    pub fn eval(&self, params: &[i32]) -> i64 {
        i64::from(params.get(self.param.0).copied().unwrap_or(0)) + i64::from(self.offset)
    }
}

/// A tensor of the step graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepTensor {
    /// Unique name (how the runtime finds it).
    pub name: String,
    /// Shape, strides (row-major for buffers and states) and element type.
    pub desc: TensorDesc,
    /// How it lives across steps.
    pub kind: TensorKind,
}

/// What an operator's tasks run.
#[derive(Clone, Debug, PartialEq)]
pub enum OpKind {
    /// A block graph: one task per block of its grid.
    Block(Box<BlockGraph>),
    /// A built-in decode task.
    Builtin(Builtin),
}

impl OpKind {
    /// The kind's name in plans, traces and messages.
    pub fn name(&self) -> String {
        match self {
            OpKind::Block(_) => "block graph".into(),
            OpKind::Builtin(b) => b.name().into(),
        }
    }
}

/// An operator: a kind, the tensors it reads and the tensors it writes.
#[derive(Clone, Debug, PartialEq)]
pub struct Operator {
    /// Unique name.
    pub name: String,
    /// What its tasks run.
    pub kind: OpKind,
    /// Tensors it reads, in the kind's operand order.
    pub inputs: Vec<TensorId>,
    /// Tensors it writes, in the kind's output order.
    pub outputs: Vec<TensorId>,
    /// Its tiles along x, y, z.
    pub grid: [usize; 3],
    /// Workers its tasks must run on (task `i` on `pinned[i % len]`), or `None` to let the
    /// scheduler choose.
    pub pinned: Option<Vec<usize>>,
}

impl Operator {
    /// Number of tasks (tiles).
    pub fn num_tasks(&self) -> usize {
        self.grid.iter().product()
    }
}

/// Why a step graph is invalid. Every message names the operator or tensor.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GraphError {
    /// A name that is empty, reused or has characters other than `[A-Za-z0-9_.]`.
    #[error("step graph `{graph}`: {what} `{name}`: {reason}")]
    Name {
        /// The graph.
        graph: String,
        /// "tensor", "operator" or "runtime parameter".
        what: &'static str,
        /// The name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// Operands or outputs that do not fit the operator (shape, element type, tensor kind).
    #[error("step graph `{graph}`: operator `{op}`: {reason}")]
    Operand {
        /// The graph.
        graph: String,
        /// The operator.
        op: String,
        /// What is wrong, as expected vs found.
        reason: String,
    },
    /// Operators that read each other's buffers in a circle.
    #[error("step graph `{graph}`: operators {} form a cycle through their buffers", ops.iter().map(|o| format!("`{o}`")).collect::<Vec<_>>().join(" -> "))]
    Cycle {
        /// The graph.
        graph: String,
        /// The operators on the cycle, in order.
        ops: Vec<String>,
    },
    /// A buffer that is read but never written, written by two operators, or written
    /// incompletely; an input that is written.
    #[error("step graph `{graph}`: tensor `{tensor}`: {reason}")]
    Dataflow {
        /// The graph.
        graph: String,
        /// The tensor.
        tensor: String,
        /// What is wrong.
        reason: String,
    },
    /// An operator the megakernel cannot run.
    #[error("step graph `{graph}`: operator `{op}`: unsupported: {reason}")]
    Unsupported {
        /// The graph.
        graph: String,
        /// The operator.
        op: String,
        /// Why.
        reason: String,
    },
}

/// A step graph under construction (see the module documentation).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepGraph {
    name: String,
    tensors: Vec<StepTensor>,
    params: Vec<String>,
    ops: Vec<Operator>,
}

fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("a name must not be empty".into());
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '.')) {
        return Err(format!("expected only letters, digits, `_` and `.`, found {c:?}"));
    }
    Ok(())
}

impl StepGraph {
    /// An empty step graph; `name` becomes the resident kernel's name (a C identifier is made
    /// from it).
    pub fn new(name: &str) -> Result<StepGraph, GraphError> {
        check_name(name).map_err(|reason| GraphError::Name {
            graph: name.into(),
            what: "step graph",
            name: name.into(),
            reason,
        })?;
        Ok(StepGraph { name: name.to_owned(), ..Default::default() })
    }

    /// The graph's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Renames the graph (the resident kernel is named after it).
    pub fn set_name(&mut self, name: &str) -> Result<(), GraphError> {
        check_name(name).map_err(|reason| self.name_error("step graph", name, reason))?;
        self.name = name.to_owned();
        Ok(())
    }

    /// Its tensors.
    pub fn tensors(&self) -> &[StepTensor] {
        &self.tensors
    }

    /// A tensor.
    pub fn tensor(&self, t: TensorId) -> &StepTensor {
        &self.tensors[t.0]
    }

    /// The tensor called `name`.
    pub fn tensor_named(&self, name: &str) -> Option<TensorId> {
        self.tensors.iter().position(|t| t.name == name).map(TensorId)
    }

    /// Its runtime parameters' names.
    pub fn params(&self) -> &[String] {
        &self.params
    }

    /// Its operators, in insertion order.
    pub fn ops(&self) -> &[Operator] {
        &self.ops
    }

    /// The operator called `name`.
    pub fn op_named(&self, name: &str) -> Option<OpId> {
        self.ops.iter().position(|o| o.name == name).map(OpId)
    }

    fn name_error(&self, what: &'static str, name: &str, reason: String) -> GraphError {
        GraphError::Name { graph: self.name.clone(), what, name: name.to_owned(), reason }
    }

    fn operand_error(&self, op: &str, reason: String) -> GraphError {
        GraphError::Operand { graph: self.name.clone(), op: op.to_owned(), reason }
    }

    fn add_tensor(&mut self, name: &str, desc: TensorDesc, kind: TensorKind) -> Result<TensorId, GraphError> {
        check_name(name).map_err(|r| self.name_error("tensor", name, r))?;
        if self.tensor_named(name).is_some() {
            return Err(self.name_error("tensor", name, "the name is taken".into()));
        }
        check_shape(name, &desc.shape).map_err(|e| self.name_error("tensor", name, e.to_string()))?;
        crate::ir::check_strides(name, &desc.shape, &desc.strides)
            .map_err(|e| self.name_error("tensor", name, e.to_string()))?;
        self.tensors.push(StepTensor { name: name.to_owned(), desc, kind });
        Ok(TensorId(self.tensors.len() - 1))
    }

    /// A row-major tensor written by the host only (weights, per-step inputs).
    pub fn input(&mut self, name: &str, shape: &[usize], dtype: DType) -> Result<TensorId, GraphError> {
        self.add_tensor(name, TensorDesc::new(shape, dtype), TensorKind::Input)
    }

    /// A host-written tensor with an explicit layout (e.g. a column-major weight).
    pub fn input_strided(&mut self, name: &str, desc: TensorDesc) -> Result<TensorId, GraphError> {
        self.add_tensor(name, desc, TensorKind::Input)
    }

    /// A persistent row-major tensor read and written by steps (a KV cache, the next token).
    pub fn state(&mut self, name: &str, shape: &[usize], dtype: DType) -> Result<TensorId, GraphError> {
        self.add_tensor(name, TensorDesc::new(shape, dtype), TensorKind::State)
    }

    /// A row-major buffer, written once per step by one operator.
    pub fn buffer(&mut self, name: &str, shape: &[usize], dtype: DType) -> Result<TensorId, GraphError> {
        self.add_tensor(name, TensorDesc::new(shape, dtype), TensorKind::Buffer)
    }

    /// A runtime parameter: an `i32` each step provides (a position, a key length).
    pub fn param(&mut self, name: &str) -> Result<ParamId, GraphError> {
        check_name(name).map_err(|r| self.name_error("runtime parameter", name, r))?;
        if self.params.iter().any(|p| p == name) {
            return Err(self.name_error("runtime parameter", name, "the name is taken".into()));
        }
        self.params.push(name.to_owned());
        Ok(ParamId(self.params.len() - 1))
    }

    fn push_op(
        &mut self,
        name: &str,
        kind: OpKind,
        inputs: &[TensorId],
        outputs: &[TensorId],
        grid: [usize; 3],
    ) -> Result<OpId, GraphError> {
        check_name(name).map_err(|r| self.name_error("operator", name, r))?;
        if self.op_named(name).is_some() {
            return Err(self.name_error("operator", name, "the name is taken".into()));
        }
        for &t in inputs.iter().chain(outputs) {
            if t.0 >= self.tensors.len() {
                return Err(self.operand_error(name, format!("tensor id {} is not a tensor of this graph", t.0)));
            }
        }
        for &t in outputs {
            if self.tensors[t.0].kind == TensorKind::Input {
                return Err(self.operand_error(
                    name,
                    format!("writes `{}`, an input (written by the host only)", self.tensors[t.0].name),
                ));
            }
            if inputs.contains(&t) {
                return Err(self.operand_error(
                    name,
                    format!(
                        "reads and writes `{}`: an operator may not update a tensor in place",
                        self.tensors[t.0].name
                    ),
                ));
            }
        }
        self.ops.push(Operator {
            name: name.to_owned(),
            kind,
            inputs: inputs.to_vec(),
            outputs: outputs.to_vec(),
            grid,
            pinned: None,
        });
        Ok(OpId(self.ops.len() - 1))
    }

    /// Adds a block graph reading `inputs` (its operands, in order) and writing `outputs` (one
    /// per output saver, buffers or states of exactly the saver's shape and type).
    pub fn add_block(
        &mut self,
        name: &str,
        block: BlockGraph,
        inputs: &[TensorId],
        outputs: &[TensorId],
    ) -> Result<OpId, GraphError> {
        block.validate().map_err(|e| self.operand_error(name, e.to_string()))?;
        if inputs.len() != block.inputs().len() {
            return Err(self.operand_error(
                name,
                format!("expected {} operands (the block graph's), found {}", block.inputs().len(), inputs.len()),
            ));
        }
        for (j, (&t, want)) in inputs.iter().zip(block.inputs()).enumerate() {
            let got = self.tensors.get(t.0).map(|s| &s.desc);
            if got != Some(want) {
                return Err(self.operand_error(
                    name,
                    format!("operand {j}: expected {}, found {}", fmt_desc(want), self.describe(t)),
                ));
            }
        }
        let outs = block.output_descs();
        if outputs.len() != outs.len() {
            return Err(self.operand_error(
                name,
                format!("expected {} outputs (the block graph's savers), found {}", outs.len(), outputs.len()),
            ));
        }
        for (k, (&t, want)) in outputs.iter().zip(&outs).enumerate() {
            let ok = self.tensors.get(t.0).is_some_and(|s| s.desc.shape == want.shape && s.desc.dtype == want.dtype);
            let row_major = self.tensors.get(t.0).is_some_and(|s| s.desc.is_row_major());
            if !ok || !row_major {
                return Err(self.operand_error(
                    name,
                    format!("output {k}: expected a row-major {}, found {}", fmt_desc(want), self.describe(t)),
                ));
            }
        }
        let grid = block.grid();
        self.push_op(name, OpKind::Block(Box::new(block)), inputs, outputs, grid)
    }

    /// [`StepGraph::add_block`] writing new buffers `{name}.out{k}` (`{name}.out` for one).
    pub fn block(&mut self, name: &str, block: BlockGraph, inputs: &[TensorId]) -> Result<Vec<TensorId>, GraphError> {
        let descs = block.output_descs();
        let outputs = self.new_buffers(name, &descs)?;
        self.add_block(name, block, inputs, &outputs)?;
        Ok(outputs)
    }

    fn new_buffers(&mut self, name: &str, descs: &[TensorDesc]) -> Result<Vec<TensorId>, GraphError> {
        let mut outputs = Vec::new();
        for (k, d) in descs.iter().enumerate() {
            let tname = if descs.len() == 1 { format!("{name}.out") } else { format!("{name}.out{k}") };
            outputs.push(self.buffer(&tname, &d.shape, d.dtype)?);
        }
        Ok(outputs)
    }

    /// Adds a µGraph (a kernel graph: the search's answer, or a program whose operators get
    /// default block graphs) reading `inputs` (its parameters, in order). Each of its kernels
    /// becomes an operator `{name}.k{i}`, each tensor between them a buffer `{name}.t{node}`;
    /// returns the buffers of its outputs, `{name}.out{k}` (`{name}.out` for one).
    pub fn mugraph(
        &mut self,
        name: &str,
        graph: &KernelGraph,
        inputs: &[TensorId],
    ) -> Result<Vec<TensorId>, GraphError> {
        check_name(name).map_err(|r| self.name_error("operator", name, r))?;
        let lowered = lower_to_blocks(graph).map_err(|e| self.operand_error(name, e.to_string()))?;
        let params = lowered.inputs();
        if params.len() != inputs.len() {
            return Err(self.operand_error(
                name,
                format!("expected {} operands (the µGraph's inputs), found {}", params.len(), inputs.len()),
            ));
        }
        let outputs = lowered.outputs();
        let mut output_of: HashMap<TensorRef, usize> = HashMap::new();
        for (k, (t, strides)) in outputs.iter().enumerate() {
            let desc = lowered.desc(*t).map_err(|e| self.operand_error(name, e.to_string()))?;
            if *strides != crate::ir::row_major_strides(&desc.shape) {
                return Err(self.unsupported(name, format!("output {k} has a non-row-major layout {strides:?}")));
            }
            if output_of.insert(*t, k).is_some() {
                return Err(self.unsupported(name, format!("output {k} returns the same tensor twice")));
            }
        }
        let mut bound: HashMap<TensorRef, TensorId> = HashMap::new();
        let mut input_index = 0;
        let mut results: Vec<Option<TensorId>> = vec![None; outputs.len()];
        let mut kernels = 0;
        for (i, node) in lowered.nodes().iter().enumerate() {
            match &node.op {
                KernelOp::Input { desc } => {
                    let t = inputs[input_index];
                    if self.tensors.get(t.0).map(|s| &s.desc) != Some(desc) {
                        return Err(self.operand_error(
                            name,
                            format!("operand {input_index}: expected {}, found {}", fmt_desc(desc), self.describe(t)),
                        ));
                    }
                    if output_of.contains_key(&TensorRef::new(i)) {
                        return Err(self.unsupported(name, format!("an output is its input {input_index} itself")));
                    }
                    bound.insert(TensorRef::new(i), t);
                    input_index += 1;
                }
                KernelOp::Output { .. } => {}
                KernelOp::Custom { block } => {
                    let mut outs = Vec::new();
                    for (port, desc) in node.outputs.iter().enumerate() {
                        let r = TensorRef { node: i, port };
                        let tname = match output_of.get(&r) {
                            Some(_) if outputs.len() == 1 => format!("{name}.out"),
                            Some(&k) => format!("{name}.out{k}"),
                            None if node.outputs.len() == 1 => format!("{name}.t{i}"),
                            None => format!("{name}.t{i}_{port}"),
                        };
                        let t = self.buffer(&tname, &desc.shape, desc.dtype)?;
                        if let Some(&k) = output_of.get(&r) {
                            results[k] = Some(t);
                        }
                        bound.insert(r, t);
                        outs.push(t);
                    }
                    let ins: Vec<TensorId> = node.inputs.iter().map(|r| bound[r]).collect();
                    self.add_block(&format!("{name}.k{kernels}"), (**block).clone(), &ins, &outs)?;
                    kernels += 1;
                }
                other => {
                    return Err(self.unsupported(name, format!("kernel operator {} left after lowering", other.name())));
                }
            }
        }
        results
            .into_iter()
            .enumerate()
            .map(|(k, t)| t.ok_or_else(|| self.unsupported(name, format!("output {k} is not produced by a kernel"))))
            .collect()
    }

    fn unsupported(&self, op: &str, reason: String) -> GraphError {
        GraphError::Unsupported { graph: self.name.clone(), op: op.to_owned(), reason }
    }

    /// Adds a built-in task reading `inputs` and writing `outputs` (see [`Builtin`] for each
    /// kind's operands); shapes and types are checked here.
    pub fn add_builtin(
        &mut self,
        name: &str,
        builtin: Builtin,
        inputs: &[TensorId],
        outputs: &[TensorId],
    ) -> Result<OpId, GraphError> {
        for &t in inputs.iter().chain(outputs) {
            if t.0 >= self.tensors.len() {
                return Err(self.operand_error(name, format!("tensor id {} is not a tensor of this graph", t.0)));
            }
        }
        let ins: Vec<&TensorDesc> = inputs.iter().map(|t| &self.tensors[t.0].desc).collect();
        let outs: Vec<&TensorDesc> = outputs.iter().map(|t| &self.tensors[t.0].desc).collect();
        let grid = builtin.check(&ins, &outs, self.params.len()).map_err(|r| self.operand_error(name, r))?;
        self.push_op(name, OpKind::Builtin(builtin), inputs, outputs, grid)
    }

    /// [`StepGraph::add_builtin`] writing new buffers of the shapes the kind gives
    /// ([`Builtin::output_descs`]), named as in [`StepGraph::block`].
    pub fn builtin(&mut self, name: &str, builtin: Builtin, inputs: &[TensorId]) -> Result<Vec<TensorId>, GraphError> {
        let ins: Vec<&TensorDesc> = inputs.iter().filter_map(|t| self.tensors.get(t.0)).map(|s| &s.desc).collect();
        if ins.len() != inputs.len() {
            return Err(self.operand_error(name, "an operand is not a tensor of this graph".into()));
        }
        let descs = builtin.output_descs(&ins).map_err(|r| self.operand_error(name, r))?;
        let outputs = self.new_buffers(name, &descs)?;
        self.add_builtin(name, builtin, inputs, &outputs)?;
        Ok(outputs)
    }

    /// Pins an operator's tasks to workers: task `i` (in tile order) runs on
    /// `workers[i % workers.len()]`.
    pub fn pin(&mut self, op: OpId, workers: Vec<usize>) -> Result<(), GraphError> {
        let Some(o) = self.ops.get_mut(op.0) else {
            return Err(GraphError::Operand {
                graph: self.name.clone(),
                op: format!("#{}", op.0),
                reason: "no such operator".into(),
            });
        };
        if workers.is_empty() {
            let name = o.name.clone();
            return Err(self.operand_error(&name, "pinned to an empty list of workers".into()));
        }
        o.pinned = Some(workers);
        Ok(())
    }

    /// Replaces an operator's kind (the compiler re-plans block graphs; the operands stay).
    pub(crate) fn set_kind(&mut self, op: OpId, kind: OpKind) {
        self.ops[op.0].kind = kind;
    }

    fn describe(&self, t: TensorId) -> String {
        match self.tensors.get(t.0) {
            Some(s) => format!("`{}`: {}", s.name, fmt_desc(&s.desc)),
            None => format!("tensor id {}", t.0),
        }
    }

    /// The operators in execution order, after checking the dataflow: every buffer written by
    /// exactly one operator (before its readers) and read by some, no buffer cycle. Operators
    /// touching the same state tensor keep their insertion order.
    pub fn order(&self) -> Result<Vec<OpId>, GraphError> {
        let n = self.ops.len();
        let dataflow = |t: usize, reason: String| GraphError::Dataflow {
            graph: self.name.clone(),
            tensor: self.tensors[t].name.clone(),
            reason,
        };
        let mut writer: Vec<Option<usize>> = vec![None; self.tensors.len()];
        for (i, op) in self.ops.iter().enumerate() {
            for t in &op.outputs {
                if self.tensors[t.0].kind == TensorKind::Buffer {
                    if let Some(w) = writer[t.0] {
                        return Err(dataflow(
                            t.0,
                            format!(
                                "a buffer is written once per step, found two writers `{}` and `{}`",
                                self.ops[w].name, op.name
                            ),
                        ));
                    }
                    writer[t.0] = Some(i);
                }
            }
        }
        let mut edges: Vec<Vec<usize>> = vec![Vec::new(); n];
        let mut last_state_user: Vec<Option<usize>> = vec![None; self.tensors.len()];
        for (i, op) in self.ops.iter().enumerate() {
            for t in &op.inputs {
                match self.tensors[t.0].kind {
                    TensorKind::Buffer => match writer[t.0] {
                        Some(w) => edges[w].push(i),
                        None => {
                            return Err(dataflow(
                                t.0,
                                format!(
                                    "read by `{}` but written by no operator (a buffer is written every step)",
                                    op.name
                                ),
                            ));
                        }
                    },
                    TensorKind::State => {}
                    TensorKind::Input => {}
                }
            }
            for t in op.inputs.iter().chain(&op.outputs) {
                if self.tensors[t.0].kind == TensorKind::State {
                    if let Some(prev) = last_state_user[t.0].filter(|&p| p != i) {
                        edges[prev].push(i);
                    }
                    last_state_user[t.0] = Some(i);
                }
            }
        }
        // Kahn's algorithm, smallest insertion index first (a stable order).
        let mut indegree = vec![0usize; n];
        for e in &edges {
            for &j in e {
                indegree[j] += 1;
            }
        }
        let mut ready: std::collections::BTreeSet<usize> = (0..n).filter(|&i| indegree[i] == 0).collect();
        let mut order = Vec::with_capacity(n);
        while let Some(i) = ready.pop_first() {
            order.push(OpId(i));
            for &j in &edges[i] {
                indegree[j] -= 1;
                if indegree[j] == 0 {
                    ready.insert(j);
                }
            }
        }
        if order.len() < n {
            return Err(GraphError::Cycle { graph: self.name.clone(), ops: self.find_cycle(&edges, &indegree) });
        }
        Ok(order)
    }

    /// A cycle among the operators left with a positive in-degree (names in order).
    fn find_cycle(&self, edges: &[Vec<usize>], indegree: &[usize]) -> Vec<String> {
        let stuck: Vec<bool> = indegree.iter().map(|&d| d > 0).collect();
        let Some(start) = stuck.iter().position(|&s| s) else { return vec![] };
        // Walk backwards along stuck predecessors until a node repeats.
        let preds = |j: usize| (0..edges.len()).find(|&i| stuck[i] && edges[i].contains(&j));
        let mut path = vec![start];
        let mut at = start;
        while let Some(p) = preds(at) {
            if let Some(pos) = path.iter().position(|&x| x == p) {
                let mut cycle: Vec<usize> = path[pos..].to_vec();
                cycle.reverse();
                cycle.push(cycle[0]);
                return cycle.into_iter().map(|i| self.ops[i].name.clone()).collect();
            }
            path.push(p);
            at = p;
        }
        path.into_iter().map(|i| self.ops[i].name.clone()).collect()
    }
}

/// `f16 [8, 4096]` (with strides when not row-major).
pub(crate) fn fmt_desc(d: &TensorDesc) -> String {
    if d.is_row_major() {
        format!("{} {:?}", d.dtype, d.shape)
    } else {
        format!("{} {:?} strides {:?}", d.dtype, d.shape, d.strides)
    }
}
