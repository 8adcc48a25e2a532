//! The result object: vllm bench serve's field names and meanings for every field they share,
//! plus ours (per-token ITL beside inter-chunk latency, time to first output token and
//! reasoning tokens, outcome counts, usage cross-checks, the prefix cache's hit rates, the
//! trimmed window). Built from records only; the server's and the ideal hit rates are added
//! by the caller (`Summary::set_prefix_cache`).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::prefix::client_hit_rate;
use super::samples::{chunk_gaps, request_times, token_arrivals, token_itls};
use super::sessions::{Sessions, peak_of, sessions};
use super::stats::Stats;
use super::window::Window;
use crate::client::{ChunkTokens, RequestRecord};

pub use crate::load::{Slo, SloMetric};

/// How to summarize.
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryOptions {
    /// Percentiles to report (vLLM's `--metric-percentiles`, default 99).
    pub percentiles: Vec<f64>,
    /// SLOs for goodput; empty = no goodput (`request_goodput` null).
    pub goodput: Vec<Slo>,
    pub warmup: Duration,
    pub cooldown: Duration,
}

impl Default for SummaryOptions {
    fn default() -> Self {
        SummaryOptions {
            percentiles: vec![99.0],
            goodput: Vec::new(),
            warmup: Duration::ZERO,
            cooldown: Duration::ZERO,
        }
    }
}

/// Goodput figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Goodput {
    pub slos: Vec<Slo>,
    pub good_requests: u64,
    /// Good requests / all requests issued (failed ones included).
    pub good_request_fraction: f64,
}

/// The figures of the measured window (warm-up and cool-down trimmed on token timestamps).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trimmed {
    pub warmup_s: f64,
    pub cooldown_s: f64,
    pub window_start_s: f64,
    pub window_end_s: f64,
    /// Output tokens that arrived inside the window.
    pub output_tokens: u64,
    pub output_throughput: f64,
    /// Requests sent inside the window, and how many of them completed.
    pub requests_started: u64,
    pub requests_completed: u64,
    /// TTFT/TPOT/E2EL of requests sent inside the window; ITL/ICL of gaps ending inside it.
    #[serde(flatten)]
    pub latency: Map<String, Value>,
}

/// Requests whose server usage and client tokenizer count of the output disagree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageCheck {
    /// Completed requests with both counts.
    pub checked: u64,
    pub mismatched: u64,
    /// Largest |usage - tokenizer| / usage, percent.
    pub max_diff_pct: f64,
}

/// The result of one load point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Seconds from the run start until the last request ended.
    pub duration: f64,
    pub completed: u64,
    /// Every request that did not complete, whatever the reason (see `outcomes`).
    pub failed: u64,
    pub total_input_tokens: u64,
    pub total_output_tokens: u64,
    pub request_throughput: f64,
    pub request_goodput: Option<f64>,
    pub output_throughput: f64,
    pub total_token_throughput: f64,
    /// Peak output tokens in a 1 s bucket (tokens, not chunks).
    pub max_output_tokens_per_s: f64,
    /// Exact peak of requests in flight.
    pub max_concurrent_requests: u64,
    /// `mean_/median_/std_/pP_` for `ttft`, `tpot`, `itl` (per token), `icl` (per chunk),
    /// `e2el`, in ms.
    #[serde(flatten)]
    pub latency: Map<String, Value>,
    pub input_throughput: f64,
    /// Requests issued, by outcome class (`completed`, `http_status`, `timed_out`, ...).
    pub outcomes: BTreeMap<String, u64>,
    /// Failure reasons with counts, most frequent first (at most 20).
    pub errors: Vec<(String, u64)>,
    pub goodput: Option<Goodput>,
    /// Output tokens / output-bearing chunks over completed requests.
    pub mean_tokens_per_chunk: f64,
    /// True when every completed request reported usage per chunk (exact per-token timing);
    /// otherwise one token per chunk was assumed where it was not.
    pub chunk_tokens_exact: bool,
    pub usage_check: UsageCheck,
    /// Completed requests whose output token count differs from the requested length.
    pub output_len_mismatch: u64,
    /// The trimmed window, when a warm-up or cool-down was asked for.
    pub trimmed: Option<Trimmed>,
    /// Σ `cached_tokens` over the completed requests that reported it; `None`: none did.
    #[serde(default)]
    pub cached_prompt_tokens: Option<u64>,
    /// Client-side prefix-cache hit rate: Σ cached / Σ input tokens over those requests.
    #[serde(default)]
    pub prefix_cache_hit_rate: Option<f64>,
    /// The server's own hit rate over the point, from its `/metrics`.
    #[serde(default)]
    pub server_prefix_cache_hit_rate: Option<f64>,
    /// The workload's hit rate with an infinite cache (prefix.rs).
    #[serde(default)]
    pub ideal_prefix_cache_hit_rate: Option<f64>,
    /// The achieved rate (client-side, else the server's) over the ideal one; `None` when
    /// either is unknown or the workload has no reuse.
    #[serde(default)]
    pub prefix_cache_hit_vs_ideal: Option<f64>,
    /// Tokens per block of the ideal rate.
    #[serde(default)]
    pub prefix_block_tokens: Option<u32>,
    /// Σ `completion_tokens_details.reasoning_tokens` over the completed requests that
    /// reported it; `None`: none did.
    #[serde(default)]
    pub total_reasoning_tokens: Option<u64>,
    /// Completed requests whose first answer chunk came after their first output chunk
    /// (they streamed reasoning first), or that reported reasoning tokens.
    #[serde(default)]
    pub reasoning_requests: u64,
    /// Conversations: per-session and per-turn figures; absent for independent prompts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<Sessions>,
}

