//! The archive read back typed: a point's summary.json as [`PointSummary`], its planned load
//! as `plan::LoadPlan` (strict) or [`PlannedLoad`] (what readers use, also for an imported
//! run's partial load) and its validity as [`Validity`], so that a renamed field breaks the
//! build (or the round-trip test) instead of silently turning a gate into `not_measured`.
//! Also the few plain-text helpers every reader shares (`value_text`, `axes_label`,
//! `planned_lengths`). Folding repetitions into rows is `fold`'s; judging is validity's.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use super::planned::PlannedLoad;
use super::{ArchiveError, PointRecord, Validity};
use crate::dataset::DatasetSpec;
use crate::metrics::Summary;
use crate::plan::LoadPlan;

/// What `points/<point>/summary.json` holds, as every reader sees it and as the archive writes
/// it. Orchestrate's own client writes a `metrics::Summary` (vllm bench serve's field names)
/// with the result header and a few extras; an external tool's or an imported summary may lack
/// any of these, so each named figure is optional. Every other field (the latency figures, the
/// header, vLLM's pass-through keys...) is kept by name in `other`, and the file's key order is
/// kept, so a summary read and written again is the same JSON.
///
/// Reading is strict: a named figure that is not a number (or null), or `errors` that is not a
/// list of `[reason, count]` pairs, is an error naming the field ([`PointSummary::from_object`]);
/// [`PointSummary::from_json`] is the lenient reading for other tools' files.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PointSummary {
    pub completed: Option<f64>,
    pub failed: Option<f64>,
    pub total_input_tokens: Option<f64>,
    pub total_output_tokens: Option<f64>,
    /// The embedded client's own peak of requests in flight (runner/measure.rs).
    pub max_concurrency_reached: Option<f64>,
    /// The peak computed from request timings (`metrics::Summary`, vllm's name).
    pub max_concurrent_requests: Option<f64>,
    /// Other tools' names for a peak of requests in flight.
    pub peak_concurrency: Option<f64>,
    pub max_in_flight: Option<f64>,
    /// The concurrency cap asked for (the result header's `max_concurrency`).
    pub max_concurrency: Option<f64>,
    /// GPU telemetry (`run --telemetry`, see `runner::telemetry`): the GPUs sampled, their
    /// energy over the measured window (J), per output token and per completed request.
    pub gpu_count: Option<f64>,
    pub gpu_energy_j: Option<f64>,
    pub joules_per_token: Option<f64>,
    pub joules_per_request: Option<f64>,
    /// Per GPU: mean (energy over the window) and peak power (W), mean utilization (%) and
    /// memory used (MiB).
    pub gpu_mean_power_w: Option<f64>,
    pub gpu_peak_power_w: Option<f64>,
    pub gpu_mean_util_pct: Option<f64>,
    pub gpu_mean_mem_used_mib: Option<f64>,
    /// The price of the GPUs held over the window (`price_per_gpu_hour`).
    pub cost_per_million_output_tokens: Option<f64>,
    pub output_tokens_per_dollar: Option<f64>,
    /// Σ prompt tokens served from the prefix cache, per the requests' `cached_tokens`.
    pub cached_prompt_tokens: Option<f64>,
    /// The prefix cache's hit rates: client-side, the server's own, the workload's ideal,
    /// and achieved over ideal (docs/metrics.md, "Prefix cache").
    pub prefix_cache_hit_rate: Option<f64>,
    pub server_prefix_cache_hit_rate: Option<f64>,
    pub ideal_prefix_cache_hit_rate: Option<f64>,
    pub prefix_cache_hit_vs_ideal: Option<f64>,
    /// Σ reasoning tokens the server reported.
    pub total_reasoning_tokens: Option<f64>,
    /// Delivered load (docs/metrics.md): p99 of sent minus scheduled (open loop only), the
    /// mean in flight while issuing, that over the concurrency cap, and the client's p99
    /// event-loop lag.
    pub p99_dispatch_lag_ms: Option<f64>,
    pub mean_in_flight: Option<f64>,
    pub delivered_concurrency_ratio: Option<f64>,
    pub p99_event_loop_lag_ms: Option<f64>,
    /// Failure reasons with counts, most frequent first.
    pub errors: Vec<(String, u64)>,
    /// Every other field, by name, in file order.
    pub other: Map<String, Value>,
    /// The keys as the file had them, in order (named figures included), so that writing
    /// puts every key back where it was; keys set only in code go after them.
    order: Vec<String>,
}

