//! The load vocabulary: which server dialect and API the requests use, how they arrive and
//! when a point stops. A leaf module of plain values, named by the task file and shared by
//! spec, plan and the client, so that the plan never imports the client for a type.

use std::time::Duration;

use serde::{Deserialize, Serialize};

pub mod search;

/// The stall timeout when none is configured: a request the server sends no byte for 5
/// minutes fails as `stalled`. Longer than the wait a working server makes a request sit
/// through in its queue before the first token, short enough that a stopped server fails in
/// minutes instead of hanging an unattended job (docs/metrics.md).
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(300);

/// Tokens per block of the workload's ideal prefix-cache hit rate when the task names none
/// (vLLM's default `--block-size`, and the mock server's).
pub const DEFAULT_PREFIX_BLOCK_TOKENS: u32 = 16;

/// The width of a point's time-series bins, and how often the servers' `/metrics` are
/// scraped, when the task names none (`benchmark.timeseries_interval`).
pub const DEFAULT_TIMESERIES_INTERVAL: Duration = Duration::from_secs(1);

/// The shortest time-series interval accepted: scrapes any faster load the server.
pub const MIN_TIMESERIES_INTERVAL: Duration = Duration::from_millis(100);

/// Request/metrics dialect of the server (what `ignore_eos`, usage and metrics look like).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Vllm,
    Sglang,
    Trtllm,
    Dynamo,
    Openai,
}

/// Which OpenAI-compatible API the requests use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Endpoint {
    /// `/v1/completions`
    Completions,
    /// `/v1/chat/completions`
    Chat,
}

impl Endpoint {
    /// The default request path of this endpoint.
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::Completions => "/v1/completions",
            Endpoint::Chat => "/v1/chat/completions",
        }
    }
}

/// How requests are issued during one point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadShape {
    /// At most this many requests in flight (`--max-concurrency`); `None` = no cap.
    pub max_concurrency: Option<u32>,
    /// Arrival process.
    pub rate: Rate,
    /// Linear or exponential ramp of the request rate; replaces `rate` when set.
    pub ramp_up: Option<RampUp>,
    /// When to stop issuing requests.
    pub limit: Limit,
    /// Excluded from statistics at the start, by token timestamps.
    #[serde(with = "crate::units::serde_duration")]
    pub warmup: Duration,
    /// Excluded from statistics at the end, by token timestamps.
    #[serde(with = "crate::units::serde_duration")]
    pub cooldown: Duration,
}

/// Arrival process of requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rate {
    /// All at once (bounded by `max_concurrency`): vLLM's `--request-rate inf`.
    Unlimited,
    /// Exactly `rps` requests per second, evenly spaced.
    Constant { rps: f64 },
    /// Poisson arrivals at `rps` (vLLM's default for a finite rate; burstiness 1).
    Poisson { rps: f64 },
    /// Gamma-distributed gaps with shape `burstiness` (vLLM's `--burstiness`).
    Gamma { rps: f64, burstiness: f64 },
}

/// vLLM's `--ramp-up-strategy` with start and end rates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RampUp {
    pub strategy: RampStrategy,
    pub start_rps: f64,
    pub end_rps: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum RampStrategy {
    Linear,
    Exponential,
}

/// The summary's percentiles when the task names none: p99 (vLLM's default).
pub fn default_percentiles() -> Vec<f64> {
    vec![99.0]
}

/// True for [`default_percentiles`] (left out of an archived load plan).
pub fn is_default_percentiles(p: &[f64]) -> bool {
    p == [99.0]
}

/// `benchmark.validity.over_saturation`: whether a point is judged for in-flight requests and
/// TTFT that keep rising through its window (`metrics::over_saturation`), and what follows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OverSaturation {
    /// Not judged.
    #[default]
    Off,
    /// Judged: an over-saturated point fails its `over_saturation` gate.
    Monitor,
    /// Judged, and the sweep stops escalating at an over-saturated point: the deployment's
    /// later points at a higher concurrency or rate (the rest of the load alike) are skipped.
    Stop,
}

