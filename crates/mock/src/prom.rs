//! The server's Prometheus metrics under vLLM's names and bucket bounds, updated by the
//! engine once per step (one lock per step, not per token) and rendered in the text
//! exposition format for `/metrics`. Not here: HTTP routing.

use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// vLLM's TTFT buckets (seconds).
const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// vLLM's inter-token latency / time-per-output-token buckets (seconds).
const ITL_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
/// vLLM's request latency buckets (seconds): e2e and queue time.
const REQUEST_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];

/// A cumulative-on-render histogram.
#[derive(Debug)]
pub(crate) struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    /// Record one value (seconds).
    pub(crate) fn observe(&mut self, v: f64) {
        let i = self.bounds.partition_point(|&b| b < v);
        if let Some(c) = self.counts.get_mut(i) {
            *c += 1;
        }
        self.sum += v;
        self.count += 1;
    }

    /// Number of observations.
    #[cfg(test)]
    pub(crate) fn count(&self) -> u64 {
        self.count
    }
}

/// The latency histograms, behind one lock.
#[derive(Debug)]
pub(crate) struct Histograms {
    pub ttft: Histogram,
    pub itl: Histogram,
    pub e2e: Histogram,
    pub queue: Histogram,
}

/// Everything `/metrics` shows.
#[derive(Debug)]
pub(crate) struct Metrics {
    pub running: AtomicU64,
    pub waiting: AtomicU64,
    /// KV-cache usage in millionths. The mock keeps no KV blocks: the engine sets it to the
    /// share of its batch slots (`max_batch`) in use, which moves with load as vLLM's does.
    pub kv_usage_ppm: AtomicU64,
    pub prompt_tokens: AtomicU64,
    pub generation_tokens: AtomicU64,
    pub success_stop: AtomicU64,
    pub success_length: AtomicU64,
    /// Shown only when the server keeps a prefix cache.
    pub prefix_cache: bool,
    /// Prompt tokens looked up in the prefix cache (vLLM's `prefix_cache_queries`).
    pub prefix_cache_queries: AtomicU64,
    /// Prompt tokens found there (vLLM's `prefix_cache_hits`).
    pub prefix_cache_hits: AtomicU64,
    pub hist: Mutex<Histograms>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            running: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
            kv_usage_ppm: AtomicU64::new(0),
            prompt_tokens: AtomicU64::new(0),
            generation_tokens: AtomicU64::new(0),
            success_stop: AtomicU64::new(0),
            success_length: AtomicU64::new(0),
            prefix_cache: false,
            prefix_cache_queries: AtomicU64::new(0),
            prefix_cache_hits: AtomicU64::new(0),
            hist: Mutex::new(Histograms {
                ttft: Histogram::new(TTFT_BUCKETS),
                itl: Histogram::new(ITL_BUCKETS),
                e2e: Histogram::new(REQUEST_BUCKETS),
                queue: Histogram::new(REQUEST_BUCKETS),
            }),
        }
    }
}

impl Metrics {
    /// The histograms, locked (poisoning is ignored: they hold plain numbers).
    pub(crate) fn histograms(&self) -> std::sync::MutexGuard<'_, Histograms> {
        self.hist.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Prometheus text exposition (version 0.0.4) with a `model_name` label.
    pub(crate) fn render(&self, model_json: &str) -> String {
        let labels = format!("model_name={model_json}");
        let mut out = String::with_capacity(8192);
        let get = |a: &AtomicU64| a.load(Ordering::Acquire);
        gauge(
            &mut out,
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            &labels,
            get(&self.running),
        );
        gauge(
            &mut out,
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            &labels,
            get(&self.waiting),
        );
        let _ = write!(
            out,
            "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n\
             # TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{{{labels}}} {}\n",
            get(&self.kv_usage_ppm) as f64 / 1e6
        );
        counter(
            &mut out,
            "vllm:prompt_tokens_total",
            "Number of prefill tokens processed.",
            &[(labels.clone(), get(&self.prompt_tokens))],
        );
        counter(
            &mut out,
            "vllm:generation_tokens_total",
            "Number of generation tokens processed.",
            &[(labels.clone(), get(&self.generation_tokens))],
        );
        counter(
            &mut out,
            "vllm:request_success_total",
            "Count of successfully processed requests.",
            &[
                (
                    format!("finished_reason=\"stop\",{labels}"),
                    get(&self.success_stop),
                ),
                (
                    format!("finished_reason=\"length\",{labels}"),
                    get(&self.success_length),
                ),
            ],
        );
        if self.prefix_cache {
            counter(
                &mut out,
                "vllm:prefix_cache_queries_total",
                "Prefix cache queries, in terms of number of queried tokens.",
                &[(labels.clone(), get(&self.prefix_cache_queries))],
            );
            counter(
                &mut out,
                "vllm:prefix_cache_hits_total",
                "Prefix cache hits, in terms of number of cached tokens.",
                &[(labels.clone(), get(&self.prefix_cache_hits))],
            );
        }
        let h = self.histograms();
        histogram(
            &mut out,
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            &labels,
            &h.ttft,
        );
        histogram(
            &mut out,
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            &labels,
            &h.itl,
        );
        histogram(
            &mut out,
            "vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds (older name of the inter-token latency).",
            &labels,
            &h.itl,
        );
        histogram(
            &mut out,
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            &labels,
            &h.e2e,
        );
        histogram(
            &mut out,
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            &labels,
            &h.queue,
        );
        out
    }
}

