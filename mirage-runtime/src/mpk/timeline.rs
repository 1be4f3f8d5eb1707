//! Device-side timestamps of a megakernel run ([`Timeline`]): where a step's time goes, as
//! numbers ([`TimelineStats`]) and as a Chrome/Perfetto trace.

use serde_json::{Value, json};

use super::plan::{MpkPlan, abi};

/// The recorded times of one task in one step, in `%globaltimer` nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskTimes {
    /// The task (index into the plan's tasks).
    pub task: u32,
    /// The step within the launch (0-based).
    pub step: u32,
    /// The worker that ran it.
    pub worker: u32,
    /// Before its prefetch and its dependency wait.
    pub start: u64,
    /// When its dependencies were met.
    pub ready: u64,
    /// After its body and its signals.
    pub end: u64,
}

impl TaskTimes {
    /// Time spent waiting for dependencies (prefetch issue included).
    pub fn wait_ns(&self) -> u64 {
        self.ready.saturating_sub(self.start)
    }

    /// Time spent running the body and signalling.
    pub fn busy_ns(&self) -> u64 {
        self.end.saturating_sub(self.ready)
    }
}

/// Times per operator, summed over its tasks and the steps.
#[derive(Clone, Debug, PartialEq)]
pub struct OpTimes {
    /// The operator's name.
    pub name: String,
    /// Task executions recorded.
    pub tasks: usize,
    /// Σ wait time.
    pub wait_ns: u64,
    /// Σ busy time.
    pub busy_ns: u64,
}

/// Summary of a timeline.
#[derive(Clone, Debug, PartialEq)]
pub struct TimelineStats {
    /// Steps recorded.
    pub steps: usize,
    /// Worker blocks.
    pub workers: usize,
    /// Task executions recorded.
    pub tasks: usize,
    /// From the first task's start to the last task's end, over all steps.
    pub span_ns: u64,
    /// Each step's span (first start to last end of its tasks).
    pub step_span_ns: Vec<u64>,
    /// Σ over tasks of the time from start to ready (prefetch issue and dependency waits).
    pub wait_ns: u64,
    /// Σ over tasks of the time from ready to end (bodies and signals).
    pub busy_ns: u64,
    /// `wait_ns / (workers × span_ns)`: the fraction of the workers' time spent waiting.
    pub wait_fraction: f64,
    /// `busy_ns / (workers × span_ns)`.
    pub busy_fraction: f64,
    /// What is left: between tasks (dispatch) and after a worker's last task (tail), and the
    /// step barrier between the steps of a launch.
    pub idle_fraction: f64,
    /// Per operator, largest total wait first.
    pub ops: Vec<OpTimes>,
}

impl std::fmt::Display for TimelineStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{} step(s), {} workers, {} task runs, span {:.1} µs: busy {:.1}%, waiting {:.1}%, idle {:.1}%",
            self.steps,
            self.workers,
            self.tasks,
            self.span_ns as f64 / 1e3,
            100.0 * self.busy_fraction,
            100.0 * self.wait_fraction,
            100.0 * self.idle_fraction
        )?;
        for op in self.ops.iter().take(5) {
            writeln!(
                f,
                "  {:<24} {:>5} tasks  wait {:>9.1} µs  busy {:>9.1} µs",
                op.name,
                op.tasks,
                op.wait_ns as f64 / 1e3,
                op.busy_ns as f64 / 1e3
            )?;
        }
        Ok(())
    }
}

/// The timestamps of one timed run ([`super::Session::run_timed`]).
#[derive(Clone, Debug)]
pub struct Timeline {
    plan: MpkPlan,
    steps: usize,
    times: Vec<u64>,
    worker_sm: Vec<u32>,
}

impl Timeline {
    /// A timeline from the raw buffers: `times` holds `steps × tasks × 3` timestamps (zero for a
    /// task that did not run), `worker_sm` the SM of each worker.
    pub fn new(plan: MpkPlan, steps: usize, times: Vec<u64>, worker_sm: Vec<u32>) -> Timeline {
        Timeline { plan, steps, times, worker_sm }
    }

    /// The plan it was recorded with.
    pub fn plan(&self) -> &MpkPlan {
        &self.plan
    }

    /// The SM each worker ran on.
    pub fn worker_sm(&self) -> &[u32] {
        &self.worker_sm
    }

    /// Every recorded task execution, by step then task.
    pub fn tasks(&self) -> Vec<TaskTimes> {
        let n = self.plan.tasks.len();
        let k = abi::TIMESTAMPS_PER_TASK;
        let mut out = Vec::new();
        for step in 0..self.steps {
            for (t, task) in self.plan.tasks.iter().enumerate() {
                let at = (step * n + t) * k;
                let Some(s) = self.times.get(at..at + k) else { continue };
                if s[0] == 0 || s[2] == 0 {
                    continue;
                }
                out.push(TaskTimes {
                    task: t as u32,
                    step: step as u32,
                    worker: task.worker,
                    start: s[0],
                    ready: s[1],
                    end: s[2],
                });
            }
        }
        out
    }

