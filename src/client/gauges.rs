//! The servers' gauges over time: what each scrape of a server's Prometheus `/metrics` says
//! about its running and waiting requests and its KV-cache usage, under each engine's names,
//! and the series of them (with the prefix-cache hit rate between consecutive scrapes) that a
//! point archives beside the client's series (docs/metrics.md, "Time series"):
//!
//! | gauge    | vLLM                                                    | SGLang                 | llama.cpp                       |
//! |----------|---------------------------------------------------------|------------------------|---------------------------------|
//! | running  | `vllm:num_requests_running`                             | `sglang:num_running_reqs` | `llamacpp:requests_processing` |
//! | waiting  | `vllm:num_requests_waiting`                             | `sglang:num_queue_reqs`   | `llamacpp:requests_deferred`   |
//! | KV cache | `vllm:kv_cache_usage_perc` (else `gpu_cache_usage_perc`) | `sglang:token_usage`   | `llamacpp:kv_cache_usage_ratio` |
//!
//! Counts are summed over label sets (data-parallel engines report one set each); the KV-cache
//! usage, a fraction 0..1 in every engine, is averaged over them.

use serde::{Deserialize, Serialize};

use super::server_metrics::{Snapshot, prefix_hit_rate};

/// A sum and how many label sets made it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Summed {
    sum: f64,
    n: u32,
}

impl Summed {
    fn add(&mut self, v: f64) {
        if v.is_finite() {
            self.sum += v;
            self.n += 1;
        }
    }

    fn total(self) -> Option<f64> {
        (self.n > 0).then_some(self.sum)
    }

    fn mean(self) -> Option<f64> {
        (self.n > 0).then(|| self.sum / f64::from(self.n))
    }
}

/// The gauges of one scrape.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Gauges {
    running: Summed,
    waiting: Summed,
    /// vLLM's current name (and the other engines' fractions).
    kv_usage: Summed,
    /// vLLM's older `gpu_cache_usage_perc`, read when the current name is absent.
    kv_usage_old: Summed,
}

impl Gauges {
    /// Take the sample `name value` when it is one of the gauges; false when it is not.
    pub(crate) fn take(&mut self, name: &str, v: f64) -> bool {
        let slot = match name {
            "vllm:num_requests_running"
            | "sglang:num_running_reqs"
            | "llamacpp:requests_processing" => &mut self.running,
            "vllm:num_requests_waiting"
            | "sglang:num_queue_reqs"
            | "llamacpp:requests_deferred" => &mut self.waiting,
            "vllm:kv_cache_usage_perc" | "sglang:token_usage" | "llamacpp:kv_cache_usage_ratio" => {
                &mut self.kv_usage
            }
            "vllm:gpu_cache_usage_perc" => &mut self.kv_usage_old,
            _ => return false,
        };
        slot.add(v);
        true
    }

    pub(crate) fn running(&self) -> Option<f64> {
        self.running.total()
    }

    pub(crate) fn waiting(&self) -> Option<f64> {
        self.waiting.total()
    }

    /// KV-cache usage, 0..1.
    pub(crate) fn kv_cache_usage(&self) -> Option<f64> {
        self.kv_usage.mean().or(self.kv_usage_old.mean())
    }
}

/// One scrape of one server, on the run's clock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerSample {
    /// When the scrape answered, seconds since the run start.
    pub t_s: f64,
    /// Requests in the server's running batch; `None` when it exports no such gauge.
    pub running: Option<f64>,
    /// Requests queued for the batch.
    pub waiting: Option<f64>,
    /// KV-cache usage, 0..1.
    pub kv_cache_usage: Option<f64>,
    /// The prefix cache's hit rate since the previous scrape (`None`: no lookups, or no
    /// prefix-cache figures).
    pub prefix_cache_hit_rate: Option<f64>,
}

/// The scrapes of one server over a point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerSeries {
    /// `entry` (the URL the client loads: the router, or the only instance), else the
    /// instance's key (`<role>-<index>`).
    pub source: String,
    /// The server's base URL.
    pub url: String,
    pub samples: Vec<ServerSample>,
}

/// The samples of one server's snapshots (in scrape order, stamped in µs since the run start).
pub(crate) fn samples(snaps: &[(u64, Snapshot)]) -> Vec<ServerSample> {
    snaps
        .iter()
        .enumerate()
        .map(|(i, (at, s))| {
            let prev = i.checked_sub(1).map(|p| &snaps[p].1);
            ServerSample {
                t_s: *at as f64 / 1e6,
                running: s.gauges.running(),
                waiting: s.gauges.waiting(),
                kv_cache_usage: s.gauges.kv_cache_usage(),
                prefix_cache_hit_rate: prev.and_then(|p| prefix_hit_rate(p, s, &[s])),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::server_metrics::parse;
    use super::*;

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

    #[test]
    fn samples_carry_the_gauges_and_the_hit_rate_between_scrapes() {
        let vllm = |running: u32, q: u32, h: u32| {
            parse(&format!(
                "vllm:num_requests_running {running}\nvllm:prefix_cache_queries_total {q}\nvllm:prefix_cache_hits_total {h}\n"
            ))
        };
        let snaps = [
            (0, vllm(0, 0, 0)),
            (1_000_000, vllm(4, 100, 25)),
            (2_500_000, vllm(6, 300, 175)),
            (3_000_000, vllm(0, 300, 175)),
        ];
        let s = samples(&snaps);
        let t: Vec<f64> = s.iter().map(|x| x.t_s).collect();
        assert_eq!(t, [0.0, 1.0, 2.5, 3.0]);
        let running: Vec<Option<f64>> = s.iter().map(|x| x.running).collect();
        assert_eq!(running, [Some(0.0), Some(4.0), Some(6.0), Some(0.0)]);
        let hits: Vec<Option<f64>> = s.iter().map(|x| x.prefix_cache_hit_rate).collect();
        assert_eq!(hits, [None, Some(0.25), Some(0.75), None]);
        assert_eq!(s[1].waiting, None);
        // SGLang's hit-rate gauge stands for itself.
        let g = samples(&[(0, parse(SGLANG)), (1_000_000, parse(SGLANG))]);
        assert_eq!(g[1].prefix_cache_hit_rate, Some(0.0075));
    }
}
