//! The server's own view of the measured window: its Prometheus `/metrics` scraped about once a
//! second during the run (and once before the first request and after the last), then the
//! snapshots nearest the window's edges are differenced. Families are matched by name suffix so
//! one parser serves vLLM (`vllm:`), SGLang (`sglang:`), TRT-LLM (`trtllm_`) and Dynamo
//! (`dynamo_frontend_`): `time_to_first_token_seconds`, `inter_token_latency_seconds` (else
//! `time_per_output_token_seconds`), `e2e_request_latency_seconds`, `generation_tokens_total`
//! and `prompt_tokens_total`, summed over label sets. The prefix cache's own hit rate comes
//! from each engine's names: vLLM's `vllm:prefix_cache_hits`/`_queries` counters, SGLang's
//! `sglang:cached_tokens_total` counter (else its `sglang:cache_hit_rate` gauge) and llama.cpp's
//! `llamacpp:prompt_tokens_cached_total` beside `llamacpp:prompt_tokens_total`. Every scrape
//! also keeps the server's gauges (`gauges`). The scraping itself is `scraper`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::gauges::Gauges;
use crate::fetch::{self, Origin};

const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);

/// A histogram: cumulative bucket counts by upper bound, sum and count.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Histogram {
    pub buckets: BTreeMap<OrdF64, f64>,
    pub sum: f64,
    pub count: f64,
}

/// An f64 usable as a map key (bucket bounds, `+Inf` included).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct OrdF64(pub f64);
impl Eq for OrdF64 {}
impl PartialOrd for OrdF64 {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for OrdF64 {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// What one scrape found.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Snapshot {
    pub ttft: Histogram,
    pub itl: Histogram,
    pub e2el: Histogram,
    pub generation_tokens: f64,
    pub prompt_tokens: f64,
    /// The prefix-cache families, `None` where the server has none.
    pub prefix: PrefixCounters,
    /// Running and waiting requests, KV-cache usage.
    pub gauges: Gauges,
}

/// What a server says about its prefix cache, in tokens (summed over label sets).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct PrefixCounters {
    /// vLLM: `vllm:prefix_cache_queries(_total)` and `vllm:prefix_cache_hits(_total)`.
    pub vllm_queries: Option<f64>,
    pub vllm_hits: Option<f64>,
    /// SGLang: `sglang:cached_tokens_total` (every `cache_source`).
    pub sglang_cached: Option<f64>,
    /// SGLang: the `sglang:cache_hit_rate` gauge (the server's recent batches).
    pub sglang_hit_rate: Option<f64>,
    /// llama.cpp: `llamacpp:prompt_tokens_cached_total` (its `prompt_tokens_total` counts
    /// only the tokens it evaluated).
    pub llamacpp_cached: Option<f64>,
}

fn add(slot: &mut Option<f64>, v: f64) {
    *slot = Some(slot.unwrap_or(0.0) + v);
}