impl Summary {
    /// Add the server's hit rate and the ideal one (with its block size), and achieved over
    /// ideal.
    pub fn set_prefix_cache(&mut self, server: Option<f64>, ideal: Option<(f64, u32)>) {
        self.server_prefix_cache_hit_rate = server;
        self.ideal_prefix_cache_hit_rate = ideal.map(|i| i.0);
        self.prefix_block_tokens = ideal.map(|i| i.1);
        let achieved = self.prefix_cache_hit_rate.or(server);
        self.prefix_cache_hit_vs_ideal = match (achieved, ideal) {
            (Some(a), Some((i, _))) if i > 0.0 => Some(a / i),
            _ => None,
        };
    }
}

/// Records -> summary.
pub fn summarize(records: &[RequestRecord], opts: &SummaryOptions) -> Summary {
    let run_end_us = records.iter().map(|r| r.end_us).max().unwrap_or(0);
    let duration = (run_end_us as f64 / 1e6).max(1e-9);
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    let (mut ttft, mut tpot, mut e2el, mut itl, mut icl) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut completed, mut input, mut output, mut chunks, mut good) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut exact = true;
    let mut usage = UsageCheck {
        checked: 0,
        mismatched: 0,
        max_diff_pct: 0.0,
    };
    let mut len_mismatch = 0;
    let mut buckets: BTreeMap<u64, u64> = BTreeMap::new();
    for r in records {
        *outcomes.entry(r.outcome.class().to_string()).or_default() += 1;
        let Some(t) = request_times(r) else {
            *errors.entry(reason(r)).or_default() += 1;
            continue;
        };
        completed += 1;
        input += r.input_tokens();
        output += t.output_tokens;
        chunks += r.chunks.len() as u64;
        exact &= r.chunk_tokens == ChunkTokens::Usage;
        if t.output_tokens != u64::from(r.output_len) {
            len_mismatch += 1;
        }
        if let (Some(u), Some(k)) = (r.usage.completion_tokens, r.tokenizer_output_tokens) {
            usage.checked += 1;
            if u != k {
                usage.mismatched += 1;
                let pct = f64::from(u.abs_diff(k)) * 100.0 / f64::from(u.max(1));
                usage.max_diff_pct = usage.max_diff_pct.max(pct);
            }
        }
        ttft.push(t.ttft_ms);
        e2el.push(t.e2el_ms);
        if let Some(x) = t.tpot_ms {
            tpot.push(x);
        }
        token_itls(r, |_, v| itl.push(v));
        chunk_gaps(r, |_, v| icl.push(v));
        token_arrivals(r, |at, n| *buckets.entry(at / 1_000_000).or_default() += n);
        if is_good(&t, &opts.goodput) {
            good += 1;
        }
    }
    let issued = records.len() as u64;
    let mut latency = Map::new();
    for (name, values) in [
        ("ttft", &mut ttft),
        ("tpot", &mut tpot),
        ("itl", &mut itl),
        ("icl", &mut icl),
        ("e2el", &mut e2el),
    ] {
        Stats::of(values, &opts.percentiles).write(name, &mut latency);
    }
    let (reasoning_tokens, reasoning_requests) = reasoning(records);
    // Time to first output token: its own figures only when some request reasoned first
    // (otherwise it is the TTFT).
    if reasoning_requests > 0 {
        let mut ttfot: Vec<f64> = records
            .iter()
            .filter_map(|r| request_times(r)?.ttfot_ms)
            .collect();
        Stats::of(&mut ttfot, &opts.percentiles).write("ttfot", &mut latency);
    }
    let (cached_prompt_tokens, prefix_cache_hit_rate) = client_hit_rate(records);
    let mut errors: Vec<(String, u64)> = errors.into_iter().collect();
    errors.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    errors.truncate(20);
    let goodput = (!opts.goodput.is_empty()).then(|| Goodput {
        slos: opts.goodput.clone(),
        good_requests: good,
        good_request_fraction: if issued == 0 {
            0.0
        } else {
            good as f64 / issued as f64
        },
    });
    Summary {
        duration,
        completed,
        failed: issued - completed,
        total_input_tokens: input,
        total_output_tokens: output,
        request_throughput: completed as f64 / duration,
        request_goodput: goodput.as_ref().map(|g| g.good_requests as f64 / duration),
        output_throughput: output as f64 / duration,
        total_token_throughput: (input + output) as f64 / duration,
        max_output_tokens_per_s: buckets.values().copied().max().unwrap_or(0) as f64,
        max_concurrent_requests: peak_concurrency(records),
        latency,
        input_throughput: input as f64 / duration,
        outcomes,
        errors,
        goodput,
        mean_tokens_per_chunk: if chunks == 0 {
            0.0
        } else {
            output as f64 / chunks as f64
        },
        chunk_tokens_exact: exact && completed > 0,
        usage_check: usage,
        output_len_mismatch: len_mismatch,
        trimmed: Window::trimmed(run_end_us, opts.warmup, opts.cooldown)
            .map(|w| trimmed(records, w, opts, reasoning_requests > 0)),
        cached_prompt_tokens,
        prefix_cache_hit_rate,
        server_prefix_cache_hit_rate: None,
        ideal_prefix_cache_hit_rate: None,
        prefix_cache_hit_vs_ideal: None,
        prefix_block_tokens: None,
        total_reasoning_tokens: reasoning_tokens,
        reasoning_requests,
        sessions: sessions(records, &opts.percentiles),
    }
}

