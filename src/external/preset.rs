//! Presets: where the benchmark tools we know print or write each of our metrics. Formats
//! are the tools' own (facts, not code):
//! - `vllm-throughput`: vLLM's offline `benchmarks/benchmark_throughput.py` and
//!   `vllm bench throughput` print `Throughput: {:.2f} requests/s, {:.2f} total tokens/s,
//!   {:.2f} output tokens/s`; `--output-json` writes `elapsed_time`, `num_requests`,
//!   `total_num_tokens`, `requests_per_second`, `tokens_per_second`.
//! - `trtllm-bench`: the `PERFORMANCE OVERVIEW` block of `trtllm-bench ... throughput`
//!   (`Request Throughput (req/sec):`, `Total Output Throughput (tokens/sec):`, ...).
//! - `vllm-bench-serve`: `vllm bench serve --save-result` JSON (the field names our own
//!   summaries use), or its printed result block.

use serde::{Deserialize, Serialize};

use super::{JsonPath, MetricRule, Source};

/// A number as tools print it: `12.5`, `1e3`, `-0.25`.
const NUM: &str = r"([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)";

/// A benchmark tool whose output format is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Preset {
    VllmThroughput,
    TrtllmBench,
    VllmBenchServe,
}

impl Preset {
    /// Every preset, for messages.
    pub const ALL: &[Preset] = &[
        Preset::VllmThroughput,
        Preset::TrtllmBench,
        Preset::VllmBenchServe,
    ];

    /// The name written in task files.
    pub fn name(self) -> &'static str {
        match self {
            Preset::VllmThroughput => "vllm-throughput",
            Preset::TrtllmBench => "trtllm-bench",
            Preset::VllmBenchServe => "vllm-bench-serve",
        }
    }

    pub fn from_name(name: &str) -> Option<Preset> {
        Preset::ALL.iter().copied().find(|p| p.name() == name)
    }

    /// The preset's metric rules.
    pub fn rules(self) -> Vec<MetricRule> {
        match self {
            Preset::VllmThroughput => vec![
                rule(
                    "request_throughput",
                    true,
                    &[
                        json("requests_per_second"),
                        regex(&format!(r"Throughput:\s*{NUM} requests/s")),
                    ],
                ),
                rule(
                    "total_token_throughput",
                    true,
                    &[
                        json("tokens_per_second"),
                        regex(&format!(r"{NUM} total tokens/s")),
                    ],
                ),
                rule(
                    "output_throughput",
                    true,
                    &[regex(&format!(r"{NUM} output tokens/s"))],
                ),
                rule("duration", false, &[json("elapsed_time")]),
                rule("completed", false, &[json("num_requests")]),
            ],
            Preset::TrtllmBench => vec![
                line(
                    "request_throughput",
                    true,
                    r"Request Throughput \(req/sec\):",
                ),
                line(
                    "output_throughput",
                    true,
                    r"Total Output Throughput \(tokens/sec\):",
                ),
                line(
                    "total_token_throughput",
                    false,
                    r"Total Token Throughput \(tokens/sec\):",
                ),
                line("completed", false, r"Number of requests:"),
                line("mean_e2el_ms", false, r"Average request latency \(ms\):"),
                line("median_e2el_ms", false, r"\[Latency\] P50\s*:"),
                line("p99_e2el_ms", false, r"\[Latency\] P99\s*:"),
                line(
                    "mean_ttft_ms",
                    false,
                    r"Average time-to-first-token \[TTFT\] \(ms\):",
                ),
                line(
                    "mean_tpot_ms",
                    false,
                    r"Average time-per-output-token \[TPOT\] \(ms\):",
                ),
            ],
            Preset::VllmBenchServe => {
                // (our field, its printed label) of vllm bench serve's result block.
                let fields: &[(&str, &str)] = &[
                    ("completed", "Successful requests:"),
                    ("failed", "Failed requests:"),
                    ("duration", r"Benchmark duration \(s\):"),
                    ("total_input_tokens", "Total input tokens:"),
                    ("total_output_tokens", "Total generated tokens:"),
                    ("request_throughput", r"Request throughput \(req/s\):"),
                    ("output_throughput", r"Output token throughput \(tok/s\):"),
                    (
                        "total_token_throughput",
                        r"Total Token throughput \(tok/s\):",
                    ),
                    ("mean_ttft_ms", r"Mean TTFT \(ms\):"),
                    ("median_ttft_ms", r"Median TTFT \(ms\):"),
                    ("p99_ttft_ms", r"P99 TTFT \(ms\):"),
                    ("mean_tpot_ms", r"Mean TPOT \(ms\):"),
                    ("median_tpot_ms", r"Median TPOT \(ms\):"),
                    ("p99_tpot_ms", r"P99 TPOT \(ms\):"),
                    ("mean_itl_ms", r"Mean ITL \(ms\):"),
                    ("median_itl_ms", r"Median ITL \(ms\):"),
                    ("p99_itl_ms", r"P99 ITL \(ms\):"),
                    ("mean_e2el_ms", r"Mean E2EL \(ms\):"),
                    ("median_e2el_ms", r"Median E2EL \(ms\):"),
                    ("p99_e2el_ms", r"P99 E2EL \(ms\):"),
                ];
                fields
                    .iter()
                    .map(|(field, label)| {
                        let required = matches!(*field, "request_throughput" | "output_throughput");
                        rule(
                            field,
                            required,
                            &[json(field), regex(&format!(r"{label}\s*{NUM}"))],
                        )
                    })
                    .collect()
            }
        }
    }
}