/// Parse Prometheus text exposition into the families we use.
pub(crate) fn parse(text: &str) -> Snapshot {
    let mut s = Snapshot::default();
    let mut tpot = Histogram::default();
    let mut saw_itl = false;
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (name_labels, value) = match line.rsplit_once(' ') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => continue,
        };
        // A trailing timestamp: `name value ts`.
        let (name_labels, value) = match name_labels.rsplit_once(' ') {
            Some((a, v)) if !name_labels.ends_with('}') && v.parse::<f64>().is_ok() => (a, v),
            _ => (name_labels, value),
        };
        let Ok(v) = value.parse::<f64>() else {
            continue;
        };
        let (name, labels) = match name_labels.find('{') {
            Some(i) => (&name_labels[..i], &name_labels[i..]),
            None => (name_labels, ""),
        };
        let hist = |base: &str| -> Option<(&'static str, String)> {
            for part in ["_bucket", "_sum", "_count"] {
                if let Some(stem) = name.strip_suffix(part)
                    && stem.ends_with(base)
                {
                    return Some((part, labels.to_string()));
                }
            }
            None
        };
        let put = |h: &mut Histogram, part: &str| match part {
            "_sum" => h.sum += v,
            "_count" => h.count += v,
            _ => {
                if let Some(le) = le(labels) {
                    *h.buckets.entry(OrdF64(le)).or_default() += v;
                }
            }
        };
        if let Some((part, _)) = hist("time_to_first_token_seconds") {
            put(&mut s.ttft, part);
        } else if let Some((part, _)) = hist("inter_token_latency_seconds") {
            saw_itl = true;
            put(&mut s.itl, part);
        } else if let Some((part, _)) = hist("time_per_output_token_seconds") {
            put(&mut tpot, part);
        } else if let Some((part, _)) = hist("e2e_request_latency_seconds") {
            put(&mut s.e2el, part);
        } else if name.ends_with("generation_tokens_total") {
            s.generation_tokens += v;
        } else if name.ends_with("prompt_tokens_total") {
            s.prompt_tokens += v;
        } else if !s.gauges.take(name, v) {
            let p = &mut s.prefix;
            match name {
                "vllm:prefix_cache_queries_total" | "vllm:prefix_cache_queries" => {
                    add(&mut p.vllm_queries, v);
                }
                "vllm:prefix_cache_hits_total" | "vllm:prefix_cache_hits" => {
                    add(&mut p.vllm_hits, v);
                }
                "sglang:cached_tokens_total" => add(&mut p.sglang_cached, v),
                "sglang:cache_hit_rate" => add(&mut p.sglang_hit_rate, v),
                "llamacpp:prompt_tokens_cached_total" => add(&mut p.llamacpp_cached, v),
                _ => {}
            }
        }
    }
    if !saw_itl {
        s.itl = tpot;
    }
    s
}

fn le(labels: &str) -> Option<f64> {
    let start = labels.find("le=\"")? + 4;
    let end = start + labels[start..].find('"')?;
    match &labels[start..end] {
        "+Inf" => Some(f64::INFINITY),
        x => x.parse().ok(),
    }
}

/// The server's figures for one window, from two snapshots.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerWindow {
    /// Seconds since the run start of the two scrapes used.
    pub from_s: f64,
    pub to_s: f64,
    pub ttft: Option<ServerLatency>,
    pub itl: Option<ServerLatency>,
    pub e2el: Option<ServerLatency>,
    pub generation_tokens: f64,
    pub prompt_tokens: f64,
    /// generation tokens / (to - from).
    pub output_throughput: f64,
    /// The server's own prefix-cache hit rate over the window (docs/metrics.md, "Prefix
    /// cache"); `None` when it reports no prefix-cache figure or looked nothing up.
    #[serde(default)]
    pub prefix_cache_hit_rate: Option<f64>,
}

/// A latency histogram's change over the window, in ms (percentiles interpolated within
/// buckets, as Prometheus' `histogram_quantile` does).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerLatency {
    pub count: f64,
    pub mean_ms: f64,
    pub median_ms: f64,
    pub p99_ms: f64,
}

fn delta(a: &Histogram, b: &Histogram) -> Option<ServerLatency> {
    let count = b.count - a.count;
    if count <= 0.0 {
        return None;
    }
    let buckets: Vec<(f64, f64)> = b
        .buckets
        .iter()
        .map(|(le, n)| (le.0, n - a.buckets.get(le).copied().unwrap_or(0.0)))
        .collect();
    let q = |q: f64| {
        let rank = q * count;
        let mut prev = (0.0, 0.0);
        for &(le, n) in &buckets {
            if n >= rank {
                if le.is_infinite() {
                    return prev.0 * 1000.0;
                }
                let frac = if n > prev.1 {
                    (rank - prev.1) / (n - prev.1)
                } else {
                    1.0
                };
                return (prev.0 + (le - prev.0) * frac) * 1000.0;
            }
            prev = (le, n);
        }
        prev.0 * 1000.0
    };
    Some(ServerLatency {
        count,
        mean_ms: (b.sum - a.sum) / count * 1000.0,
        median_ms: q(0.5),
        p99_ms: q(0.99),
    })
}

