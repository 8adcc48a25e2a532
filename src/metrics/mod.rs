//! Request records -> summary statistics, with the definitions written in docs/metrics.md and
//! vllm bench serve's result field names. Pure: no I/O, no clock.
//!
//! Parts: `stats` (mean/median/std/percentiles as numpy computes them), `samples` (per-request
//! and per-token values from the chunk timelines), `window` (warm-up/cool-down trimming on token
//! timestamps), `summary` (the figures), `prefix` (the prefix cache's client-side and ideal hit
//! rates), `sessions` (conversations' per-turn and per-session figures), `result` (vLLM's
//! result JSON), `text` (the "Serving Benchmark Result" block), `delivered` (the mean in
//! flight the delivered-load gate reads), `timeseries` (the client's per-interval series on
//! the run's clock), `saturation` (whether in-flight and TTFT kept rising through a point).

mod delivered;
mod prefix;
mod result;
mod samples;
pub mod saturation;
mod sessions;
mod stats;
mod summary;
#[cfg(test)]
mod tests;
mod text;
mod timeseries;
mod window;

/// The servers' gauges of a point's time series (scraped by the client).
pub use crate::client::{RequestRecord, ServerSample, ServerSeries};
pub use delivered::{delivered_load, mean_in_flight};
pub use prefix::{DEFAULT_BLOCK_TOKENS, PromptBlocks, ideal_hit_rate};
pub use result::{ResultHeader, result_json, rps_change_events};
pub use samples::{RequestTimes, chunk_gaps, request_times, token_arrivals, token_itls};
pub use saturation::{Saturation, Trend, over_saturation};
pub use sessions::{Sessions, TurnFigures};
pub use stats::{Stats, normal_quantile, percentile, percentile_key, t_quantile};
pub use summary::{Goodput, Slo, SloMetric, Summary, SummaryOptions, Trimmed, summarize};
pub use text::{render_server, render_text, result_line};
pub use timeseries::{ClientBin, Span, TimeSeries, client_series, time_series};
pub use window::Window;
