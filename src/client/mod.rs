//! The embedded load generator. It receives a target, a load shape and prompts, and emits one
//! record per request; it knows nothing of task files, providers or the archive.
//!
//! Contract types shared with the plan live here (`Backend`, `Endpoint`, `LoadShape`, ...);
//! the parts are one file per concept: request bodies per dialect (`request`), where requests
//! go (`target`), the idle connection pool (`conn`), the streaming path's HTTP/1.1 and its
//! connection errors (`http`), one exchange (`exchange`), SSE scanning
//! (`sse`), the arrival schedule (`schedule`), the run loop (`run`), records (`record`),
//! one request (`one`), releasing arrivals (`pace`) at their due times (`timer`),
//! conversations' sessions (`session`),
//! progress (`progress`), the client's self-check (`selfcheck`), the server's Prometheus
//! metrics (`server_metrics`), the servers' gauges over time (`gauges`) and the scraping of
//! them during a run (`scraper`).

mod conn;
mod exchange;
mod gauges;
mod http;
mod one;
mod pace;
mod plausible;
mod progress;
mod record;
mod request;
mod run;
mod schedule;
mod scraper;
mod selfcheck;
mod server_metrics;
mod session;
mod socket;
pub mod sse;
mod target;
mod timer;

use std::sync::Arc;
use std::time::Duration;

use crate::load::{Backend, Endpoint, LoadShape};

pub use crate::load::DEFAULT_STALL_TIMEOUT;

pub use crate::dataset::Prompt;
pub use gauges::{ServerSample, ServerSeries};
pub use progress::{NoObserver, Observer, Progress};
pub use record::{Chunk, ChunkTokens, RequestOutcome, RequestRecord, TimeoutPhase, Usage};
pub use request::BodyTemplate;
pub use run::{RunOutcome, run};
pub use schedule::{Arrivals, RampLog, RpsChange, ramp_rps};
pub use selfcheck::SelfCheck;
pub use server_metrics::{ServerLatency, ServerWindow};

/// Everything the client needs to load one endpoint at one load point.
#[derive(Clone)]
pub struct ClientConfig {
    /// `http://host:port` (a path prefix such as `/v1` is allowed).
    pub base_url: String,
    pub backend: Backend,
    pub endpoint: Endpoint,
    /// Request path instead of the endpoint's default (`--endpoint /v1/completions`).
    pub path: Option<String>,
    /// `model` field of every request.
    pub model: String,
    /// Ask the server to ignore EOS (in the backend's dialect) so outputs have the requested length.
    pub ignore_eos: bool,
    /// Merged into every request body last (`--extra-body`).
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    /// Sent as `Authorization: Bearer ...`.
    pub api_key: Option<String>,
    /// Per-request deadline for the whole stream.
    pub request_timeout: Option<Duration>,
    /// Per-request deadline for the first output-bearing chunk.
    pub ttft_timeout: Option<Duration>,
    /// A request the server sends no byte for this long (connecting, in the head or in the
    /// body) ends as `stalled`; `None` waits for ever. Default [`DEFAULT_STALL_TIMEOUT`].
    pub stall_timeout: Option<Duration>,
    /// Duration-bound runs: how long in-flight requests may finish after issuing stops before
    /// they end as `incomplete`; `None` waits for all.
    pub drain_timeout: Option<Duration>,
    pub shape: LoadShape,
    /// Seeds the arrival schedule (the dataset has its own use of the same seed).
    pub seed: u64,
    /// Re-tokenize answers to cross-check the server's usage.
    pub output_check: Option<OutputCheck>,
    /// Keep every answer's text in its record (vLLM's `generated_texts`, `--save-detailed`).
    pub keep_texts: bool,
    /// Path of the server's Prometheus metrics (`/metrics`), scraped during the run; `None`
    /// skips it.
    pub server_metrics: Option<String>,
    /// Conversations: counts each turn's prompt as the server does; `None` estimates it
    /// (previous prompt + previous answer + this message).
    pub turn_counter: Option<Arc<dyn TurnCounter>>,
    /// The servers' gauges are kept as a series scraped this often (and the entry's window
    /// figures from the same scrapes); `None` (`off`) keeps no series and scrapes every
    /// [`crate::load::DEFAULT_TIMESERIES_INTERVAL`] for the window figures only.
    pub timeseries_interval: Option<Duration>,
    /// Other servers of the deployment whose `/metrics` are scraped on the same clock (the
    /// instances behind a router); the entry (`base_url`) always is.
    pub metrics_sources: Vec<MetricsSource>,
}

/// A server scraped beside the entry.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MetricsSource {
    /// The instance's key (`<role>-<index>`), as the archive names it.
    pub name: String,
    /// `http://host:port`.
    pub base_url: String,
}

impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConfig")
            .field("base_url", &self.base_url)
            .field("backend", &self.backend)
            .field("endpoint", &self.endpoint)
            .field("model", &self.model)
            .field("shape", &self.shape)
            .finish_non_exhaustive()
    }
}

impl ClientConfig {
    /// A config with vLLM's defaults for everything but the target and load.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>, shape: LoadShape) -> Self {
        ClientConfig {
            base_url: base_url.into(),
            backend: Backend::Vllm,
            endpoint: Endpoint::Completions,
            path: None,
            model: model.into(),
            ignore_eos: false,
            extra_body: serde_json::Map::new(),
            api_key: None,
            request_timeout: None,
            ttft_timeout: None,
            stall_timeout: Some(DEFAULT_STALL_TIMEOUT),
            drain_timeout: None,
            shape,
            seed: 0,
            output_check: None,
            keep_texts: false,
            server_metrics: Some("/metrics".into()),
            turn_counter: None,
            timeseries_interval: Some(crate::load::DEFAULT_TIMESERIES_INTERVAL),
            metrics_sources: Vec::new(),
        }
    }
}

/// Counts a conversation turn's prompt as the server will (the model's chat template), and
/// may keep its token ids (the workload's ideal prefix-cache hit rate). Called off the
/// runtime, while the turn is in flight.
pub trait TurnCounter: Send + Sync {
    /// Tokens of request `index`, whose `(role, content)` messages are `messages`; `None`
    /// when they cannot be counted.
    fn count(&self, index: u64, messages: &[(String, String)]) -> Option<u32>;
}

/// Re-tokenize the answers of every `every`-th request with the client's tokenizer, to compare
/// with the server's `usage` (costs CPU: about the tokenizer's speed per output token).
#[derive(Clone)]
pub struct OutputCheck {
    pub tokenizer: Arc<tokenizers::Tokenizer>,
    pub every: u32,
}

/// Errors that stop a run before it starts.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("bad base URL `{url}`: {why}")]
    BadUrl { url: String, why: String },
    #[error("no prompts to send")]
    NoPrompts,
    #[error(
        "the conversation dataset sends its turns' history as chat messages; use the chat endpoint (--endpoint /v1/chat/completions, or `endpoint: chat` in the task file)"
    )]
    ConversationNeedsChat,
    #[error(
        "a duration-bound run without a request rate needs a concurrency limit; set --max-concurrency or --request-rate"
    )]
    Unbounded,
}