/// Difference the snapshots nearest `[start_us, end_us]` (times since the run start).
pub(crate) fn window(
    snaps: &[(u64, Snapshot)],
    start_us: u64,
    end_us: u64,
) -> Option<ServerWindow> {
    let nearest = |t: u64| snaps.iter().min_by_key(|(at, _)| at.abs_diff(t));
    let (t0, a) = nearest(start_us)?;
    let (t1, b) = nearest(end_us)?;
    if t1 <= t0 {
        return None;
    }
    let secs = (t1 - t0) as f64 / 1e6;
    let generation_tokens = b.generation_tokens - a.generation_tokens;
    let within: Vec<&Snapshot> = snaps
        .iter()
        .filter(|(at, _)| (*t0..=*t1).contains(at))
        .map(|(_, s)| s)
        .collect();
    Some(ServerWindow {
        from_s: *t0 as f64 / 1e6,
        to_s: *t1 as f64 / 1e6,
        ttft: delta(&a.ttft, &b.ttft),
        itl: delta(&a.itl, &b.itl),
        e2el: delta(&a.e2el, &b.e2el),
        generation_tokens,
        prompt_tokens: b.prompt_tokens - a.prompt_tokens,
        output_throughput: generation_tokens / secs,
        prefix_cache_hit_rate: prefix_hit_rate(a, b, &within),
    })
}

/// The server's prefix-cache hit rate between snapshots `a` and `b` (`within`: every
/// snapshot from `a` to `b`): vLLM Δhits / Δqueries; SGLang Δcached / Δprompt tokens, else
/// the mean of its hit-rate gauge over the snapshots; llama.cpp Δcached / (Δprompt tokens
/// evaluated + Δcached).
pub(super) fn prefix_hit_rate(a: &Snapshot, b: &Snapshot, within: &[&Snapshot]) -> Option<f64> {
    let d = |f: fn(&PrefixCounters) -> Option<f64>| Some(f(&b.prefix)? - f(&a.prefix)?);
    let ratio = |hits: f64, total: f64| (total > 0.0).then(|| (hits / total).clamp(0.0, 1.0));
    let prompt = b.prompt_tokens - a.prompt_tokens;
    if let (Some(hits), Some(queries)) = (d(|p| p.vllm_hits), d(|p| p.vllm_queries)) {
        return ratio(hits, queries);
    }
    if let Some(cached) = d(|p| p.sglang_cached) {
        return ratio(cached, prompt);
    }
    if let Some(cached) = d(|p| p.llamacpp_cached) {
        return ratio(cached, prompt + cached);
    }
    let gauge: Vec<f64> = within
        .iter()
        .filter_map(|s| s.prefix.sglang_hit_rate)
        .collect();
    (!gauge.is_empty()).then(|| gauge.iter().sum::<f64>() / gauge.len() as f64)
}