/// The named figures of a summary, by their JSON names: one table instead of one serde
/// attribute per field. A figure reads from a JSON number or null (`None`) and is written
/// back as a whole number when it is one (the counts vLLM writes as integers).
macro_rules! figures {
    ($self:ident) => {
        [
            ("completed", &mut $self.completed),
            ("failed", &mut $self.failed),
            ("total_input_tokens", &mut $self.total_input_tokens),
            ("total_output_tokens", &mut $self.total_output_tokens),
            (
                "max_concurrency_reached",
                &mut $self.max_concurrency_reached,
            ),
            (
                "max_concurrent_requests",
                &mut $self.max_concurrent_requests,
            ),
            ("peak_concurrency", &mut $self.peak_concurrency),
            ("max_in_flight", &mut $self.max_in_flight),
            ("max_concurrency", &mut $self.max_concurrency),
            ("gpu_count", &mut $self.gpu_count),
            ("gpu_energy_j", &mut $self.gpu_energy_j),
            ("joules_per_token", &mut $self.joules_per_token),
            ("joules_per_request", &mut $self.joules_per_request),
            ("gpu_mean_power_w", &mut $self.gpu_mean_power_w),
            ("gpu_peak_power_w", &mut $self.gpu_peak_power_w),
            ("gpu_mean_util_pct", &mut $self.gpu_mean_util_pct),
            ("gpu_mean_mem_used_mib", &mut $self.gpu_mean_mem_used_mib),
            (
                "cost_per_million_output_tokens",
                &mut $self.cost_per_million_output_tokens,
            ),
            (
                "output_tokens_per_dollar",
                &mut $self.output_tokens_per_dollar,
            ),
            ("cached_prompt_tokens", &mut $self.cached_prompt_tokens),
            ("prefix_cache_hit_rate", &mut $self.prefix_cache_hit_rate),
            (
                "server_prefix_cache_hit_rate",
                &mut $self.server_prefix_cache_hit_rate,
            ),
            (
                "ideal_prefix_cache_hit_rate",
                &mut $self.ideal_prefix_cache_hit_rate,
            ),
            (
                "prefix_cache_hit_vs_ideal",
                &mut $self.prefix_cache_hit_vs_ideal,
            ),
            ("total_reasoning_tokens", &mut $self.total_reasoning_tokens),
            ("p99_dispatch_lag_ms", &mut $self.p99_dispatch_lag_ms),
            ("mean_in_flight", &mut $self.mean_in_flight),
            (
                "delivered_concurrency_ratio",
                &mut $self.delivered_concurrency_ratio,
            ),
            ("p99_event_loop_lag_ms", &mut $self.p99_event_loop_lag_ms),
        ]
    };
}

/// A figure as JSON: whole numbers as integers (as vLLM writes its counts), others as floats.
fn figure_value(x: f64) -> Value {
    if x.fract() == 0.0 && x.abs() < 9.0e15 {
        if x >= 0.0 {
            Value::from(x as u64)
        } else {
            Value::from(x as i64)
        }
    } else {
        serde_json::json!(x)
    }
}

/// What is wrong with one field of a summary (its name and why).
fn field_error(name: &str, value: &Value, expected: &str) -> String {
    let mut shown = value.to_string();
    if shown.len() > 60 {
        let cut = (0..=60)
            .rev()
            .find(|i| shown.is_char_boundary(*i))
            .unwrap_or(0);
        shown.truncate(cut);
        shown.push_str("...");
    }
    format!("field `{name}` is {shown}, expected {expected}")
}

