//! Request records -> summary statistics, with the definitions written in docs/metrics.md and
//! vllm bench serve's result field names. Pure: no I/O, no clock.
//!
//! Parts: `stats` (mean/median/std/percentiles as numpy computes them), `samples` (per-request
//! and per-token values from the chunk timelines), `window` (warm-up/cool-down trimming on token
//! timestamps), `summary` (the result object), `text` (the "Serving Benchmark Result" block).

mod samples;
mod stats;
mod summary;
mod text;
mod window;

pub use samples::{RequestTimes, request_times};
pub use stats::{Stats, percentile, percentile_key};
pub use summary::{Goodput, Slo, SloMetric, Summary, SummaryOptions, Trimmed, summarize};
pub use text::render_text;
pub use window::Window;