/// When a point stops issuing requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// `--num-prompts N`.
    Requests(u64),
    /// `--duration 10m`: issue requests until this much time has passed.
    Duration(#[serde(with = "crate::units::serde_duration")] Duration),
}

/// A metric an SLO can bound (vLLM's `--goodput KEY:MS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SloMetric {
    Ttft,
    Tpot,
    E2el,
}

impl SloMetric {
    /// `ttft`, `tpot` or `e2el`.
    pub fn parse(key: &str) -> Option<Self> {
        match key.trim() {
            "ttft" => Some(SloMetric::Ttft),
            "tpot" => Some(SloMetric::Tpot),
            "e2el" => Some(SloMetric::E2el),
            _ => None,
        }
    }

    /// The name as written: `ttft`, `tpot`, `e2el`.
    pub fn name(self) -> &'static str {
        match self {
            SloMetric::Ttft => "ttft",
            SloMetric::Tpot => "tpot",
            SloMetric::E2el => "e2el",
        }
    }

    /// Upper-case for reports: `TTFT`, `TPOT`, `E2EL`.
    pub fn label(self) -> &'static str {
        match self {
            SloMetric::Ttft => "TTFT",
            SloMetric::Tpot => "TPOT",
            SloMetric::E2el => "E2EL",
        }
    }
}

/// One SLO: the metric must be at most `ms` for a request to be good.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Slo {
    pub metric: SloMetric,
    pub ms: f64,
}

/// An SLO limit: a bare number is milliseconds (vLLM's form), else a duration (`200ms`,
/// `1.5s`). Must be finite and not negative.
pub fn parse_slo_ms(value: &str) -> Result<f64, String> {
    let v = value.trim();
    let ms = match v.parse::<f64>() {
        Ok(ms) => ms,
        Err(_) => crate::units::parse_duration(v)
            .map(|d| d.as_secs_f64() * 1000.0)
            .map_err(|_| {
                format!("`{v}` is not a number of milliseconds or a duration like 200ms or 1.5s")
            })?,
    };
    if ms.is_finite() && ms >= 0.0 {
        Ok(ms)
    } else {
        Err(format!("`{v}` must be a finite, non-negative time"))
    }
}

/// SLOs as `vllm bench serve --goodput` takes them: `KEY:MS` items (KEY one of ttft, tpot,
/// e2el) separated by spaces or commas, e.g. `ttft:200 tpot:50`. Each key at most once.
pub fn parse_slos(text: &str) -> Result<Vec<Slo>, String> {
    let items: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter(|s| !s.is_empty())
        .collect();
    if items.is_empty() {
        return Err("no SLO given; write KEY:MS items like `ttft:200 tpot:50`".into());
    }
    let mut out: Vec<Slo> = Vec::new();
    for item in items {
        let (key, value) = item
            .split_once(':')
            .ok_or_else(|| format!("`{item}`: write KEY:MS, like ttft:500"))?;
        out.push(slo(key, value).map_err(|e| format!("`{item}`: {e}"))?);
    }
    no_repeats(&out)?;
    Ok(out)
}

/// One SLO from its key and limit (the map form `{ttft: 200ms}`).
pub fn slo(key: &str, value: &str) -> Result<Slo, String> {
    let metric =
        SloMetric::parse(key).ok_or_else(|| format!("KEY `{key}` must be ttft, tpot or e2el"))?;
    Ok(Slo {
        metric,
        ms: parse_slo_ms(value)?,
    })
}

/// Refuses an SLO metric named twice.
pub fn no_repeats(slos: &[Slo]) -> Result<(), String> {
    for (i, s) in slos.iter().enumerate() {
        if slos[..i].iter().any(|o| o.metric == s.metric) {
            return Err(format!(
                "`{}` is given twice; keep one limit per metric",
                s.metric.name()
            ));
        }
    }
    Ok(())
}

/// `TTFT <= 200 ms, TPOT <= 50 ms`.
pub fn describe_slos(slos: &[Slo]) -> String {
    slos.iter()
        .map(|s| format!("{} <= {} ms", s.metric.label(), crate::units::number(s.ms)))
        .collect::<Vec<_>>()
        .join(", ")
}