impl PointSummary {
    /// Read a summary object strictly: a named figure that is not a number or null, or
    /// `errors` not a list of `[reason, count]` pairs, is an error naming the field.
    pub fn from_object(object: Map<String, Value>) -> Result<Self, String> {
        let mut out = Self {
            order: object.keys().cloned().collect(),
            ..Self::default()
        };
        let mut other = object;
        for (name, slot) in figures!(out) {
            match other.remove(name) {
                None | Some(Value::Null) => {}
                Some(Value::Number(n)) => *slot = n.as_f64(),
                Some(v) => return Err(field_error(name, &v, "a number")),
            }
        }
        match other.remove("errors") {
            None | Some(Value::Null) => {}
            Some(v) => {
                out.errors = Vec::<(String, u64)>::deserialize(&v)
                    .map_err(|_| field_error("errors", &v, "a list of [reason, count] pairs"))?;
            }
        }
        out.other = other;
        Ok(out)
    }

    /// Read another tool's summary object leniently (never fails): a named field of the
    /// wrong type reads as absent, and a value that is not an object as an empty summary.
    pub fn from_json(value: &Value) -> Self {
        let mut object = value.as_object().cloned().unwrap_or_default();
        while let Err(e) = Self::from_object(object.clone()) {
            let Some(name) = e.split('`').nth(1) else {
                break;
            };
            object.remove(name);
        }
        Self::from_object(object).unwrap_or_default()
    }

    /// The summary as its JSON object, keys in the order they were read.
    pub fn to_value(&self) -> Value {
        let mut copy = self.clone();
        let mut named: Vec<(&str, Value)> = Vec::new();
        for (name, slot) in figures!(copy) {
            if let Some(x) = *slot {
                named.push((name, figure_value(x)));
            } else if self.order.iter().any(|k| k == name) {
                named.push((name, Value::Null));
            }
        }
        if !self.errors.is_empty() || self.order.iter().any(|k| k == "errors") {
            named.push(("errors", serde_json::json!(self.errors)));
        }
        let mut out = Map::new();
        for key in &self.order {
            if let Some((_, v)) = named.iter().find(|(n, _)| n == key) {
                out.insert(key.clone(), v.clone());
            } else if let Some(v) = self.other.get(key) {
                out.insert(key.clone(), v.clone());
            }
        }
        for (name, v) in named {
            if !out.contains_key(name) {
                out.insert(name.to_string(), v);
            }
        }
        for (k, v) in &self.other {
            if !out.contains_key(k) {
                out.insert(k.clone(), v.clone());
            }
        }
        Value::Object(out)
    }

    /// The figures a `metrics::Summary` carries under the names read here. Destructured by
    /// name, so renaming one of them in `metrics::Summary` breaks this build.
    pub fn of_summary(summary: &Summary) -> Self {
        let Summary {
            completed,
            failed,
            total_input_tokens,
            total_output_tokens,
            max_concurrent_requests,
            errors,
            ..
        } = summary;
        let json = serde_json::to_value(summary).expect("summary serializes");
        Self {
            completed: Some(*completed as f64),
            failed: Some(*failed as f64),
            total_input_tokens: Some(*total_input_tokens as f64),
            total_output_tokens: Some(*total_output_tokens as f64),
            max_concurrent_requests: Some(*max_concurrent_requests as f64),
            errors: errors.clone(),
            ..Self::from_json(&json)
        }
    }

