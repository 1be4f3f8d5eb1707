//! Dependencies between tasks and the counters that carry them.
//!
//! [`derive`](fn@derive) finds, for every task, the earlier tasks it must wait for: a read waits for the
//! earlier writes it overlaps (read after write), a write for the earlier reads and writes it
//! overlaps (write after read, write after write) — element boxes, so a consumer tile waits
//! only for the producer tiles whose written region meets what it reads.
//!
//! [`counters`] turns those into counter waits. A task's producers of one operator are waited
//! for through that operator's aggregate counter when they are all of its tiles (every tile
//! signals it; it needs as many signals as the operator has tiles), else through each
//! producer's own counter. A wait implied by another wait of the same task (the other
//! operator's tiles all waited for it, transitively) is dropped. Counters are monotonic: a
//! task of global step `s` waits until a counter reaches `s × triggers`.

use super::graph::{OpId, StepGraph};
use super::tasks::Task;

/// For every task, the earlier tasks it depends on (sorted, without repeats).
pub fn derive(g: &StepGraph, tasks: &[Task]) -> Vec<Vec<usize>> {
    let n_tensors = g.tensors().len();
    let mut writes: Vec<Vec<(usize, usize)>> = vec![Vec::new(); n_tensors]; // (task, write index)
    let mut reads: Vec<Vec<(usize, usize)>> = vec![Vec::new(); n_tensors];
    let mut deps: Vec<Vec<usize>> = vec![Vec::new(); tasks.len()];
    let mut start = 0;
    while start < tasks.len() {
        let op = tasks[start].op;
        let end = start + tasks[start..].iter().take_while(|t| t.op == op).count();
        for (t, task) in tasks.iter().enumerate().take(end).skip(start) {
            let d = &mut deps[t];
            for r in &task.reads {
                d.extend(writes[r.tensor.0].iter().filter(|&&(p, k)| tasks[p].writes[k].overlaps(r)).map(|&(p, _)| p));
            }
            for w in &task.writes {
                d.extend(writes[w.tensor.0].iter().filter(|&&(p, k)| tasks[p].writes[k].overlaps(w)).map(|&(p, _)| p));
                d.extend(reads[w.tensor.0].iter().filter(|&&(p, k)| tasks[p].reads[k].overlaps(w)).map(|&(p, _)| p));
            }
            d.sort_unstable();
            d.dedup();
        }
        for (t, task) in tasks.iter().enumerate().take(end).skip(start) {
            for (k, r) in task.reads.iter().enumerate() {
                reads[r.tensor.0].push((t, k));
            }
            for (k, w) in task.writes.iter().enumerate() {
                writes[w.tensor.0].push((t, k));
            }
        }
        start = end;
    }
    deps
}

/// What a counter counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CounterOf {
    /// Every task of an operator (the aggregate counter).
    Op(OpId),
    /// One task.
    Task(usize),
    /// Ticket `i` of an operator whose tiles take tickets (not signalled nor waited on: the
    /// tiles increment it themselves, [`super::builtin::Builtin::ticket_counters`]).
    Ticket(OpId, u32),
    /// Every worker's end of step (the step barrier; always the last counter).
    StepBarrier,
}

/// A counter: what it counts and how many signals make one step's worth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counter {
    /// What it counts.
    pub of: CounterOf,
    /// Signals per step.
    pub triggers: u32,
}

/// The counters, each task's waits and each task's signals.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sync {
    /// The counters; the last is the step barrier (signalled once per step by every worker).
    pub counters: Vec<Counter>,
    /// For every task, the counters it waits on.
    pub waits: Vec<Vec<usize>>,
    /// For every task, the counters it signals.
    pub signals: Vec<Vec<usize>>,
}

impl Sync {
    /// The step barrier's index.
    pub fn barrier(&self) -> usize {
        self.counters.len() - 1
    }

    /// The index of operator `op`'s first ticket counter (its tickets are consecutive), if it
    /// has any.
    pub fn first_ticket(&self, op: OpId) -> Option<usize> {
        self.counters.iter().position(|c| c.of == CounterOf::Ticket(op, 0))
    }
}

/// A set of operators as bits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct OpSet(Vec<u64>);

