//! `benchmark:` (or a profile file): the dataset, the load shape, the sweep, the checks and
//! an external benchmark tool.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_saphyr::Spanned;

use super::matrix::MatrixSpec;
use crate::load::{Endpoint, RampStrategy};
use crate::spec::values::{
    DurationValue, FractionValue, GoodputValue, NonZeroDurationValue, PositiveValue, Scalar,
};

/// `benchmark:` of a task, or the whole of a profile file. Every field is optional here;
/// the plan checks what is required once the profile is merged.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BenchmarkSpec {
    /// Path (relative to this file) of a profile whose keys are defaults for this section.
    #[serde(default)]
    pub profile: Option<Spanned<String>>,
    /// Model id sent in requests, when the task has no top-level `model`.
    #[serde(default)]
    pub model: Option<Spanned<String>>,
    /// API used: `completions` (default) or `chat`.
    #[serde(default)]
    pub endpoint: Option<Endpoint>,
    /// Prompts and lengths.
    #[serde(default)]
    pub dataset: Option<Spanned<DatasetSpecYaml>>,
    /// Path to a tokenizer.json, or a model id in the local HF cache (default: the model).
    #[serde(default)]
    pub tokenizer: Option<Spanned<String>>,
    /// Ask the server to ignore end-of-sequence so every answer has the requested length.
    #[serde(default)]
    pub ignore_eos: Option<bool>,
    /// Requests per point (exactly one of `num_prompts` and `duration`). Template allowed.
    #[serde(default)]
    pub num_prompts: Option<Spanned<Scalar>>,
    /// Issue requests for this long per point (`10m`). Template allowed.
    #[serde(default)]
    pub duration: Option<Spanned<Scalar>>,
    /// Excluded from statistics at the start of a point (default 0s).
    #[serde(default)]
    pub warmup: Option<Spanned<Scalar>>,
    /// Excluded from statistics at the end of a point (default 0s).
    #[serde(default)]
    pub cooldown: Option<Spanned<Scalar>>,
    /// At most this many requests in flight (default: no cap). Template allowed.
    #[serde(default)]
    pub concurrency: Option<Spanned<Scalar>>,
    /// Requests per second (Poisson arrivals), or `inf` (default) to send at once.
    #[serde(default)]
    pub request_rate: Option<Spanned<Scalar>>,
    /// Gamma shape of arrival gaps; 1 (default) is Poisson, lower is burstier.
    #[serde(default)]
    pub burstiness: Option<Spanned<Scalar>>,
    /// Ramp the request rate from `start_rps` to `end_rps` over the point.
    #[serde(default)]
    pub ramp_up: Option<RampUpSpec>,
    /// Seed of the dataset sampler and arrival process (default 0).
    #[serde(default)]
    pub seed: Option<Spanned<Scalar>>,
    /// JSON merged into every request body.
    #[serde(default)]
    pub extra_body: Option<serde_json::Map<String, serde_json::Value>>,
    /// Give up on one request after this long (default: never).
    #[serde(default)]
    pub request_timeout: Option<Spanned<NonZeroDurationValue>>,
    /// SLOs for goodput, as `vllm bench serve --goodput` takes them: `"ttft:200 tpot:50"`
    /// (milliseconds) or `{ttft: 200ms, tpot: 50ms, e2el: 2s}`.
    #[serde(default)]
    pub goodput: Option<Spanned<GoodputValue>>,
    /// A request the server sends no byte for this long fails as `stalled` (default 5m;
    /// `off` for never). Template allowed.
    #[serde(default)]
    pub stall_timeout: Option<Spanned<Scalar>>,
    /// How many times each point is measured (default 1).
    #[serde(default)]
    pub repetitions: Option<Spanned<u32>>,
    /// Tokens per block of the workload's ideal prefix-cache hit rate (default 16; set the
    /// server's `--block-size`).
    #[serde(default)]
    pub prefix_block_size: Option<Spanned<u32>>,
    /// Percentiles of every latency figure in a point's summary, as `vllm bench serve
    /// --metric-percentiles` takes them (default `[99]`): `[50, 90, 99]` gives `p50_ttft_ms`,
    /// `p90_ttft_ms`, `p99_ttft_ms`, ...
    #[serde(default)]
    pub percentiles: Option<Spanned<Vec<f64>>>,
    /// Bin width of each point's time series and how often the servers' `/metrics` are
    /// scraped (default `1s`, at least `100ms`; `off` keeps no series).
    #[serde(default)]
    pub timeseries_interval: Option<Spanned<String>>,
    /// The sweep: axes, `include`, `exclude`.
    #[serde(default)]
    pub matrix: Option<MatrixSpec>,
    /// Regression thresholds used by `orchestrate check`.
    #[serde(default)]
    pub check: Option<CheckSpec>,
    /// When a point's measurement is trusted.
    #[serde(default)]
    pub validity: Option<ValiditySpec>,
    /// Run another benchmark tool per point instead of the embedded client.
    #[serde(default)]
    pub external: Option<ExternalSpec>,
    /// A capacity search instead of the sweep of the searched axis (docs/task-file.md).
    #[serde(default)]
    pub search: Option<Spanned<SearchYaml>>,
}

