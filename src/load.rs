//! The load vocabulary: which server dialect and API the requests use, how they arrive and
//! when a point stops. A leaf module of plain values, named by the task file and shared by
//! spec, plan and the client, so that the plan never imports the client for a type.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The stall timeout when none is configured: a request the server sends no byte for 5
/// minutes fails as `stalled`. Longer than the wait a working server makes a request sit
/// through in its queue before the first token, short enough that a stopped server fails in
/// minutes instead of hanging an unattended job (docs/metrics.md).
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(300);

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

/// When a point stops issuing requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// `--num-prompts N`.
    Requests(u64),
    /// `--duration 10m`: issue requests until this much time has passed.
    Duration(#[serde(with = "crate::units::serde_duration")] Duration),
}
