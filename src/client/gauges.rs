//! The servers' gauges over time: what each scrape of a server's Prometheus `/metrics` says
//! about its running and waiting requests and its KV-cache usage, under each engine's names,
//! and the series types of them (with the prefix-cache hit rate between consecutive scrapes)
//! that a point archives beside the client's series (docs/metrics.md, "Time series"):
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