fn gauge(out: &mut String, name: &str, help: &str, labels: &str, v: u64) {
    let _ = write!(
        out,
        "# HELP {name} {help}\n# TYPE {name} gauge\n{name}{{{labels}}} {v}\n"
    );
}

fn counter(out: &mut String, name: &str, help: &str, series: &[(String, u64)]) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
    for (labels, v) in series {
        let _ = writeln!(out, "{name}{{{labels}}} {v}");
    }
}

fn histogram(out: &mut String, name: &str, help: &str, labels: &str, h: &Histogram) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
    let mut cumulative = 0;
    for (bound, count) in h.bounds.iter().zip(&h.counts) {
        cumulative += count;
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels},le=\"{bound:?}\"}} {cumulative}"
        );
    }
    let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", h.count);
    let _ = writeln!(out, "{name}_sum{{{labels}}} {}", h.sum);
    let _ = writeln!(out, "{name}_count{{{labels}}} {}", h.count);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_vllm_names_and_cumulative_buckets() {
        let m = Metrics::default();
        m.prompt_tokens.store(12, Ordering::Relaxed);
        m.success_length.store(2, Ordering::Relaxed);
        {
            let mut h = m.histograms();
            h.ttft.observe(0.03);
            h.ttft.observe(0.2);
            h.ttft.observe(5000.0);
        }
        let text = m.render("\"m\"");
        assert!(text.contains("vllm:prompt_tokens_total{model_name=\"m\"} 12\n"));
        assert!(text.contains("# TYPE vllm:kv_cache_usage_perc gauge\n"));
        m.kv_usage_ppm.store(250_000, Ordering::Relaxed);
        assert!(
            m.render("\"m\"")
                .contains("vllm:kv_cache_usage_perc{model_name=\"m\"} 0.25\n")
        );
        assert!(text.contains(
            "vllm:request_success_total{finished_reason=\"length\",model_name=\"m\"} 2\n"
        ));
        assert!(text.contains("# TYPE vllm:time_to_first_token_seconds histogram\n"));
        assert!(
            text.contains(
                "vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"0.04\"} 1\n"
            )
        );
        assert!(
            text.contains(
                "vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"0.25\"} 2\n"
            )
        );
        assert!(text.contains(
            "vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"2560.0\"} 2\n"
        ));
        assert!(
            text.contains(
                "vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"+Inf\"} 3\n"
            )
        );
        assert!(text.contains("vllm:time_to_first_token_seconds_count{model_name=\"m\"} 3\n"));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let value = line.rsplit(' ').next().unwrap();
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }

    #[test]
    fn prefix_cache_counters_only_with_a_cache() {
        let mut m = Metrics::default();
        assert!(!m.render("\"m\"").contains("prefix_cache"));
        m.prefix_cache = true;
        m.prefix_cache_queries.store(40, Ordering::Relaxed);
        m.prefix_cache_hits.store(32, Ordering::Relaxed);
        let text = m.render("\"m\"");
        assert!(text.contains("# TYPE vllm:prefix_cache_queries_total counter\n"));
        assert!(text.contains("vllm:prefix_cache_queries_total{model_name=\"m\"} 40\n"));
        assert!(text.contains("vllm:prefix_cache_hits_total{model_name=\"m\"} 32\n"));
    }
}
