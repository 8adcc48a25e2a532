//! External benchmark commands (`benchmark.external`): another benchmark tool run in the
//! entry instance's container or on its host instead of the embedded client, its output
//! parsed into the archive's metrics (our names: `request_throughput`, `output_throughput`,
//! ...). This module owns the resolved plan of such a command, the presets of the tools we
//! know (`vllm-throughput`, `trtllm-bench`, `vllm-bench-serve`) and the parsing of their
//! output (parse). Running the command is the provider's (`Instance::exec`) and the
//! runner's (runner/external.rs).

pub mod parse;
pub mod preset;

use std::time::Duration;

use serde::Serialize;

pub use parse::{JsonPath, ParseOutcome, extract};
pub use preset::Preset;

/// Where an external command runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Place {
    /// Inside the instance's container (`docker exec`).
    Container,
    /// On the instance's host: this machine for local processes and a local Docker engine.
    Host,
}

/// Where one metric's value is read from.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// A path into the result JSON (the result file, else stdout parsed as JSON):
    /// `a.b[0].c`.
    Json(JsonPath),
    /// The first capture group of the last match in the command's output (stdout, then
    /// stderr).
    Regex(#[serde(with = "regex_text")] regex::Regex),
}

mod regex_text {
    pub(super) fn serialize<S: serde::Serializer>(
        r: &regex::Regex,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_str(r.as_str())
    }
}

/// One metric of the summary and where it comes from; the first source that yields a
/// number wins.
#[derive(Debug, Clone, Serialize)]
pub struct MetricRule {
    /// Our metric name (docs/metrics.md), e.g. `output_throughput`.
    pub metric: String,
    pub sources: Vec<Source>,
    /// A point whose output lacks this metric fails.
    pub required: bool,
}

/// An external command of one point, fully rendered.
#[derive(Debug, Clone, Serialize)]
pub struct ExternalPlan {
    /// The shell command (`sh -c`), templates rendered with the point's variables.
    pub command: String,
    #[serde(rename = "where")]
    pub place: Place,
    /// The role whose first instance runs the command.
    pub role: String,
    /// Tool preset whose output format is parsed (`None`: only `metrics`).
    pub preset: Option<Preset>,
    /// JSON file written by the command (in the container or on the host), read afterwards.
    pub result_file: Option<String>,
    /// Metric rules: the preset's, overridden and extended by `metrics`.
    pub metrics: Vec<MetricRule>,
    /// The command is killed after this long.
    #[serde(with = "crate::units::serde_duration")]
    pub timeout: Duration,
}

/// Default `timeout` of an external command.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2 * 3600);

/// The rules of `preset` with `custom` rules replacing same-named ones and added after.
pub fn merge_rules(preset: Option<Preset>, custom: Vec<MetricRule>) -> Vec<MetricRule> {
    let mut rules = preset.map(|p| p.rules()).unwrap_or_default();
    for rule in custom {
        match rules.iter_mut().find(|r| r.metric == rule.metric) {
            Some(existing) => *existing = rule,
            None => rules.push(rule),
        }
    }
    rules
}
