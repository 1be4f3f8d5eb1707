//! The static schedule: per-worker task lists, and the host-side check that a schedule runs to
//! the end.
//!
//! [`list_schedule`] walks the tasks in one global topological order (operators in dataflow
//! order, tiles in order) and appends each to the worker where it is estimated to start
//! earliest (its producers' estimated finish, the worker's estimated free time; the estimate
//! counts the bytes a task moves). Every worker's list is then a subsequence of one topological
//! order, and with all workers resident at once that cannot deadlock: the first unfinished task
//! of the global order has all its producers finished and no unfinished task before it on its
//! worker, so it can run.
//!
//! [`validate`] does not take that argument on trust: it simulates the workers walking their
//! lists over two steps with the counters, monotonic targets and the step barrier of the
//! device, rejects a schedule that deadlocks (naming what every stuck worker waits for), and
//! checks with vector clocks that every dependency is ordered by what the kernel actually
//! waits for (a wait dropped or a counter miscounted is caught here).

use super::deps::{CounterOf, Sync};
use super::graph::StepGraph;
use super::tasks::Task;

/// Each worker's tasks, in execution order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// Task indices per worker.
    pub workers: Vec<Vec<usize>>,
}

impl Schedule {
    /// The worker of every task.
    pub fn worker_of(&self, ntasks: usize) -> Vec<usize> {
        let mut of = vec![usize::MAX; ntasks];
        for (w, list) in self.workers.iter().enumerate() {
            for &t in list {
                if t < ntasks {
                    of[t] = w;
                }
            }
        }
        of
    }
}

/// Why a schedule cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// A task on no list, on two lists, or not a task.
    #[error("schedule of `{graph}`: {reason}")]
    Lists {
        /// The graph.
        graph: String,
        /// What is wrong.
        reason: String,
    },
    /// The workers stop with tasks left.
    #[error("schedule of `{graph}` deadlocks in step {step} after {done} of {total} tasks: {}", stuck.join("; "))]
    Deadlock {
        /// The graph.
        graph: String,
        /// The step (1 or 2) of the simulation.
        step: u32,
        /// Tasks finished in that step.
        done: usize,
        /// Tasks per step.
        total: usize,
        /// What each stuck worker waits for.
        stuck: Vec<String>,
    },
    /// A dependency the waits do not order.
    #[error(
        "schedule of `{graph}`: `{consumer}` may run before `{producer}`, which it depends on: no wait orders them"
    )]
    Unordered {
        /// The graph.
        graph: String,
        /// The producer task.
        producer: String,
        /// The consumer task.
        consumer: String,
    },
    /// A counter whose trigger count differs from the number of its signals.
    #[error("schedule of `{graph}`: counter {counter} expects {triggers} signals per step, {found} tasks signal it")]
    Triggers {
        /// The graph.
        graph: String,
        /// The counter.
        counter: usize,
        /// Its trigger count.
        triggers: u32,
        /// Its signallers.
        found: usize,
    },
}

/// The estimated cost of a task in nanoseconds: a fixed overhead plus the bytes it reads and
/// writes at one SM's share of the memory bandwidth (about 32 bytes/ns on an H200).
pub fn task_cost_ns(g: &StepGraph, task: &Task) -> f64 {
    let bytes: usize =
        task.reads.iter().chain(&task.writes).map(|r| r.volume() * g.tensor(r.tensor).desc.dtype.size_bytes()).sum();
    1000.0 + bytes as f64 / 32.0
}

/// The name of task `t` in messages: `op[x,y,z]`.
pub fn task_name(g: &StepGraph, tasks: &[Task], t: usize) -> String {
    let task = &tasks[t];
    let op = &g.ops()[task.op.0];
    let axes = if op.grid[2] > 1 {
        3
    } else if op.grid[1] > 1 {
        2
    } else {
        1
    };
    let tile: Vec<String> = task.tile[..axes].iter().map(|v| v.to_string()).collect();
    format!("{}[{}]", op.name, tile.join(","))
}

