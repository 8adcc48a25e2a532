//! The measured window: the run minus a warm-up at the start and a cool-down at the end, applied
//! to token timestamps (a token counts when it arrived inside the window), not to whole requests.

use std::time::Duration;

/// `[start_us, end_us)` on the run's clock (microseconds since the run started).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub start_us: u64,
    pub end_us: u64,
}

impl Window {
    /// The run `[0, run_end_us)` trimmed by `warmup` and `cooldown`; `None` when nothing is
    /// trimmed or nothing would remain.
    pub fn trimmed(run_end_us: u64, warmup: Duration, cooldown: Duration) -> Option<Window> {
        if warmup.is_zero() && cooldown.is_zero() {
            return None;
        }
        let start = warmup.as_micros() as u64;
        let end = run_end_us.checked_sub(cooldown.as_micros() as u64)?;
        (end > start).then_some(Window {
            start_us: start,
            end_us: end,
        })
    }

    pub fn contains(&self, t_us: u64) -> bool {
        t_us >= self.start_us && t_us < self.end_us
    }

    pub fn seconds(&self) -> f64 {
        (self.end_us - self.start_us) as f64 / 1e6
    }
}