    /// A numeric field by its summary name (`p99_ttft_ms`, `completed`, ...).
    pub fn metric(&self, name: &str) -> Option<f64> {
        match name {
            "completed" => self.completed,
            "failed" => self.failed,
            "total_input_tokens" => self.total_input_tokens,
            "total_output_tokens" => self.total_output_tokens,
            "max_concurrency_reached" => self.max_concurrency_reached,
            "max_concurrent_requests" => self.max_concurrent_requests,
            "peak_concurrency" => self.peak_concurrency,
            "max_in_flight" => self.max_in_flight,
            "max_concurrency" => self.max_concurrency,
            "p99_dispatch_lag_ms" => self.p99_dispatch_lag_ms,
            "mean_in_flight" => self.mean_in_flight,
            "delivered_concurrency_ratio" => self.delivered_concurrency_ratio,
            "p99_event_loop_lag_ms" => self.p99_event_loop_lag_ms,
            other => self.telemetry_metric(other),
        }
    }

    /// A GPU telemetry figure by its summary name, else any other numeric field.
    fn telemetry_metric(&self, name: &str) -> Option<f64> {
        match name {
            "gpu_count" => self.gpu_count,
            "gpu_energy_j" => self.gpu_energy_j,
            "joules_per_token" => self.joules_per_token,
            "joules_per_request" => self.joules_per_request,
            "gpu_mean_power_w" => self.gpu_mean_power_w,
            "gpu_peak_power_w" => self.gpu_peak_power_w,
            "gpu_mean_util_pct" => self.gpu_mean_util_pct,
            "gpu_mean_mem_used_mib" => self.gpu_mean_mem_used_mib,
            "cost_per_million_output_tokens" => self.cost_per_million_output_tokens,
            "output_tokens_per_dollar" => self.output_tokens_per_dollar,
            "cached_prompt_tokens" => self.cached_prompt_tokens,
            "prefix_cache_hit_rate" => self.prefix_cache_hit_rate,
            "server_prefix_cache_hit_rate" => self.server_prefix_cache_hit_rate,
            "ideal_prefix_cache_hit_rate" => self.ideal_prefix_cache_hit_rate,
            "prefix_cache_hit_vs_ideal" => self.prefix_cache_hit_vs_ideal,
            "total_reasoning_tokens" => self.total_reasoning_tokens,
            other => self.other.get(other).and_then(Value::as_f64),
        }
    }

    /// The measured window's figure when the point trimmed a warm-up or cool-down and the
    /// trimmed block has this figure (output throughput and the latency statistics), else
    /// the whole point's. What tables, charts, compare and check show and gate on.
    pub fn window_metric(&self, name: &str) -> Option<f64> {
        self.trimmed()
            .and_then(|t| t.get(name))
            .and_then(Value::as_f64)
            .or_else(|| self.metric(name))
    }

    /// The `trimmed` block of a point that had a warm-up or cool-down.
    pub fn trimmed(&self) -> Option<&Map<String, Value>> {
        self.other.get("trimmed").and_then(Value::as_object)
    }

    /// The warm-up and cool-down the measured window left out, in seconds.
    pub fn window(&self) -> Option<TrimmedWindow> {
        let t = self.trimmed()?;
        let secs = |k: &str| t.get(k).and_then(Value::as_f64).unwrap_or(0.0);
        Some(TrimmedWindow {
            warmup_s: secs("warmup_s"),
            cooldown_s: secs("cooldown_s"),
        })
    }

    /// The client's peak of requests in flight: its own counter first, else the peak from
    /// request timings, else another tool's name for it.
    pub fn peak_in_flight(&self) -> Option<f64> {
        self.max_concurrency_reached
            .or(self.max_concurrent_requests)
            .or(self.peak_concurrency)
            .or(self.max_in_flight)
    }

    /// Mean tokens per completed request of a `total_*_tokens` figure.
    pub fn mean_per_request(&self, total: Option<f64>) -> Option<f64> {
        match (total, self.completed) {
            (Some(t), Some(d)) if d > 0.0 => Some(t / d),
            _ => None,
        }
    }
}

impl Serialize for PointSummary {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_value().serialize(s)
    }
}

impl<'de> Deserialize<'de> for PointSummary {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let object = Map::deserialize(d)?;
        Self::from_object(object).map_err(serde::de::Error::custom)
    }
}