impl OpSet {
    fn new(n: usize) -> OpSet {
        OpSet(vec![0; n.div_ceil(64)])
    }
    fn insert(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
    fn contains(&self, i: usize) -> bool {
        self.0[i / 64] >> (i % 64) & 1 == 1
    }
    fn union(&mut self, o: &OpSet) {
        self.0.iter_mut().zip(&o.0).for_each(|(a, b)| *a |= b);
    }
    fn intersect(&mut self, o: &OpSet) {
        self.0.iter_mut().zip(&o.0).for_each(|(a, b)| *a &= b);
    }
}

/// The counters for `deps` (see the module documentation). `workers` is the number of worker
/// blocks (the step barrier's triggers).
pub fn counters(g: &StepGraph, tasks: &[Task], deps: &[Vec<usize>], workers: usize) -> Sync {
    let nops = g.ops().len();
    let size = |op: OpId| g.ops()[op.0].num_tasks();
    // 1. Group each task's producers by operator.
    let mut waits: Vec<Vec<CounterOf>> = Vec::with_capacity(tasks.len());
    for d in deps {
        let mut w = Vec::new();
        let mut i = 0;
        while i < d.len() {
            let op = tasks[d[i]].op;
            let j = i + d[i..].iter().take_while(|&&p| tasks[p].op == op).count();
            if j - i == size(op) {
                w.push(CounterOf::Op(op));
            } else {
                w.extend(d[i..j].iter().map(|&p| CounterOf::Task(p)));
            }
            i = j;
        }
        waits.push(w);
    }
    // 2. Drop implied waits. `closure[t]`: operators all of whose tasks t waits for,
    //    transitively; `implied[op]`: operators every task of `op` waits for.
    let mut closure: Vec<OpSet> = Vec::with_capacity(tasks.len());
    let mut implied: Vec<Option<OpSet>> = vec![None; nops];
    for (t, w) in waits.iter_mut().enumerate() {
        let via = |c: &CounterOf, closure: &[OpSet], implied: &[Option<OpSet>]| -> OpSet {
            match *c {
                CounterOf::Op(op) => {
                    let mut s = implied[op.0].clone().unwrap_or_else(|| OpSet::new(nops));
                    s.insert(op.0);
                    s
                }
                CounterOf::Task(p) => closure[p].clone(),
                CounterOf::StepBarrier | CounterOf::Ticket(..) => OpSet::new(nops),
            }
        };
        let reach: Vec<OpSet> = w.iter().map(|c| via(c, &closure, &implied)).collect();
        let keep: Vec<bool> = w
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let covered_by_other = |op: OpId| reach.iter().enumerate().any(|(j, r)| j != i && r.contains(op.0));
                match *c {
                    CounterOf::Op(op) => !covered_by_other(op),
                    CounterOf::Task(p) => !covered_by_other(tasks[p].op),
                    CounterOf::StepBarrier | CounterOf::Ticket(..) => true,
                }
            })
            .collect();
        // Two waits never cover each other: that would need two operators each after the other.
        let mut own = OpSet::new(nops);
        for r in &reach {
            own.union(r);
        }
        *w = w.iter().zip(&keep).filter(|(_, k)| **k).map(|(c, _)| *c).collect();
        let op = tasks[t].op.0;
        match &mut implied[op] {
            Some(s) => s.intersect(&own),
            slot @ None => *slot = Some(own.clone()),
        }
        closure.push(own);
    }
    // 3. Number the counters that are waited on; every counter's tasks signal it.
    let mut index: std::collections::HashMap<CounterOf, usize> = Default::default();
    let mut list: Vec<Counter> = Vec::new();
    let mut wait_ids: Vec<Vec<usize>> = Vec::with_capacity(tasks.len());
    for w in &waits {
        let ids = w
            .iter()
            .map(|c| {
                *index.entry(*c).or_insert_with(|| {
                    let triggers = match *c {
                        CounterOf::Op(op) => size(op) as u32,
                        _ => 1,
                    };
                    list.push(Counter { of: *c, triggers });
                    list.len() - 1
                })
            })
            .collect();
        wait_ids.push(ids);
    }
    let mut signals: Vec<Vec<usize>> = vec![Vec::new(); tasks.len()];
    for (t, task) in tasks.iter().enumerate() {
        if let Some(&c) = index.get(&CounterOf::Op(task.op)) {
            signals[t].push(c);
        }
        if let Some(&c) = index.get(&CounterOf::Task(t)) {
            signals[t].push(c);
        }
    }
    // 4. Ticket counters: `tiles / tickets` increments per step each.
    for (i, op) in g.ops().iter().enumerate() {
        if let super::graph::OpKind::Builtin(b) = &op.kind {
            let n = b.ticket_counters(op.grid);
            for k in 0..n {
                list.push(Counter { of: CounterOf::Ticket(OpId(i), k as u32), triggers: (op.num_tasks() / n) as u32 });
            }
        }
    }
    list.push(Counter { of: CounterOf::StepBarrier, triggers: workers as u32 });
    Sync { counters: list, waits: wait_ids, signals }
}
