//! The result JSON of one benchmark: vllm bench serve's header and field names (a superset, so
//! dashboards that read vLLM's files read ours), our extra fields, and the per-request lists
//! vLLM writes (`latencies`, `queue_times` always; `input_lens`, `output_lens`, `ttfts`,
//! `itls`, `generated_texts`, `start_times`, `errors` with `--save-detailed`; seconds) and
//! `rps_change_events` for ramp-up runs.

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::samples::request_times;
use super::summary::Summary;
use crate::client::{RequestRecord, RpsChange};

/// The header fields vLLM writes before the figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResultHeader {
    /// `%Y%m%d-%H%M%S`.
    pub date: String,
    pub endpoint_type: String,
    pub backend: String,
    pub label: Option<String>,
    pub model_id: String,
    pub tokenizer_id: Option<String>,
    pub num_prompts: u64,
    /// A number, or the string `"inf"`.
    pub request_rate: Value,
    pub burstiness: f64,
    pub max_concurrency: Option<u32>,
    /// `(strategy, start, end)` when ramping.
    #[serde(skip)]
    pub ramp_up: Option<(String, f64, f64)>,
    /// `--metadata KEY=VALUE` pairs, written as top-level keys.
    #[serde(skip)]
    pub metadata: Vec<(String, String)>,
}

/// Header + summary (+ per-request lists) as one JSON object in vLLM's key order.
pub fn result_json(
    header: &ResultHeader,
    summary: &Summary,
    records: &[RequestRecord],
    detailed: bool,
    extra: &[(&str, Value)],
) -> Value {
    let mut out = Map::new();
    if let Value::Object(h) = json!(header) {
        out.extend(h);
    }
    for (k, v) in &header.metadata {
        out.insert(k.clone(), json!(v));
    }
    if let Some((strategy, start, end)) = &header.ramp_up {
        out.insert("ramp_up_strategy".into(), json!(strategy));
        out.insert("ramp_up_start_rps".into(), json!(start));
        out.insert("ramp_up_end_rps".into(), json!(end));
    }
    if let Value::Object(s) = json!(summary) {
        out.extend(s);
    }
    // vLLM writes 0.0 for every backend that is not speech recognition.
    out.insert("rtfx".into(), json!(0.0));
    // vLLM: per request, seconds; failed requests have latency 0.
    let secs = |us: u64| us as f64 / 1e6;
    let mut sorted: Vec<&RequestRecord> = records.iter().collect();
    sorted.sort_by_key(|r| r.index);
    let times: Vec<_> = sorted.iter().map(|r| request_times(r)).collect();
    out.insert(
        "latencies".into(),
        json!(
            times
                .iter()
                .map(|t| t.map_or(0.0, |t| t.e2el_ms / 1e3))
                .collect::<Vec<_>>()
        ),
    );
    out.insert(
        "queue_times".into(),
        json!(
            sorted
                .iter()
                .map(|r| secs(r.sent_us.saturating_sub(r.dispatched_us)))
                .collect::<Vec<_>>()
        ),
    );
    if detailed {
        out.insert(
            "input_lens".into(),
            json!(sorted.iter().map(|r| r.input_tokens()).collect::<Vec<_>>()),
        );
        out.insert(
            "output_lens".into(),
            json!(
                sorted
                    .iter()
                    .zip(&times)
                    .map(|(r, t)| if t.is_some() { r.output_tokens() } else { 0 })
                    .collect::<Vec<_>>()
            ),
        );
        out.insert(
            "ttfts".into(),
            json!(
                times
                    .iter()
                    .map(|t| t.map_or(0.0, |t| t.ttft_ms / 1e3))
                    .collect::<Vec<_>>()
            ),
        );
        out.insert(
            "itls".into(),
            json!(
                sorted
                    .iter()
                    .map(|r| r
                        .chunks
                        .windows(2)
                        .map(|w| f64::from(w[1].t_us - w[0].t_us) / 1e6)
                        .collect::<Vec<_>>())
                    .collect::<Vec<_>>()
            ),
        );
        out.insert(
            "generated_texts".into(),
            json!(
                sorted
                    .iter()
                    .map(|r| r.generated_text.as_deref().unwrap_or(""))
                    .collect::<Vec<_>>()
            ),
        );
        out.insert(
            "start_times".into(),
            json!(sorted.iter().map(|r| secs(r.sent_us)).collect::<Vec<_>>()),
        );
        out.insert(
            "errors".into(),
            json!(
                sorted
                    .iter()
                    .map(|r| match &r.outcome {
                        o if o.is_completed() => String::new(),
                        o => serde_json::to_string(o).unwrap_or_default(),
                    })
                    .collect::<Vec<_>>()
            ),
        );
    }
    for (k, v) in extra {
        out.insert((*k).to_string(), v.clone());
    }
    Value::Object(out)
}

/// vLLM's `rps_change_events`: `[{"rps": ..., "timestamp": ISO local time}]`, the events
/// stamped from the run's wall-clock start.
pub fn rps_change_events(started_at: chrono::DateTime<chrono::Utc>, events: &[RpsChange]) -> Value {
    let start = started_at.with_timezone(&chrono::Local);
    json!(
        events
            .iter()
            .map(|e| {
                let at = start + chrono::Duration::microseconds(e.at_us as i64);
                // Whole rates as integers, as vLLM's `range()` writes them.
                let rps = if e.rps.fract() == 0.0 && e.rps.abs() < 1e15 {
                    json!(e.rps as i64)
                } else {
                    json!(e.rps)
                };
                json!({"rps": rps, "timestamp": at.format("%Y-%m-%dT%H:%M:%S%.6f").to_string()})
            })
            .collect::<Vec<_>>()
    )
}
