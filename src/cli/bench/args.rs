//! The flags of `orchestrate bench`: vllm bench serve's names and meanings, plus the
//! dataset flags of the MoAI fork and SGLang and our own (duration, timeouts, self-check).

use std::path::PathBuf;
use std::time::Duration;

use crate::dataset::Dist;
use crate::load::{Backend, RampStrategy};
use crate::units::parse_duration;

/// Dataset names (vLLM's and SGLang's spellings).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum DatasetName {
    Random,
    Sharegpt,
    /// Plain-text corpus cut to exact token lengths (Gutenberg-style).
    Text,
    /// SGLang's generated shared-prefix groups.
    #[value(alias = "gsp")]
    GeneratedSharedPrefix,
    /// One JSON object per line with a `prompt`.
    #[value(alias = "custom")]
    Jsonl,
    /// Multi-turn sessions (synthesized, or ShareGPT's conversations with --dataset-path);
    /// each turn is sent with the history so far, on the chat endpoint.
    #[value(alias = "multi-turn")]
    Conversation,
    /// A Mooncake JSONL trace (--dataset-path), replayed at its timestamps; AIPerf's
    /// `mooncake_trace` lines (`text_input`, `messages`, sessions) too.
    #[value(alias = "mooncake-trace")]
    Mooncake,
    /// Weka's agentic-coding traces (--dataset-path: a JSON file per session, or a
    /// directory of them), replayed as agent sessions.
    #[value(alias = "weka-trace")]
    Weka,
}

/// `--conversation-input-dist`, `--conversation-output-dist`: a vLLM distribution as JSON.
pub(super) fn dist(s: &str) -> Result<Dist, String> {
    let d = serde_json::from_str::<Dist>(s).map_err(|e| {
        format!(
            "`{s}` is not a distribution like '{{\"distribution\": \"lognormal\", \"average\": 200}}': {e}"
        )
    })?;
    match d.problem() {
        Some(why) => Err(why),
        None => Ok(d),
    }
}

/// `--conversation-num-turns`: a number of messages, or a vLLM distribution as JSON.
pub(super) fn num_turns(s: &str) -> Result<Dist, String> {
    let d = match s.trim().parse::<u32>() {
        Ok(0) => return Err("must be at least 1 (messages: 2 is one request)".into()),
        Ok(value) => Dist::Constant { value },
        Err(_) => serde_json::from_str::<Dist>(s).map_err(|e| {
            format!(
                "`{s}` is neither a number nor a distribution like '{{\"distribution\": \"uniform\", \"min\": 4, \"max\": 8}}': {e}"
            )
        })?,
    };
    match d.problem() {
        Some(why) => Err(why),
        None => Ok(d),
    }
}

/// A duration flag that must be longer than zero (`--request-timeout 0s` would fail every
/// request at once).
fn positive_duration(s: &str) -> Result<Duration, String> {
    match parse_duration(s) {
        Ok(d) if d.is_zero() => {
            Err("must be longer than 0s; leave the flag out for no limit".into())
        }
        Ok(d) => Ok(d),
        Err(e) => Err(e.to_string()),
    }
}

/// `--stall-timeout`: a duration longer than zero, or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct StallFlag(pub Option<Duration>);

fn stall_flag(s: &str) -> Result<StallFlag, String> {
    if s.trim().eq_ignore_ascii_case("off") {
        return Ok(StallFlag(None));
    }
    match parse_duration(s) {
        Ok(d) if d.is_zero() => {
            Err("must be longer than 0s; write `off` to wait for a silent server for ever".into())
        }
        Ok(d) => Ok(StallFlag(Some(d))),
        Err(e) => Err(format!("{e}, or `off`")),
    }
}

/// `--timeseries-interval`: a duration of at least 100ms, or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct IntervalFlag(pub Option<Duration>);

fn interval_flag(s: &str) -> Result<IntervalFlag, String> {
    if s.trim().eq_ignore_ascii_case("off") {
        return Ok(IntervalFlag(None));
    }
    let min = crate::load::MIN_TIMESERIES_INTERVAL;
    match parse_duration(s) {
        Ok(d) if d < min => Err(format!(
            "must be at least {}; write `off` to keep no time series",
            crate::units::format_duration(min)
        )),
        Ok(d) => Ok(IntervalFlag(Some(d))),
        Err(e) => Err(format!("{e}, or `off`")),
    }
}