/// Σ reported reasoning tokens (`None`: none reported) and the completed requests that
/// reasoned: their first answer chunk came after their first output chunk, or they
/// reported reasoning tokens.
fn reasoning(records: &[RequestRecord]) -> (Option<u64>, u64) {
    let (mut tokens, mut requests) = (None::<u64>, 0u64);
    for r in records {
        let Some(t) = request_times(r) else { continue };
        if let Some(n) = r.usage.reasoning_tokens {
            *tokens.get_or_insert(0) += u64::from(n);
        }
        if t.ttfot_ms.is_some_and(|x| x > t.ttft_ms)
            || r.usage.reasoning_tokens.is_some_and(|n| n > 0)
        {
            requests += 1;
        }
    }
    (tokens, requests)
}

fn reason(r: &RequestRecord) -> String {
    use crate::client::RequestOutcome as O;
    match &r.outcome {
        O::HttpStatus { code, body } => {
            let body: String = body.chars().take(120).collect();
            format!("HTTP {code}: {body}")
        }
        O::StreamError { message } | O::ConnectFailed { message } => {
            message.chars().take(160).collect()
        }
        O::TimedOut { phase } => format!("timed out ({phase:?})"),
        O::Stalled { silent_ms } => format!(
            "stalled: no byte from the server for {}",
            crate::units::format_duration(Duration::from_millis(*silent_ms))
        ),
        other => other.class().to_string(),
    }
}

fn is_good(t: &super::samples::RequestTimes, slos: &[Slo]) -> bool {
    slos.iter().all(|s| match s.metric {
        SloMetric::Ttft => t.ttft_ms <= s.ms,
        // vLLM: a request with one output token has TPOT 0.
        SloMetric::Tpot => t.tpot_ms.unwrap_or(0.0) <= s.ms,
        SloMetric::E2el => t.e2el_ms <= s.ms,
    })
}

/// Exact peak of requests in flight: a sweep over `[sent, end)` of every request.
fn peak_concurrency(records: &[RequestRecord]) -> u64 {
    peak_of(records.iter().map(|r| (r.sent_us, r.end_us)))
}

/// The figures of the window `w`; `reasoning`: with the time to first output token.
fn trimmed(
    records: &[RequestRecord],
    w: Window,
    opts: &SummaryOptions,
    reasoning: bool,
) -> Trimmed {
    let (mut ttft, mut tpot, mut e2el, mut itl, mut icl) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut ttfot = Vec::new();
    let (mut tokens, mut started, mut done) = (0u64, 0u64, 0u64);
    for r in records {
        let inside = w.contains(r.sent_us);
        started += u64::from(inside);
        let Some(t) = request_times(r) else { continue };
        token_arrivals(r, |at, n| {
            if w.contains(at) {
                tokens += n;
            }
        });
        token_itls(r, |at, v| {
            if w.contains(at) {
                itl.push(v);
            }
        });
        chunk_gaps(r, |at, v| {
            if w.contains(at) {
                icl.push(v);
            }
        });
        if inside {
            done += 1;
            if let Some(x) = t.ttfot_ms {
                ttfot.push(x);
            }
            ttft.push(t.ttft_ms);
            e2el.push(t.e2el_ms);
            if let Some(x) = t.tpot_ms {
                tpot.push(x);
            }
        }
    }
    let mut latency = Map::new();
    for (name, values) in [
        ("ttft", &mut ttft),
        ("tpot", &mut tpot),
        ("itl", &mut itl),
        ("icl", &mut icl),
        ("e2el", &mut e2el),
    ] {
        Stats::of(values, &opts.percentiles).write(name, &mut latency);
    }
    if reasoning {
        Stats::of(&mut ttfot, &opts.percentiles).write("ttfot", &mut latency);
    }
    Trimmed {
        warmup_s: opts.warmup.as_secs_f64(),
        cooldown_s: opts.cooldown.as_secs_f64(),
        window_start_s: w.start_us as f64 / 1e6,
        window_end_s: w.end_us as f64 / 1e6,
        output_tokens: tokens,
        output_throughput: tokens as f64 / w.seconds(),
        requests_started: started,
        requests_completed: done,
        latency,
    }
}