/// The warm-up and cool-down a point's measured window left out.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TrimmedWindow {
    pub warmup_s: f64,
    pub cooldown_s: f64,
}

impl TrimmedWindow {
    /// `trimmed window (warm-up 30 s, cool-down 10 s)`.
    pub fn describe(&self) -> String {
        format!(
            "trimmed window (warm-up {} s, cool-down {} s)",
            crate::units::number(self.warmup_s),
            crate::units::number(self.cooldown_s)
        )
    }
}

/// Read a point's summary.json: `None` when it was not written; an error naming the file,
/// and the field or the line and column, when it does not read (a truncated or garbled file,
/// a figure that is not a number).
pub fn read_point_summary(
    run_dir: &Path,
    point_dir: &str,
) -> Result<Option<PointSummary>, ArchiveError> {
    let path = run_dir.join("points").join(point_dir).join("summary.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(ArchiveError::Read { path, source }),
    };
    let damaged = |message: String| ArchiveError::Damaged {
        path: path.clone(),
        message,
    };
    let value: Value = serde_json::from_str(&text).map_err(|e| damaged(e.to_string()))?;
    let Value::Object(object) = value else {
        return Err(damaged("not a JSON object".into()));
    };
    PointSummary::from_object(object).map(Some).map_err(damaged)
}

impl PointRecord {
    /// The load as planned; `None` for an imported run's point, which records only what
    /// its result file said.
    pub fn load_plan(&self) -> Option<&LoadPlan> {
        self.load.plan()
    }

    /// The load as readers use it (also an imported run's partial load).
    pub fn planned(&self) -> PlannedLoad {
        self.load.planned()
    }

    /// The validity verdict; `None` before it is judged.
    pub fn verdict(&self) -> Option<&Validity> {
        self.validity.as_ref()
    }
}

/// Input and output lengths a dataset asks for, and a note for special datasets.
pub fn planned_lengths(dataset: &DatasetSpec) -> (Option<u64>, Option<u64>, Option<String>) {
    let n = |v: u32| Some(u64::from(v));
    match dataset {
        DatasetSpec::SharedPrefix {
            system_prompt_len,
            question_len,
            output_len,
            ..
        } => (
            Some(u64::from(*system_prompt_len) + u64::from(*question_len)),
            n(*output_len),
            Some("shared prefix".into()),
        ),
        DatasetSpec::Random {
            input_len,
            output_len,
            prefix_len,
            ..
        } => {
            let note = (*prefix_len > 0).then(|| format!("prefix {prefix_len}"));
            (n(*input_len), n(*output_len), note)
        }
        DatasetSpec::Text {
            input_len,
            output_len,
            ..
        } => (n(*input_len), n(*output_len), None),
        DatasetSpec::ShareGpt {
            input_len,
            output_len,
            ..
        } => (input_len.map(u64::from), output_len.map(u64::from), None),
        DatasetSpec::Jsonl { output_len, .. } => (None, output_len.map(u64::from), None),
        DatasetSpec::Mooncake { .. } => (None, None, None),
        DatasetSpec::Weka { .. } => (None, None, None),
        DatasetSpec::Conversation(c) => (
            c.path.is_none().then_some(u64::from(c.input_len)),
            c.output_len.map(u64::from),
            Some("conversation".into()),
        ),
    }
}