fn rule(metric: &str, required: bool, sources: &[Source]) -> MetricRule {
    MetricRule {
        metric: metric.to_string(),
        sources: sources.to_vec(),
        required,
    }
}

/// A `Label: value` line.
fn line(metric: &str, required: bool, label: &str) -> MetricRule {
    rule(metric, required, &[regex(&format!(r"{label}\s*{NUM}"))])
}

fn json(path: &str) -> Source {
    Source::Json(JsonPath::parse(path).expect("preset JSON paths are valid"))
}

fn regex(pattern: &str) -> Source {
    Source::Regex(regex::Regex::new(pattern).expect("preset regexes are valid"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::external::{ParseOutcome, extract};

    fn values(outcome: &ParseOutcome) -> Vec<(String, f64)> {
        outcome
            .values
            .iter()
            .map(|(k, v)| (k.clone(), v.value))
            .collect()
    }

    #[test]
    fn vllm_throughput_reads_the_printed_line_and_the_output_json() {
        let stdout = "INFO 01-01 warming up\nThroughput: 12.50 requests/s, 50000.00 total tokens/s, 10000.00 output tokens/s\nTotal num prompt tokens:  3200\n";
        let json = r#"{"elapsed_time": 8.0, "num_requests": 100, "total_num_tokens": 400000, "requests_per_second": 12.5001, "tokens_per_second": 50000.5}"#;
        let rules = Preset::VllmThroughput.rules();
        let out = extract(&rules, stdout, "", Some(json)).unwrap();
        assert_eq!(
            values(&out),
            vec![
                ("completed".to_string(), 100.0),
                ("duration".to_string(), 8.0),
                ("output_throughput".to_string(), 10000.0),
                ("request_throughput".to_string(), 12.5001),
                ("total_token_throughput".to_string(), 50000.5),
            ]
        );
        // Without the JSON the printed line is enough.
        let out = extract(&rules, stdout, "", None).unwrap();
        assert_eq!(out.values["request_throughput"].value, 12.5);
        assert!(out.missing.is_empty(), "{:?}", out.missing);
    }

    #[test]
    fn trtllm_bench_reads_the_performance_overview() {
        let stdout = "===========================================================
= PERFORMANCE OVERVIEW
===========================================================
Request Throughput (req/sec):                     1.4439
Total Output Throughput (tokens/sec):             185.8351
Total Token Throughput (tokens/sec):              780.1607
Total Latency (ms):                               6925.4963
Average request latency (ms):                     3671.8441
[Latency] P50    : 3936.3022
[Latency] P99    : 5514.4701
Average time-to-first-token [TTFT] (ms):          425.9885
Average time-per-output-token [TPOT] (ms):        3.2344
";
        let out = extract(&Preset::TrtllmBench.rules(), stdout, "", None).unwrap();
        let v = |k: &str| out.values[k].value;
        assert_eq!(v("request_throughput"), 1.4439);
        assert_eq!(v("output_throughput"), 185.8351);
        assert_eq!(v("total_token_throughput"), 780.1607);
        assert_eq!(v("mean_e2el_ms"), 3671.8441);
        assert_eq!(v("median_e2el_ms"), 3936.3022);
        assert_eq!(v("p99_e2el_ms"), 5514.4701);
        assert_eq!(v("mean_ttft_ms"), 425.9885);
        assert_eq!(v("mean_tpot_ms"), 3.2344);
        assert!(!out.values.contains_key("completed"));
    }

    #[test]
    fn vllm_bench_serve_reads_the_result_block() {
        let stdout = "============ Serving Benchmark Result ============
Successful requests:                     32
Benchmark duration (s):                  150.87
Total input tokens:                      65536
Total generated tokens:                  65536
Request throughput (req/s):              0.21
Output token throughput (tok/s):         434.40
Total Token throughput (tok/s):          868.80
---------------Time to First Token----------------
Mean TTFT (ms):                          7279.56
Median TTFT (ms):                        7099.88
P99 TTFT (ms):                           10999.46
";
        let out = extract(&Preset::VllmBenchServe.rules(), stdout, "", None).unwrap();
        let v = |k: &str| out.values[k].value;
        assert_eq!(v("completed"), 32.0);
        assert_eq!(v("duration"), 150.87);
        assert_eq!(v("output_throughput"), 434.40);
        assert_eq!(v("p99_ttft_ms"), 10999.46);
        assert!(out.missing.is_empty());
    }

    #[test]
    fn names_round_trip() {
        for p in Preset::ALL {
            assert_eq!(Preset::from_name(p.name()), Some(*p));
        }
        assert_eq!(Preset::from_name("nope"), None);
    }
}