/// `benchmark.search`: the keys are `bench --search`'s flags (`--search-min` is `min`);
/// the plan checks the values (`load::search::SearchSpec::validate`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SearchYaml {
    /// `concurrency` or `request_rate`.
    pub axis: Spanned<String>,
    /// The first level measured (default 1).
    #[serde(default)]
    pub min: Option<Spanned<f64>>,
    /// The second level measured; without it the search probes upwards.
    #[serde(default)]
    pub max: Option<Spanned<f64>>,
    /// Aggregate SLOs, `pP:METRIC:LIMIT` each (`p99:ttft:2s`).
    #[serde(default)]
    pub slo: Vec<Spanned<String>>,
    /// Attainment SLO: at least this percentage of requests meets every `goodput` bound.
    #[serde(default)]
    pub attainment: Option<Spanned<f64>>,
    /// Stop when smallest failing / largest passing <= 1 + width (default 0.1).
    #[serde(default)]
    pub width: Option<Spanned<f64>>,
    /// Most distinct levels measured (default 8).
    #[serde(default)]
    pub max_points: Option<Spanned<u32>>,
    /// Most measurements of one level (default 3).
    #[serde(default)]
    pub repetitions: Option<Spanned<u32>>,
    /// One-sided confidence of each verdict (default 0.95).
    #[serde(default)]
    pub confidence: Option<Spanned<f64>>,
    /// Deployments each end of the final interval is measured on (default 1).
    #[serde(default)]
    pub repeat_deployments: Option<Spanned<u32>>,
    /// Factor between levels while probing upwards without `max` (default 4).
    #[serde(default)]
    pub growth: Option<Spanned<f64>>,
}

/// `benchmark.external`: a benchmark tool run in the entry instance's container or on its
/// host once per point, its output parsed into our metrics (docs/external.md).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ExternalSpec {
    /// Shell command (`sh -c`); templates allowed (matrix values, `port`, `model`, ...).
    pub command: Spanned<String>,
    /// `container` (default when the role has an image) or `host`.
    #[serde(default, rename = "where")]
    pub place: Option<Spanned<String>>,
    /// Role whose first instance runs the command (default: the entry role).
    #[serde(default)]
    pub role: Option<Spanned<String>>,
    /// Output format of a known tool: vllm-throughput, trtllm-bench or vllm-bench-serve.
    #[serde(default)]
    pub preset: Option<Spanned<String>>,
    /// JSON file the command writes (in the container or on the host), read afterwards.
    #[serde(default)]
    pub result_file: Option<Spanned<String>>,
    /// Metric -> `{json: "a.b[0].c"}` or `{regex: "([0-9.]+) tok/s"}`; adds to or replaces
    /// the preset's rules.
    #[serde(default)]
    pub metrics: BTreeMap<String, Spanned<MetricSourceSpec>>,
    /// Kill the command after this long (default 2h).
    #[serde(default)]
    pub timeout: Option<Spanned<DurationValue>>,
}

/// Where one metric of an external command is read: exactly one of `json` and `regex`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MetricSourceSpec {
    /// Path into the result JSON, e.g. `results[0].throughput`.
    #[serde(default)]
    pub json: Option<String>,
    /// Regex over the output whose first capture group is the number.
    #[serde(default)]
    pub regex: Option<String>,
}