    /// The summary numbers.
    pub fn stats(&self) -> TimelineStats {
        let tasks = self.tasks();
        let workers = self.plan.workers as usize;
        let first = tasks.iter().map(|t| t.start).min().unwrap_or(0);
        let last = tasks.iter().map(|t| t.end).max().unwrap_or(0);
        let span_ns = last.saturating_sub(first);
        let step_span_ns = (0..self.steps as u32)
            .map(|s| {
                let of = tasks.iter().filter(|t| t.step == s);
                let lo = of.clone().map(|t| t.start).min().unwrap_or(0);
                of.map(|t| t.end).max().unwrap_or(0).saturating_sub(lo)
            })
            .collect();
        let wait_ns: u64 = tasks.iter().map(TaskTimes::wait_ns).sum();
        let busy_ns: u64 = tasks.iter().map(TaskTimes::busy_ns).sum();
        let total = (workers as f64 * span_ns as f64).max(1.0);
        let mut ops: Vec<OpTimes> =
            self.plan.ops.iter().map(|o| OpTimes { name: o.name.clone(), tasks: 0, wait_ns: 0, busy_ns: 0 }).collect();
        for t in &tasks {
            let op = &mut ops[self.plan.tasks[t.task as usize].op as usize];
            op.tasks += 1;
            op.wait_ns += t.wait_ns();
            op.busy_ns += t.busy_ns();
        }
        ops.retain(|o| o.tasks > 0);
        ops.sort_by(|a, b| b.wait_ns.cmp(&a.wait_ns).then(b.busy_ns.cmp(&a.busy_ns)));
        let wait_fraction = wait_ns as f64 / total;
        let busy_fraction = busy_ns as f64 / total;
        TimelineStats {
            steps: self.steps,
            workers,
            tasks: tasks.len(),
            span_ns,
            step_span_ns,
            wait_ns,
            busy_ns,
            wait_fraction,
            busy_fraction,
            idle_fraction: (1.0 - wait_fraction - busy_fraction).max(0.0),
            ops,
        }
    }

    /// The run as a Chrome trace (JSON, opens in Perfetto or `chrome://tracing`): one track per
    /// SM, one slice per task named `op[tile]` (with its step and waits as arguments), preceded
    /// by a `wait` slice while its dependencies were pending. Times in µs from the first start.
    pub fn chrome_trace(&self) -> String {
        let tasks = self.tasks();
        let t0 = tasks.iter().map(|t| t.start).min().unwrap_or(0);
        let us = |ns: u64| ns.saturating_sub(t0) as f64 / 1e3;
        let track = |w: u32| self.worker_sm.get(w as usize).copied().unwrap_or(w);
        let mut events: Vec<Value> = vec![json!({
            "name": "process_name", "ph": "M", "pid": 0,
            "args": { "name": format!("megakernel {}", self.plan.name) }
        })];
        for w in 0..self.plan.workers {
            events.push(json!({
                "name": "thread_name", "ph": "M", "pid": 0, "tid": track(w),
                "args": { "name": format!("SM {} (worker {w})", track(w)) }
            }));
        }
        for t in &tasks {
            let task = &self.plan.tasks[t.task as usize];
            if t.ready > t.start {
                events.push(json!({
                    "name": "wait", "cat": "wait", "ph": "X", "pid": 0, "tid": track(t.worker),
                    "ts": us(t.start), "dur": t.wait_ns() as f64 / 1e3,
                    "args": { "task": self.plan.task_name(t.task as usize), "waits": task.waits }
                }));
            }
            events.push(json!({
                "name": self.plan.task_name(t.task as usize),
                "cat": self.plan.ops[task.op as usize].kind,
                "ph": "X", "pid": 0, "tid": track(t.worker),
                "ts": us(t.ready), "dur": t.busy_ns() as f64 / 1e3,
                "args": { "step": t.step, "task": t.task, "waits": task.waits }
            }));
        }
        json!({ "traceEvents": events, "displayTimeUnit": "ns" }).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mpk::plan::{MPK_PLAN_VERSION, MpkOp, MpkTask};

    fn plan() -> MpkPlan {
        MpkPlan {
            version: MPK_PLAN_VERSION,
            name: "t".into(),
            kernel: "t_mpk".into(),
            threads: 128,
            workers: 2,
            smem_bytes: 0,
            counters: 2,
            tensors: vec![],
            params: vec![],
            ops: vec![MpkOp { name: "a".into(), kind: "nop".into(), grid: [2, 1, 1] }],
            tasks: vec![
                MpkTask { op: 0, tile: [0, 0, 0], worker: 0, waits: 0 },
                MpkTask { op: 0, tile: [1, 0, 0], worker: 1, waits: 1 },
            ],
            worker_tasks: vec![vec![0], vec![1]],
        }
    }

    #[test]
    fn fractions_and_trace() {
        // worker 0: busy 1000..2000; worker 1: waits 1000..1500, busy 1500..2000.
        let times = vec![1000, 1000, 2000, 1000, 1500, 2000];
        let tl = Timeline::new(plan(), 1, times, vec![7, 9]);
        let s = tl.stats();
        assert_eq!((s.tasks, s.span_ns, s.wait_ns, s.busy_ns), (2, 1000, 500, 1500));
        assert!((s.wait_fraction - 0.25).abs() < 1e-9 && (s.busy_fraction - 0.75).abs() < 1e-9, "{s:?}");
        assert_eq!(s.step_span_ns, vec![1000]);
        let trace: Value = serde_json::from_str(&tl.chrome_trace()).expect("the trace is JSON");
        let events = trace["traceEvents"].as_array().expect("a list of events");
        let slices: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
        assert_eq!(slices.len(), 3, "two task slices and one wait slice");
        assert!(slices.iter().any(|e| e["name"] == "a[1]" && e["tid"] == 9 && e["ts"] == 0.5));
        assert!(events.iter().any(|e| e["args"]["name"] == "SM 7 (worker 0)"));
    }

    #[test]
    fn tasks_that_did_not_run_are_left_out() {
        let times = vec![1000, 1000, 2000, 0, 0, 0];
        let tl = Timeline::new(plan(), 1, times, vec![0, 1]);
        assert_eq!(tl.tasks().len(), 1);
        assert_eq!(tl.stats().ops[0].tasks, 1);
    }
}