/// A JSON scalar as plain text (strings without quotes).
pub fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `a=1,b=x`.
pub fn axes_label(axes: &BTreeMap<String, Value>) -> String {
    axes.iter()
        .map(|(k, v)| format!("{k}={}", value_text(v)))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::{Gate, PlannedLoad, Verdict};
    use crate::load::Rate;
    use serde_json::json;

    fn load_plan() -> LoadPlan {
        serde_json::from_value(json!({
            "endpoint": "chat",
            "dataset": {"shared_prefix": {"num_groups": 2, "prompts_per_group": 3,
                "system_prompt_len": 100, "question_len": 20, "output_len": 8}},
            "tokenizer": "tok.json", "ignore_eos": false, "seed": 7,
            "extra_body": {"top_k": 1}, "request_timeout": "30s",
            "shape": {"max_concurrency": 16, "rate": {"poisson": {"rps": 2.5}}, "ramp_up": null,
                "limit": {"duration": "1m"}, "warmup": "5s", "cooldown": "0s"}
        }))
        .unwrap()
    }

    #[test]
    fn a_load_plan_round_trips_and_reads_as_planned_load() {
        let plan = load_plan();
        let json = serde_json::to_value(&plan).unwrap();
        let back: LoadPlan = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(serde_json::to_value(&back).unwrap(), json);
        let planned = PlannedLoad::from_json(&json);
        assert_eq!(planned, PlannedLoad::from(&plan));
        assert_eq!(planned.shape.max_concurrency, Some(16));
        assert_eq!(planned.shape.rate, Some(Rate::Poisson { rps: 2.5 }));
        let again: PlannedLoad =
            serde_json::from_value(serde_json::to_value(&planned).unwrap()).unwrap();
        assert_eq!(again, planned);
        // A load the archive does not recognise reads as nothing planned, not as an error.
        assert_eq!(PlannedLoad::from_json(&json!("?")), PlannedLoad::default());
    }

    #[test]
    fn a_summary_round_trips_and_reads_under_its_own_names() {
        let summary = crate::metrics::summarize(&[], &crate::metrics::SummaryOptions::default());
        let json = serde_json::to_value(&summary).unwrap();
        let back: Summary = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(back, summary);
        let read = PointSummary::from_json(&json);
        assert_eq!(read, PointSummary::of_summary(&summary));
        assert_eq!(read.completed, Some(0.0));
        assert_eq!(read.max_concurrent_requests, Some(0.0));
        assert_eq!(read.metric("duration"), Some(summary.duration));
        let again: PointSummary =
            serde_json::from_value(serde_json::to_value(&read).unwrap()).unwrap();
        assert_eq!(again, read);
        // Every field is written back (counts as floats: the readers' one number type).
        let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
        let mut written = keys(&serde_json::to_value(&read).unwrap());
        let mut expected = keys(&json);
        written.sort();
        expected.sort();
        assert_eq!(written, expected);
    }

    #[test]
    fn foreign_summaries_read_what_they_have() {
        let s = PointSummary::from_json(&json!({
            "completed": 10, "failed": "n/a", "peak_concurrency": 4,
            "errors": ["", "HTTP 500"], "mean_ttft_ms": 12.5
        }));
        assert_eq!(s.completed, Some(10.0));
        assert_eq!(s.failed, None);
        assert_eq!(s.peak_in_flight(), Some(4.0));
        assert!(s.errors.is_empty());
        assert_eq!(s.metric("mean_ttft_ms"), Some(12.5));
        assert_eq!(s.mean_per_request(Some(50.0)), Some(5.0));
    }

    #[test]
    fn a_point_record_reads_its_verdict_typed() {
        let verdict = Validity {
            valid: false,
            gates: vec![Gate {
                name: "completed".into(),
                threshold: ">= 4".into(),
                observed: json!(3.0),
                verdict: Verdict::Fail,
            }],
        };
        let record = PointRecord {
            id: "c=1".into(),
            deployment: "d1".into(),
            repetition: 1,
            dir: "c=1".into(),
            axes: BTreeMap::new(),
            load: load_plan().into(),
            status: crate::archive::PointStatus::Completed,
            error: None,
            started_at: None,
            ended_at: None,
            validity: Some(verdict.clone()),
        };
        let json = serde_json::to_value(&record).unwrap();
        let back: PointRecord = serde_json::from_value(json).unwrap();
        assert_eq!(back, record);
        assert_eq!(back.verdict(), Some(&verdict));
        assert!(back.load_plan().is_some());
        assert_eq!(back.planned(), PlannedLoad::from(&load_plan()));
    }
}