/// `benchmark.dataset`: `kind` picks the source; the other keys are that source's fields.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetSpecYaml {
    /// random, sharegpt, text, shared_prefix, jsonl, mooncake, conversation or weka.
    pub kind: DatasetKind,
    /// File of the dataset (sharegpt, text, jsonl, mooncake; weka: a file or a directory),
    /// relative to the file that names it.
    #[serde(default)]
    pub path: Option<Spanned<String>>,
    /// Prompt length in tokens (random, text; optional for sharegpt).
    #[serde(default)]
    pub input_len: Option<Spanned<Scalar>>,
    /// Answer length in tokens (all kinds; optional for sharegpt and jsonl).
    #[serde(default)]
    pub output_len: Option<Spanned<Scalar>>,
    /// random: lengths vary uniformly within ±ratio (default 0: exact lengths).
    #[serde(default)]
    pub range_ratio: Option<Spanned<Scalar>>,
    /// random: a fixed random prefix of this many tokens shared by every prompt (default 0);
    /// conversation: a prefix of this many tokens unique to each session, opening its first
    /// user message (vLLM's `prefix_num_tokens`).
    #[serde(default)]
    pub prefix_len: Option<Spanned<Scalar>>,
    /// shared_prefix: number of distinct system prompts.
    #[serde(default)]
    pub num_groups: Option<Spanned<Scalar>>,
    /// shared_prefix: questions per system prompt.
    #[serde(default)]
    pub prompts_per_group: Option<Spanned<Scalar>>,
    /// shared_prefix: tokens of each system prompt (the shared prefix).
    #[serde(default)]
    pub system_prompt_len: Option<Spanned<Scalar>>,
    /// shared_prefix: tokens of each question.
    #[serde(default)]
    pub question_len: Option<Spanned<Scalar>>,
    /// mooncake: prompt tokens per hash id of the trace (default 512, Mooncake's).
    #[serde(default)]
    pub block_size: Option<Spanned<u32>>,
    /// mooncake: arrival offsets are divided by this (default 1; 2 replays twice as fast).
    #[serde(default)]
    pub speedup: Option<Spanned<f64>>,
    /// mooncake: replay from this far into the trace, e.g. `10m` (default 0).
    #[serde(default)]
    pub start: Option<Spanned<String>>,
    /// mooncake: replay only this long of the trace after `start` (default: the rest).
    #[serde(default)]
    pub duration: Option<Spanned<String>>,
    /// conversation: messages per session, user and assistant together as vLLM counts them
    /// (a number, or a vLLM distribution such as `{distribution: uniform, min: 4, max: 8}`).
    #[serde(default)]
    pub num_turns: Option<Spanned<TurnsYaml>>,
    /// conversation: pause between an answer and the session's next turn, e.g. `2s`.
    #[serde(default)]
    pub think_time: Option<Spanned<String>>,
    /// conversation: each user message's length drawn from a vLLM distribution such as
    /// `{distribution: lognormal, average: 200}` instead of `input_len` ± `range_ratio`.
    #[serde(default)]
    pub input_dist: Option<Spanned<crate::dataset::Dist>>,
    /// conversation: each answer's length drawn from a vLLM distribution instead of
    /// `output_len` ± `range_ratio`.
    #[serde(default)]
    pub output_dist: Option<Spanned<crate::dataset::Dist>>,
}

/// `dataset.num_turns`: a number of messages, or a distribution of them.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(untagged)]
pub enum TurnsYaml {
    Count(u32),
    Distribution(crate::dataset::Dist),
}

/// Which prompt source a dataset uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DatasetKind {
    Random,
    Sharegpt,
    Text,
    SharedPrefix,
    Jsonl,
    Mooncake,
    Conversation,
    Weka,
}

/// `benchmark.ramp_up`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RampUpSpec {
    /// `linear` or `exponential`.
    pub strategy: RampStrategy,
    /// Request rate at the start of the point (above 0).
    pub start_rps: PositiveValue,
    /// Request rate at the end of the point (above 0).
    pub end_rps: PositiveValue,
}

/// `benchmark.check`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CheckSpec {
    /// Metric -> allowed change against the baseline, `"-5%"` (may drop 5%) or `"+10%"`.
    #[serde(default)]
    pub thresholds: BTreeMap<String, Spanned<String>>,
}

/// `benchmark.validity`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ValiditySpec {
    /// Highest fraction of failed requests for a valid point (default 0.0).
    #[serde(default)]
    pub max_error_rate: Option<FractionValue>,
    /// Largest relative deviation of output lengths from the requested ones (default 0.05).
    #[serde(default)]
    pub length_tolerance: Option<f64>,
    /// Largest p99 dispatch lag (sent minus scheduled) of a paced point, ms (default 50).
    #[serde(default)]
    pub max_dispatch_lag_ms: Option<PositiveValue>,
    /// Smallest mean in flight over the concurrency cap while the client issued (default 0.9).
    #[serde(default)]
    pub min_delivered_concurrency: Option<FractionValue>,
    /// Largest p99 lag of the client's event loop, ms (default 50).
    #[serde(default)]
    pub max_event_loop_lag_ms: Option<PositiveValue>,
    /// Judge each point for in-flight requests and TTFT that keep rising through its window:
    /// `off` (default), `monitor` (an `over_saturation` gate), `stop` (the gate, and the
    /// sweep's higher loads on that deployment are skipped).
    #[serde(default)]
    pub over_saturation: Option<crate::load::OverSaturation>,
}