/// GET `path` on the server (through the cold-path layer); `None` on any failure.
pub(crate) async fn scrape(origin: &Origin, path: &str) -> Option<Snapshot> {
    let reply = fetch::get(origin, path, SCRAPE_TIMEOUT).await.ok()?;
    if !(200..300).contains(&reply.status) {
        return None;
    }
    Some(parse(&reply.text_lossy()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(ttft_sum: f64, counts: [f64; 3], gen_tokens: f64) -> String {
        format!(
            "# HELP vllm:time_to_first_token_seconds TTFT\n\
             # TYPE vllm:time_to_first_token_seconds histogram\n\
             vllm:time_to_first_token_seconds_bucket{{le=\"0.1\",model_name=\"m\"}} {}\n\
             vllm:time_to_first_token_seconds_bucket{{le=\"0.2\",model_name=\"m\"}} {}\n\
             vllm:time_to_first_token_seconds_bucket{{le=\"+Inf\",model_name=\"m\"}} {}\n\
             vllm:time_to_first_token_seconds_sum{{model_name=\"m\"}} {ttft_sum}\n\
             vllm:time_to_first_token_seconds_count{{model_name=\"m\"}} {}\n\
             vllm:generation_tokens_total{{model_name=\"m\"}} {gen_tokens}\n",
            counts[0], counts[1], counts[2], counts[2]
        )
    }

    #[test]
    fn parses_and_differences_a_window() {
        let a = parse(&text(1.0, [5.0, 10.0, 10.0], 100.0));
        assert_eq!(a.ttft.count, 10.0);
        assert_eq!(a.generation_tokens, 100.0);
        // 10 more requests, all between 0.1 and 0.2 s, TTFT sum +1.5 s.
        let b = parse(&text(2.5, [5.0, 20.0, 20.0], 1100.0));
        let w = window(&[(0, a), (2_000_000, b)], 0, 2_000_000).unwrap();
        let ttft = w.ttft.unwrap();
        assert_eq!(ttft.count, 10.0);
        assert!((ttft.mean_ms - 150.0).abs() < 1e-9);
        assert!((ttft.median_ms - 150.0).abs() < 1e-9);
        assert!((ttft.p99_ms - 199.0).abs() < 1e-9);
        assert_eq!(w.output_throughput, 500.0);
        assert!(w.itl.is_none());
    }

    #[test]
    fn prefix_cache_hit_rates_per_engine() {
        let rate = |before: &str, after: &str| {
            let snaps = [(0, parse(before)), (1_000_000, parse(after))];
            window(&snaps, 0, 1_000_000).unwrap().prefix_cache_hit_rate
        };
        // vLLM, with and without the `_total` suffix; the external hits are not the engine's.
        let vllm = |q: u32, h: u32| {
            format!(
                "vllm:prefix_cache_queries_total{{model_name=\"m\"}} {q}\nvllm:prefix_cache_hits_total{{model_name=\"m\"}} {h}\nvllm:external_prefix_cache_hits_total 999\n"
            )
        };
        assert_eq!(rate(&vllm(100, 10), &vllm(300, 160)), Some(0.75));
        assert_eq!(
            rate(
                "vllm:prefix_cache_queries 10\nvllm:prefix_cache_hits 0\n",
                "vllm:prefix_cache_queries 20\nvllm:prefix_cache_hits 5\n"
            ),
            Some(0.5)
        );
        // Nothing looked up in the window: no rate.
        assert_eq!(rate(&vllm(100, 10), &vllm(100, 10)), None);
        // SGLang: cached tokens of every source over prompt tokens.
        let sglang = |p: u32, d: u32, h: u32| {
            format!(
                "sglang:prompt_tokens_total{{model_name=\"m\"}} {p}\nsglang:cached_tokens_total{{cache_source=\"device\"}} {d}\nsglang:cached_tokens_total{{cache_source=\"host\"}} {h}\n"
            )
        };
        assert_eq!(rate(&sglang(0, 0, 0), &sglang(400, 200, 100)), Some(0.75));
        // An older SGLang: its gauge, averaged over the window's scrapes.
        assert_eq!(
            rate("sglang:cache_hit_rate 0.2\n", "sglang:cache_hit_rate 0.4\n")
                .map(|r| (r * 100.0).round()),
            Some(30.0)
        );
        // llama.cpp: its prompt tokens are the evaluated ones; the cached come on top.
        let llama = |p: u32, c: u32| {
            format!("llamacpp:prompt_tokens_total {p}\nllamacpp:prompt_tokens_cached_total {c}\n")
        };
        assert_eq!(rate(&llama(10, 0), &llama(35, 75)), Some(0.75));
        // A server without any of them.
        assert_eq!(
            rate(&text(0.0, [0.0; 3], 0.0), &text(0.0, [0.0; 3], 5.0)),
            None
        );
    }

    /// A real llama-server's `/metrics` before and after two turns of one conversation
    /// (scripts/real-engine-prefix.sh): its rate over the window is what the two answers'
    /// `usage` said, Σ cached / Σ prompt tokens.
    #[test]
    fn llama_cpp_recorded_rate_matches_its_usage() {
        let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
        let read = |f: &str| std::fs::read_to_string(format!("{fixtures}/{f}")).unwrap();
        let turns: serde_json::Value =
            serde_json::from_str(&read("streams/llama-cpp-chat-turn2.json")).unwrap();
        let (mut cached, mut prompt) = (0.0, 0.0);
        for usage in [&turns["first_turn_usage"], &turns["usage"]] {
            cached += usage["prompt_tokens_details"]["cached_tokens"]
                .as_f64()
                .unwrap();
            prompt += usage["prompt_tokens"].as_f64().unwrap();
        }
        assert!(cached > 0.0, "the second turn hit the slot's cache");
        let snaps = [
            (0, parse(&read("llama-cpp-prefix/metrics-before.txt"))),
            (
                1_000_000,
                parse(&read("llama-cpp-prefix/metrics-after.txt")),
            ),
        ];
        let w = window(&snaps, 0, 1_000_000).unwrap();
        let got = w.prefix_cache_hit_rate.unwrap();
        assert!(
            (got - cached / prompt).abs() < 1e-12,
            "{got} vs {cached}/{prompt}"
        );
    }

    #[test]
    fn other_servers_names_match_by_suffix() {
        let s = parse(
            "sglang:inter_token_latency_seconds_sum 2\nsglang:inter_token_latency_seconds_count 4\n\
             dynamo_frontend_time_to_first_token_seconds_count{model=\"x\"} 3\n",
        );
        assert_eq!((s.itl.sum, s.itl.count), (2.0, 4.0));
        assert_eq!(s.ttft.count, 3.0);
    }

    /// Recorded `/metrics` excerpts, one per engine (trimmed to the families read here).
    const VLLM: &str = "\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine=\"0\",model_name=\"Qwen/Qwen3-0.6B\"} 7.0
vllm:num_requests_running{engine=\"1\",model_name=\"Qwen/Qwen3-0.6B\"} 5.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine=\"0\",model_name=\"Qwen/Qwen3-0.6B\"} 2.0
vllm:num_requests_waiting{engine=\"1\",model_name=\"Qwen/Qwen3-0.6B\"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"Qwen/Qwen3-0.6B\"} 0.5
vllm:kv_cache_usage_perc{engine=\"1\",model_name=\"Qwen/Qwen3-0.6B\"} 0.25
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine=\"0\",model_name=\"Qwen/Qwen3-0.6B\"} 0.9
";

    const VLLM_OLD: &str = "\
vllm:num_requests_running{model_name=\"m\"} 3.0
vllm:num_requests_waiting{model_name=\"m\"} 1.0
vllm:num_requests_swapped{model_name=\"m\"} 0.0
vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.125
";

    const SGLANG: &str = "\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 12.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 4.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 0.28
# HELP sglang:cache_hit_rate The prefix cache hit rate.
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 0.0075
";

    const LLAMACPP: &str = "\
# HELP llamacpp:kv_cache_usage_ratio KV-cache usage. 1 means 100 percent usage.
# TYPE llamacpp:kv_cache_usage_ratio gauge
llamacpp:kv_cache_usage_ratio 0.0625
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 4
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 46
";

    fn gauges(text: &str) -> (Option<f64>, Option<f64>, Option<f64>) {
        let g = parse(text).gauges;
        (g.running(), g.waiting(), g.kv_cache_usage())
    }

    #[test]
    fn each_engines_names_are_read() {
        // Two data-parallel engines: counts add up, the usage is their mean; the current
        // KV-cache name wins over the older one.
        assert_eq!(gauges(VLLM), (Some(12.0), Some(2.0), Some(0.375)));
        assert_eq!(gauges(VLLM_OLD), (Some(3.0), Some(1.0), Some(0.125)));
        assert_eq!(gauges(SGLANG), (Some(12.0), Some(4.0), Some(0.28)));
        assert_eq!(gauges(LLAMACPP), (Some(4.0), Some(46.0), Some(0.0625)));
        // A server without them (a router that only forwards): nothing, not zeros.
        assert_eq!(
            gauges("dynamo_frontend_requests_total 5\n"),
            (None, None, None)
        );
    }
}