/// Arguments of `orchestrate bench` (vllm bench serve's flag names and meanings).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Server dialect: how ignore_eos and streamed usage are asked for.
    #[arg(long, value_enum, default_value = "vllm")]
    pub(super) backend: Backend,
    /// Server base URL (overrides --host/--port), e.g. http://127.0.0.1:8000.
    #[arg(long)]
    pub(super) base_url: Option<String>,
    #[arg(long, default_value = "127.0.0.1")]
    pub(super) host: String,
    #[arg(long, default_value_t = 8000)]
    pub(super) port: u16,
    /// Request path; a path ending in chat/completions uses the chat API.
    #[arg(long, default_value = "/v1/completions")]
    pub(super) endpoint: String,
    /// Model name (also the tokenizer when --tokenizer is not given).
    #[arg(long)]
    pub(super) model: String,
    /// Name sent in the `model` field of requests, when it differs from --model.
    #[arg(long)]
    pub(super) served_model_name: Option<String>,
    /// tokenizer.json (or a directory holding one), or a model id in the local HF cache.
    /// Without one, the server's /tokenize endpoint is used.
    #[arg(long)]
    pub(super) tokenizer: Option<String>,
    #[arg(long, value_enum, default_value = "random")]
    pub(super) dataset_name: DatasetName,
    #[arg(long)]
    pub(super) dataset_path: Option<PathBuf>,
    #[arg(long, default_value_t = 1024)]
    pub(super) random_input_len: u32,
    #[arg(long, default_value_t = 128)]
    pub(super) random_output_len: u32,
    /// Lengths vary uniformly in [len*(1-r), len*(1+r)] (vLLM's meaning).
    #[arg(long, default_value_t = 0.0)]
    pub(super) random_range_ratio: f64,
    #[arg(long, default_value_t = 0)]
    pub(super) random_prefix_len: u32,
    #[arg(long)]
    pub(super) sharegpt_input_len: Option<u32>,
    #[arg(long)]
    pub(super) sharegpt_output_len: Option<u32>,
    #[arg(long, default_value_t = 1024)]
    pub(super) text_input_len: u32,
    #[arg(long, default_value_t = 128)]
    pub(super) text_output_len: u32,
    /// Output length for JSONL prompts without their own `output_len`.
    #[arg(long, alias = "custom-output-len")]
    pub(super) jsonl_output_len: Option<u32>,
    #[arg(long, default_value_t = 64)]
    pub(super) gsp_num_groups: u32,
    #[arg(long, default_value_t = 16)]
    pub(super) gsp_prompts_per_group: u32,
    #[arg(long, default_value_t = 2048)]
    pub(super) gsp_system_prompt_len: u32,
    #[arg(long, default_value_t = 128)]
    pub(super) gsp_question_len: u32,
    #[arg(long, default_value_t = 256)]
    pub(super) gsp_output_len: u32,
    /// Messages per session, user and assistant together as vLLM counts them (8 is four
    /// requests): a number or a vLLM distribution as JSON; with --dataset-path, a cap
    /// (vLLM's --max-turns). Default 8 (synthesized), no cap (ShareGPT).
    #[arg(long, alias = "max-turns", value_parser = num_turns, value_name = "N|JSON")]
    pub(super) conversation_num_turns: Option<Dist>,
    /// Tokens of each user message of a synthesized session.
    #[arg(long, default_value_t = 128)]
    pub(super) conversation_input_len: u32,
    /// Tokens of each answer (ShareGPT sessions: default the reference answer's length).
    #[arg(long)]
    pub(super) conversation_output_len: Option<u32>,
    /// Each user message's length drawn from a vLLM distribution (JSON) instead of
    /// --conversation-input-len and --random-range-ratio.
    #[arg(long, value_parser = dist, value_name = "JSON")]
    pub(super) conversation_input_dist: Option<Dist>,
    /// Each answer's length drawn from a vLLM distribution (JSON) instead of
    /// --conversation-output-len and --random-range-ratio.
    #[arg(long, value_parser = dist, value_name = "JSON")]
    pub(super) conversation_output_dist: Option<Dist>,
    /// Tokens of a prefix unique to each synthesized session, opening its first user
    /// message (vLLM's prefix_num_tokens; 0: none).
    #[arg(long, default_value_t = 0)]
    pub(super) conversation_prefix_len: u32,
    /// Tokens of the system prompt every synthesized session shares (0: none).
    #[arg(long, default_value_t = 0)]
    pub(super) conversation_system_prompt_len: u32,
    /// Pause between an answer and the session's next turn, e.g. 500ms.
    #[arg(long, value_parser = parse_duration, default_value = "0s")]
    pub(super) conversation_think_time: Duration,
    /// Prompt tokens per hash id of a Mooncake trace (512 in Mooncake's published traces).
    #[arg(long, default_value_t = crate::dataset::DEFAULT_BLOCK_SIZE)]
    pub(super) mooncake_block_size: u32,
    /// Trace timestamps (and Weka think times) are multiplied by this (SGLang's name; 0.5
    /// replays twice as fast).
    #[arg(long, default_value_t = 1.0)]
    pub(super) mooncake_slowdown_factor: f64,
    /// Replay the trace from this far into it, e.g. 10m.
    #[arg(long, value_parser = parse_duration, default_value = "0s")]
    pub(super) mooncake_start: Duration,
    /// Replay only this long of the trace after --mooncake-start, e.g. 5m.
    #[arg(long, value_parser = parse_duration)]
    pub(super) mooncake_duration: Option<Duration>,
    #[arg(long, default_value_t = 1000)]
    pub(super) num_prompts: u64,
    /// At most this many requests in flight (conversations: sessions in flight, vLLM's
    /// --max-active-conversations).
    #[arg(long, alias = "max-active-conversations")]
    pub(super) max_concurrency: Option<u32>,
    /// Requests per second, or inf (all at once, bounded by --max-concurrency).
    #[arg(long, default_value = "inf")]
    pub(super) request_rate: String,
    /// Gamma shape of the gaps: 1 = Poisson, <1 burstier, >1 more regular.
    #[arg(long, default_value_t = 1.0)]
    pub(super) burstiness: f64,
    #[arg(long, value_enum)]
    pub(super) ramp_up_strategy: Option<RampStrategy>,
    #[arg(long)]
    pub(super) ramp_up_start_rps: Option<f64>,
    #[arg(long)]
    pub(super) ramp_up_end_rps: Option<f64>,
    #[arg(long)]
    pub(super) ignore_eos: bool,
    /// Metrics printed with percentiles (the JSON always has all): ttft,tpot,itl,icl,e2el.
    #[arg(long, default_value = "ttft,tpot,itl")]
    pub(super) percentile_metrics: String,
    /// Percentiles, comma-separated.
    #[arg(long, default_value = "99")]
    pub(super) metric_percentiles: String,
    /// SLOs for goodput, KEY:MS with KEY in ttft, tpot, e2el.
    #[arg(long, num_args = 1..)]
    pub(super) goodput: Vec<String>,
    #[arg(long)]
    pub(super) save_result: bool,
    /// Also write per-request lists (vLLM's input_lens, ttfts, itls, ...) into the result JSON.
    #[arg(long)]
    pub(super) save_detailed: bool,
    #[arg(long, default_value = ".")]
    pub(super) result_dir: PathBuf,
    #[arg(long)]
    pub(super) result_filename: Option<String>,
    #[arg(long)]
    pub(super) label: Option<String>,
    /// KEY=VALUE pairs written as top-level keys of the result JSON.
    #[arg(long, num_args = 1..)]
    pub(super) metadata: Vec<String>,
    #[arg(long, default_value_t = 0)]
    pub(super) seed: u64,
    /// No live progress line.
    #[arg(long)]
    pub(super) disable_tqdm: bool,
    /// JSON object merged into every request body.
    #[arg(long)]
    pub(super) extra_body: Option<String>,
    /// Excluded from the trimmed figures at the start (token timestamps), e.g. 30s.
    #[arg(long, value_parser = parse_duration)]
    pub(super) warmup_time: Option<Duration>,
    /// Excluded from the trimmed figures at the end, e.g. 30s.
    #[arg(long, value_parser = parse_duration)]
    pub(super) cooldown_time: Option<Duration>,
    /// Issue requests for this long instead of --num-prompts (prompts are reused).
    #[arg(long, value_parser = parse_duration)]
    pub(super) duration: Option<Duration>,
    /// After --duration, how long in-flight requests may finish before they count as incomplete.
    #[arg(long, value_parser = parse_duration)]
    pub(super) drain_timeout: Option<Duration>,
    /// Per-request deadline for the whole stream, e.g. 10m (longer than 0s).
    #[arg(long, value_parser = positive_duration)]
    pub(super) request_timeout: Option<Duration>,
    /// Per-request deadline for the first token (longer than 0s).
    #[arg(long, value_parser = positive_duration)]
    pub(super) ttft_timeout: Option<Duration>,
    /// A request the server sends no byte for this long (connecting, in the head or the
    /// body) fails as `stalled`; `off` waits for ever. Default 5m.
    #[arg(long, value_parser = stall_flag, value_name = "DURATION|off")]
    pub(super) stall_timeout: Option<StallFlag>,
    /// Re-tokenize every N-th answer to cross-check the server's usage (0 = never).
    #[arg(long, default_value_t = 0)]
    pub(super) usage_check_every: u32,
    /// Do not scrape the server's Prometheus /metrics during the run.
    #[arg(long)]
    pub(super) no_server_metrics: bool,
    /// Bin width of the time series (client figures and server gauges on the run's clock)
    /// written beside the result with --save-result, and the /metrics scrape interval.
    #[arg(long, value_parser = interval_flag, value_name = "DURATION|off", default_value = "1s")]
    pub(super) timeseries_interval: IntervalFlag,
    /// Tokens per block of the workload's ideal prefix-cache hit rate (the server's
    /// --block-size; vLLM's default 16).
    #[arg(long, default_value_t = crate::metrics::DEFAULT_BLOCK_TOKENS, value_parser = clap::value_parser!(u32).range(1..), value_name = "TOKENS")]
    pub(super) prefix_block_size: u32,
    /// Capacity search along AXIS (concurrency or request-rate) instead of one measurement:
    /// the largest level that meets the --search-slo / --search-attainment SLOs.
    #[arg(long, value_name = "AXIS")]
    pub(super) search: Option<String>,
    /// The first level measured; if it fails, the capacity is below the range.
    #[arg(long, default_value_t = 1.0, value_name = "LEVEL")]
    pub(super) search_min: f64,
    /// The second level measured (the saturated probe); without it the search probes
    /// upwards (x4) until a level fails.
    #[arg(long, value_name = "LEVEL")]
    pub(super) search_max: Option<f64>,
    /// Aggregate SLO over the pooled requests of a level, pP:METRIC:LIMIT (METRIC ttft, tpot
    /// or e2el), e.g. p99:ttft:2s p99:tpot:50ms.
    #[arg(long, num_args = 1.., value_name = "SLO")]
    pub(super) search_slo: Vec<String>,
    /// Attainment SLO: at least this percent of requests meet every --goodput bound.
    #[arg(long, value_name = "PERCENT")]
    pub(super) search_attainment: Option<f64>,
    /// Stop when smallest failing / largest passing <= 1 + WIDTH.
    #[arg(long, default_value_t = 0.1)]
    pub(super) search_width: f64,
    /// Most distinct levels measured.
    #[arg(long, default_value_t = 8)]
    pub(super) search_max_points: u32,
    /// Most measurements of one level (only an inconclusive verdict is measured again).
    #[arg(long, default_value_t = 3)]
    pub(super) search_repetitions: u32,
    /// One-sided confidence of each verdict.
    #[arg(long, default_value_t = 0.95)]
    pub(super) search_confidence: f64,
    /// Bearer token (vLLM reads OPENAI_API_KEY too).
    #[arg(long, env = "OPENAI_API_KEY", hide_env_values = true)]
    pub(super) api_key: Option<String>,
}