/// The list schedule of the module documentation over `workers` workers. Tasks of a pinned
/// operator go to their pinned worker.
pub fn list_schedule(g: &StepGraph, tasks: &[Task], sync: &Sync, workers: usize) -> Schedule {
    let mut free = vec![0.0f64; workers];
    let mut finish = vec![0.0f64; tasks.len()];
    let mut counter_done = vec![0.0f64; sync.counters.len()];
    let mut lists = vec![Vec::new(); workers];
    let mut index_in_op = 0usize;
    for (t, task) in tasks.iter().enumerate() {
        if t > 0 && tasks[t - 1].op == task.op {
            index_in_op += 1;
        } else {
            index_in_op = 0;
        }
        let ready = sync.waits[t].iter().map(|&c| counter_done[c]).fold(0.0, f64::max);
        let w = match &g.ops()[task.op.0].pinned {
            Some(p) => p[index_in_op % p.len()] % workers,
            None => (0..workers)
                .min_by(|&a, &b| {
                    let (sa, sb) = (free[a].max(ready), free[b].max(ready));
                    sa.total_cmp(&sb).then(free[a].total_cmp(&free[b]))
                })
                .unwrap_or(0),
        };
        let start = free[w].max(ready);
        finish[t] = start + task_cost_ns(g, task);
        free[w] = finish[t];
        for &c in &sync.signals[t] {
            counter_done[c] = counter_done[c].max(finish[t]);
        }
        lists[w].push(t);
    }
    Schedule { workers: lists }
}

/// Checks a schedule (see the module documentation): lists, trigger counts, a two-step
/// simulation that must finish, and every dependency of `deps` ordered by the waits.
pub fn validate(
    g: &StepGraph,
    tasks: &[Task],
    deps: &[Vec<usize>],
    sync: &Sync,
    schedule: &Schedule,
) -> Result<(), ScheduleError> {
    let graph = g.name().to_owned();
    let n = tasks.len();
    let workers = schedule.workers.len();
    let lists = |reason: String| ScheduleError::Lists { graph: graph.clone(), reason };
    let mut seen = vec![false; n];
    for list in &schedule.workers {
        for &t in list {
            if t >= n {
                return Err(lists(format!("task {t} does not exist ({n} tasks)")));
            }
            if std::mem::replace(&mut seen[t], true) {
                return Err(lists(format!("`{}` is listed twice", task_name(g, tasks, t))));
            }
        }
    }
    if let Some(t) = seen.iter().position(|s| !s) {
        return Err(lists(format!("`{}` is on no worker's list", task_name(g, tasks, t))));
    }
    let mut signallers = vec![0usize; sync.counters.len()];
    for s in &sync.signals {
        for &c in s {
            signallers[c] += 1;
        }
    }
    signallers[sync.barrier()] = workers;
    for (c, counter) in sync.counters.iter().enumerate() {
        // A ticket counter's increments are its operator's own (nothing signals or waits on it).
        if matches!(counter.of, CounterOf::Ticket(..)) {
            continue;
        }
        if counter.triggers as usize != signallers[c] {
            return Err(ScheduleError::Triggers {
                graph,
                counter: c,
                triggers: counter.triggers,
                found: signallers[c],
            });
        }
    }
    let (clocks, positions) = simulate(g, tasks, sync, schedule)?;
    let worker_of = schedule.worker_of(n);
    for (t, d) in deps.iter().enumerate() {
        for &p in d {
            if clocks[t][worker_of[p]] <= positions[p] as u32 {
                return Err(ScheduleError::Unordered {
                    graph,
                    producer: task_name(g, tasks, p),
                    consumer: task_name(g, tasks, t),
                });
            }
        }
    }
    Ok(())
}

