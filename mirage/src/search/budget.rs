//! One budget for a whole search: a deadline and a number of states that the search of the whole
//! program, the searches of its parts and the growing of parts not solved whole all draw from.
//!
//! The rule ([`SearchConfig::budget`], [`SearchConfig::max_states`]):
//!
//! - with partitioning on, the search of the whole program gets [`WHOLE_SHARE`] (a third) of the
//!   budget to find a µGraph: if it has found none by then it stops (its retry that lets the
//!   final kernel re-read inputs runs in what is left of that share); if it has found one, it
//!   goes on to the whole budget, as without partitioning, and no part is searched;
//! - the rest is shared by the parts in proportion to their size (operators): each part, when its
//!   turn comes, gets `left · n / m` of what is left, `n` its operators and `m` those of it and of
//!   the parts after it, so what a part does not use passes to the ones after it;
//! - inside a part, the search of the part whole gets a third of the part's share (all of it for
//!   a part of one operator; none when the part is the whole program, already searched); growing
//!   it operator by operator, an attempt to extend the current run by the next operator gets
//!   `1 / (k + 1)` of what is left of the share and a search of the operator alone `1 / k`, `k`
//!   the operators of the part not yet placed (this one included), so the last one's search gets
//!   all that is left;
//! - a search whose share is empty is not run: its operators stay unfused (each its own library
//!   kernel), and the search's notes say that the budget ran out.
//!
//! Time is measured by the clock, so the verification of a part's candidates counts against what
//! the parts after it get; the verification of the composed µGraph as a whole comes after the
//! budget and always runs.

use std::time::{Duration, Instant};

use super::SearchConfig;

/// The share of the budget the search of the whole program gets to find a first µGraph when
/// partitioning is on (numerator, denominator).
pub const WHOLE_SHARE: (u64, u64) = (1, 3);

/// What is left of a search's budget: a deadline and a number of states (`u64::MAX`: no state
/// limit).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Budget {
    deadline: Instant,
    states: u64,
}

impl Budget {
    /// The budget of `cfg`, starting now.
    pub fn of(cfg: &SearchConfig) -> Budget {
        Budget::new(cfg.budget, cfg.max_states)
    }

    /// `time` and `states` from now.
    pub fn new(time: Duration, states: u64) -> Budget {
        let now = Instant::now();
        Budget { deadline: now.checked_add(time).unwrap_or(now + Duration::from_secs(365 * 86_400)), states }
    }

    /// Time left.
    pub fn time_left(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// States left (`u64::MAX`: no limit).
    pub fn states_left(&self) -> u64 {
        self.states
    }

    /// Whether nothing is left (no time, or no states).
    pub fn spent(&self) -> bool {
        self.states == 0 || self.time_left().is_zero()
    }

    /// Records `states` visited by a search that ran under this budget.
    pub fn charge(&mut self, states: u64) {
        if self.states != u64::MAX {
            self.states = self.states.saturating_sub(states);
        }
    }

    /// `num / den` of what is left, from now (a state limit of `u64::MAX` stays none).
    pub fn portion(&self, num: u64, den: u64) -> Budget {
        let den = den.max(1);
        let num = num.min(den);
        let time = self.time_left().mul_f64(num as f64 / den as f64);
        let states = if self.states == u64::MAX {
            u64::MAX
        } else {
            (u128::from(self.states) * u128::from(num) / u128::from(den)) as u64
        };
        Budget::new(time, states)
    }

    /// `cfg` with this budget's time and states as its limits.
    pub fn limit(&self, cfg: &SearchConfig) -> SearchConfig {
        SearchConfig { budget: self.time_left(), max_states: self.states_left(), ..cfg.clone() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn portions_divide_what_is_left_and_keep_no_limit_unlimited() {
        let b = Budget::new(Duration::from_secs(100), 1000);
        let half = b.portion(1, 2);
        assert_eq!(half.states_left(), 500);
        assert!(half.time_left() <= Duration::from_secs(50) && half.time_left() > Duration::from_secs(49));
        let all = b.portion(3, 2);
        assert_eq!(all.states_left(), 1000, "a portion is never more than what is left");
        let unlimited = Budget::new(Duration::from_secs(1), u64::MAX).portion(1, 3);
        assert_eq!(unlimited.states_left(), u64::MAX);
        let mut c = b;
        c.charge(400);
        assert_eq!(c.states_left(), 600);
        c.charge(10_000);
        assert!(c.spent());
        assert!(Budget::new(Duration::ZERO, 10).spent());
    }
}
