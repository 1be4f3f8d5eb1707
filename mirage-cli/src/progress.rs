//! Progress bars on standard error (hidden when it is not a terminal).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// Runs `work` with a bar of the time spent against `budget` (the search's wall-clock budget:
/// the search ends by then at the latest, with the best found so far).
pub fn timed<T>(what: &str, budget: Duration, work: impl FnOnce() -> T) -> T {
    let bar = ProgressBar::new(budget.as_millis().max(1) as u64);
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} [{elapsed_precise}] {wide_bar} of the {len}-ms budget")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message(what.to_string());
    let done = AtomicBool::new(false);
    let start = Instant::now();
    let out = std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                bar.set_position(start.elapsed().as_millis() as u64);
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let out = work();
        done.store(true, Ordering::Relaxed);
        out
    });
    bar.finish_and_clear();
    out
}

/// A bar counting `len` steps of `what`.
pub fn steps(len: usize, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(len as u64);
    bar.set_style(
        ProgressStyle::with_template("{msg} [{elapsed_precise}] {wide_bar} {pos}/{len}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message(what.to_string());
    bar
}