/// Runs the workers over two steps like the device does. Returns, for step 1, each task's
/// vector clock (for each worker, how many of its tasks happen before the task ends) and each
/// task's position in its worker's list.
#[allow(clippy::type_complexity)]
fn simulate(
    g: &StepGraph,
    tasks: &[Task],
    sync: &Sync,
    s: &Schedule,
) -> Result<(Vec<Vec<u32>>, Vec<usize>), ScheduleError> {
    let n = tasks.len();
    let w = s.workers.len();
    let barrier = sync.barrier();
    let mut count = vec![0u64; sync.counters.len()];
    let mut counter_clock: Vec<Vec<u32>> = vec![vec![0; w]; sync.counters.len()];
    let mut clocks: Vec<Vec<u32>> = vec![Vec::new(); n];
    let mut positions = vec![0usize; n];
    for list in &s.workers {
        for (i, &t) in list.iter().enumerate() {
            positions[t] = i;
        }
    }
    for step in 1..=2u64 {
        let mut head = vec![0usize; w];
        let mut worker_clock: Vec<Vec<u32>> = vec![vec![0; w]; w];
        let mut done = 0usize;
        let mut barrier_signalled = vec![false; w];
        loop {
            let mut progressed = false;
            for wk in 0..w {
                // A worker starting step 2 waits for the barrier of step 1.
                if step > 1 && head[wk] == 0 && count[barrier] < (step - 1) * w as u64 {
                    continue;
                }
                while let Some(&t) = s.workers[wk].get(head[wk]) {
                    let ready = sync.waits[t].iter().all(|&c| count[c] >= step * u64::from(sync.counters[c].triggers));
                    if !ready {
                        break;
                    }
                    let mut clock = worker_clock[wk].clone();
                    for &c in &sync.waits[t] {
                        for (a, b) in clock.iter_mut().zip(&counter_clock[c]) {
                            *a = (*a).max(*b);
                        }
                    }
                    clock[wk] = head[wk] as u32 + 1;
                    for &c in &sync.signals[t] {
                        count[c] += 1;
                        for (a, b) in counter_clock[c].iter_mut().zip(&clock) {
                            *a = (*a).max(*b);
                        }
                    }
                    worker_clock[wk] = clock.clone();
                    if step == 1 {
                        clocks[t] = clock;
                    }
                    head[wk] += 1;
                    done += 1;
                    progressed = true;
                }
                if head[wk] == s.workers[wk].len() && !barrier_signalled[wk] {
                    barrier_signalled[wk] = true;
                    count[barrier] += 1;
                    progressed = true;
                }
            }
            if done == n && barrier_signalled.iter().all(|b| *b) {
                break;
            }
            if !progressed {
                let stuck = (0..w)
                    .filter_map(|wk| {
                        let t = *s.workers[wk].get(head[wk])?;
                        let missing: Vec<String> = sync.waits[t]
                            .iter()
                            .filter(|&&c| count[c] < step * u64::from(sync.counters[c].triggers))
                            .map(|&c| {
                                let what = match sync.counters[c].of {
                                    CounterOf::Op(op) => format!("all of `{}`", g.ops()[op.0].name),
                                    CounterOf::Task(p) => format!("`{}`", task_name(g, tasks, p)),
                                    CounterOf::StepBarrier => "the step barrier".into(),
                                    CounterOf::Ticket(op, i) => format!("ticket {i} of `{}`", g.ops()[op.0].name),
                                };
                                format!("{what} ({}/{})", count[c], step * u64::from(sync.counters[c].triggers))
                            })
                            .collect();
                        Some(format!("worker {wk} at `{}` waits for {}", task_name(g, tasks, t), missing.join(", ")))
                    })
                    .collect();
                return Err(ScheduleError::Deadlock {
                    graph: g.name().into(),
                    step: step as u32,
                    done,
                    total: n,
                    stuck,
                });
            }
        }
    }
    Ok((clocks, positions))
}
