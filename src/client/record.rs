//! One record per request: when it was scheduled, released and sent, every output-bearing
//! chunk as (time since sent, tokens in it), when the first answer (not reasoning) came, the
//! server's usage (cached prompt tokens and reasoning tokens included), the session and turn
//! of a conversation's request, and how it ended. Compact in
//! memory (8 bytes per chunk) and one JSON line on disk. Not here: statistics (metrics.rs).

use serde::ser::SerializeTuple;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One output-bearing chunk: arrival in microseconds after the request was sent, and how many
/// output tokens it carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    pub t_us: u32,
    pub tokens: u16,
}

impl Serialize for Chunk {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut t = s.serialize_tuple(2)?;
        t.serialize_element(&self.t_us)?;
        t.serialize_element(&self.tokens)?;
        t.end()
    }
}

impl<'de> Deserialize<'de> for Chunk {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let (t_us, tokens) = <(u32, u16)>::deserialize(d)?;
        Ok(Chunk { t_us, tokens })
    }
}

/// Where the per-chunk token counts come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChunkTokens {
    /// Deltas of `usage.completion_tokens` reported in every chunk (exact).
    Usage,
    /// The server reported no per-chunk usage: one token per output-bearing chunk is assumed.
    AssumedOne,
}

/// Which deadline a timed-out request missed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeoutPhase {
    FirstToken,
    Total,
}

/// How a request ended. Every request gets exactly one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum RequestOutcome {
    /// HTTP 200 and at least one output-bearing chunk, stream ended normally.
    Completed,
    /// The server answered with a non-200 status.
    HttpStatus { code: u16, body: String },
    /// The stream broke after it started: an error event, a reset connection, malformed data,
    /// or no output-bearing chunk at all.
    StreamError { message: String },
    /// No connection could be made or the request could not be written.
    ConnectFailed { message: String },
    /// A per-request deadline passed.
    TimedOut { phase: TimeoutPhase },
    /// The server sent no byte for the stall timeout (`silent_ms`) while the request waited
    /// for it: connecting, in the response head or in the body.
    Stalled { silent_ms: u64 },
    /// The run was cancelled (Ctrl-C, runner shutdown) while the request was in flight.
    Cancelled,
    /// Still in flight when a duration-bound run's drain time ran out.
    Incomplete,
}

impl RequestOutcome {
    /// A request the server sent no byte for `silent`.
    pub fn stalled(silent: std::time::Duration) -> Self {
        RequestOutcome::Stalled {
            silent_ms: u64::try_from(silent.as_millis()).unwrap_or(u64::MAX),
        }
    }

    pub fn is_completed(&self) -> bool {
        matches!(self, RequestOutcome::Completed)
    }

    /// A short class name for counts (`completed`, `http_status`, ...).
    pub fn class(&self) -> &'static str {
        match self {
            RequestOutcome::Completed => "completed",
            RequestOutcome::HttpStatus { .. } => "http_status",
            RequestOutcome::StreamError { .. } => "stream_error",
            RequestOutcome::ConnectFailed { .. } => "connect_failed",
            RequestOutcome::TimedOut { .. } => "timed_out",
            RequestOutcome::Stalled { .. } => "stalled",
            RequestOutcome::Cancelled => "cancelled",
            RequestOutcome::Incomplete => "incomplete",
        }
    }
}

/// Token counts the server reported in `usage`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: Option<u32>,
    pub completion_tokens: Option<u32>,
    /// Prompt tokens served from the prefix cache: `usage.prompt_tokens_details.cached_tokens`
    /// (vLLM, SGLang, llama.cpp), else llama.cpp's `timings.cache_n`; absent when the server
    /// reported neither (unknown, not 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u32>,
    /// `usage.completion_tokens_details.reasoning_tokens`, where the server reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u32>,
}

/// One request. Times are microseconds since the run started, except chunk times (since
/// `sent_us`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Dispatch order, from 0.
    pub index: u64,
    /// Which prompt was sent (prompts are reused cyclically in duration-bound runs).
    pub prompt_index: u32,
    /// Conversations: the session this request belongs to, numbered in the order sessions
    /// started (a dataset session reused in a long run is a new one); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<u64>,
    /// Conversations: the request's turn within its session, from 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u32>,
    /// When the schedule said to issue it (0 for all in a closed loop without a rate).
    pub scheduled_us: u64,
    /// When the dispatcher actually released it (minus `scheduled_us` = dispatch lag).
    pub dispatched_us: u64,
    /// When the request was written (after waiting for a concurrency slot and a connection).
    pub sent_us: u64,
    /// When the response headers arrived, after `sent_us`.
    pub headers_us: Option<u32>,
    /// Prompt tokens by the client's tokenizer (from the dataset).
    pub prompt_len: u32,
    /// Requested output tokens.
    pub output_len: u32,
    /// What the server said in `usage` (last report).
    pub usage: Usage,
    /// Output tokens by re-tokenizing the answer with the client's tokenizer, when checked.
    pub tokenizer_output_tokens: Option<u32>,
    /// The answer's text, when the run keeps texts (`--save-detailed`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub generated_text: Option<String>,
    /// Where the per-chunk token counts come from.
    pub chunk_tokens: ChunkTokens,
    /// Every output-bearing chunk.
    pub chunks: Vec<Chunk>,
    /// When the first chunk carrying answer output (content, text or tool calls; not
    /// reasoning) arrived, microseconds after `sent_us`; absent when none did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_content_us: Option<u32>,
    /// When the stream ended (`[DONE]`, close, error or deadline), since the run started.
    pub end_us: u64,
    pub outcome: RequestOutcome,
}

impl RequestRecord {
    /// Time to first output-bearing chunk, microseconds.
    pub fn ttft_us(&self) -> Option<u32> {
        self.chunks.first().map(|c| c.t_us)
    }

    /// Sent to last output-bearing chunk, microseconds (vLLM's E2EL).
    pub fn e2el_us(&self) -> Option<u32> {
        self.chunks.last().map(|c| c.t_us)
    }

    /// Tokens counted from the chunks.
    pub fn chunk_token_sum(&self) -> u64 {
        self.chunks.iter().map(|c| u64::from(c.tokens)).sum()
    }

    /// Output tokens: the server's usage when reported, else the client tokenizer's count,
    /// else the chunk sum.
    pub fn output_tokens(&self) -> u64 {
        self.usage
            .completion_tokens
            .map(u64::from)
            .or(self.tokenizer_output_tokens.map(u64::from))
            .unwrap_or_else(|| self.chunk_token_sum())
    }

    /// Input tokens: the server's usage when reported, else the client's count.
    pub fn input_tokens(&self) -> u64 {
        u64::from(self.usage.prompt_tokens.unwrap_or(self.prompt_len))
    }
}
