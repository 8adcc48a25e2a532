//! Validity gates of one measured point: did the point measure what was asked? Each gate has
//! a name, a threshold, the observed value and a verdict; a point with any failed gate is
//! invalid and reports show it as such instead of publishing its numbers. Pure: the runner
//! calls `evaluate` after each point and stores the result in the manifest's `validity`.
//!
//! Gates: `completed` (completed >= requests asked), `error_rate` (failed / issued within
//! bound), `output_tokens` (> 0), `input_len` / `output_len` (achieved mean within tolerance
//! of the planned length), `concurrency` (the client's own in-flight peak reached the cap),
//! `server_healthy` (the server still answered after the point), and the delivered-load
//! gates `dispatch_lag`, `delivered_concurrency`, `event_loop_lag` (`delivered`). A gate whose
//! input is missing is `not_measured`: shown, never counted as a pass or a failure.
//!
//! Reads the summary and the plan typed (`archive::PointSummary`, `plan::LoadPlan`); the
//! verdict's record (`Validity`, `Gate`, `Verdict`) is the archive's, re-exported here.

mod delivered;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::archive::{Gate, Validity, Verdict};
use crate::archive::{PlannedLoad, PointSummary, planned_lengths};
use crate::load::{Limit, Rate};
use crate::plan::LoadPlan;
use crate::units::number;

/// Bounds of the gates (defaults in `Default`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ValidityBounds {
    /// Largest accepted failed / (completed + failed), e.g. 0.01 (default 0).
    pub max_error_rate: f64,
    /// Largest accepted relative gap between achieved and planned mean lengths (default 0.05).
    pub length_tolerance: f64,
    /// Largest accepted relative shortfall of the in-flight peak below the cap, e.g. 0.0.
    pub concurrency_tolerance: f64,
    /// Largest accepted p99 dispatch lag (sent minus scheduled), ms (default 50).
    pub max_dispatch_lag_ms: f64,
    /// Smallest accepted mean in flight over the concurrency cap (default 0.9).
    pub min_delivered_concurrency: f64,
    /// Largest accepted p99 event-loop lag of the client, ms (default 50).
    pub max_event_loop_lag_ms: f64,
    /// Judge the summary's `over_saturation` block (`benchmark.validity.over_saturation` not
    /// `off`); default false: no such gate.
    pub over_saturation: bool,
}

impl Default for ValidityBounds {
    fn default() -> Self {
        // The same defaults as the task file's `benchmark.validity` (plan::Validity).
        Self {
            max_error_rate: 0.0,
            length_tolerance: 0.05,
            concurrency_tolerance: 0.0,
            max_dispatch_lag_ms: 50.0,
            min_delivered_concurrency: 0.9,
            max_event_loop_lag_ms: 50.0,
            over_saturation: false,
        }
    }
}

impl ValidityBounds {
    /// The task's `benchmark.validity` as bounds (`concurrency_tolerance` stays 0).
    pub fn of(v: &crate::plan::Validity) -> Self {
        Self {
            max_error_rate: v.max_error_rate,
            length_tolerance: v.length_tolerance,
            max_dispatch_lag_ms: v.max_dispatch_lag_ms,
            min_delivered_concurrency: v.min_delivered_concurrency,
            max_event_loop_lag_ms: v.max_event_loop_lag_ms,
            over_saturation: v.over_saturation != crate::load::OverSaturation::Off,
            ..Self::default()
        }
    }
}

/// What the plan asked of a point: request count, concurrency cap, lengths.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Requested {
    /// `limit: {requests: N}`; `None` for a duration-bounded point.
    pub requests: Option<u64>,
    /// `shape.max_concurrency`, only when requests are issued as fast as the cap allows
    /// (a finite rate need not reach the cap, so the gate is not measured then).
    pub concurrency: Option<u64>,
    pub input_len: Option<u64>,
    pub output_len: Option<u64>,
}

impl Requested {
    /// From the planned load as a point record holds it.
    pub fn from_load(load: &PlannedLoad) -> Self {
        let (input_len, output_len, _) = load
            .dataset
            .as_ref()
            .map_or((None, None, None), planned_lengths);
        let shape = &load.shape;
        let unlimited_rate = shape.rate == Some(Rate::Unlimited) && shape.ramp_up.is_none();
        Self {
            requests: match shape.limit {
                Some(Limit::Requests(n)) => Some(n),
                Some(Limit::Duration(_)) | None => None,
            },
            concurrency: shape
                .max_concurrency
                .map(u64::from)
                .filter(|_| unlimited_rate),
            input_len,
            output_len,
        }
    }

    /// From the plan type itself.
    pub fn from_plan(load: &LoadPlan) -> Self {
        Self::from_load(&PlannedLoad::from(load))
    }
}

/// Summary fields that may carry the client's own peak of requests in flight.
/// (`PointSummary::peak_in_flight` reads them in this order.)
pub const CONCURRENCY_FIELDS: &[&str] = &[
    // The embedded client's own in-flight counter (runner/measure.rs).
    "max_concurrency_reached",
    // The peak computed from request timings (metrics::summary, vllm's name).
    "max_concurrent_requests",
    "peak_concurrency",
    "max_in_flight",
];

/// Judge one point from what was asked, the client's summary (vllm bench serve field names)
/// and whether the server was still healthy afterwards.
pub fn evaluate(
    requested: &Requested,
    summary: &PointSummary,
    server_healthy_after: bool,
    bounds: &ValidityBounds,
) -> Validity {
    let completed = summary.completed;
    let failed = summary.failed;
    let mut gates = Vec::new();

    gates.push(match (requested.requests, completed) {
        (Some(asked), Some(done)) => gate(
            "completed",
            format!(">= {asked}"),
            done,
            done >= asked as f64,
        ),
        (None, Some(done)) => gate("completed", ">= 1".into(), done, done >= 1.0),
        (asked, None) => not_measured(
            "completed",
            asked.map_or(">= 1".into(), |a| format!(">= {a}")),
        ),
    });

    let threshold = format!("<= {}%", number(bounds.max_error_rate * 100.0));
    gates.push(match (completed, failed) {
        (Some(done), Some(failed)) if done + failed > 0.0 => {
            let rate = failed / (done + failed);
            gate(
                "error_rate",
                threshold,
                round4(rate),
                rate <= bounds.max_error_rate,
            )
        }
        _ => not_measured("error_rate", threshold),
    });

    gates.push(match summary.total_output_tokens {
        Some(tokens) => gate("output_tokens", "> 0".into(), tokens, tokens > 0.0),
        None => not_measured("output_tokens", "> 0".into()),
    });

    for (name, planned, total) in [
        ("input_len", requested.input_len, summary.total_input_tokens),
        (
            "output_len",
            requested.output_len,
            summary.total_output_tokens,
        ),
    ] {
        let tol = number(bounds.length_tolerance * 100.0);
        let achieved = summary.mean_per_request(total);
        gates.push(match (planned, achieved) {
            (Some(p), Some(a)) => {
                let ok = p > 0 && ((a - p as f64) / p as f64).abs() <= bounds.length_tolerance;
                gate(name, format!("{p} ±{tol}%"), round4(a), ok)
            }
            (Some(p), None) => not_measured(name, format!("{p} ±{tol}%")),
            (None, _) => not_measured(name, "no planned length".into()),
        });
    }

    let reached = summary.peak_in_flight();
    // The cap cannot be reached with fewer requests than the cap.
    let target = match (requested.concurrency, requested.requests) {
        (Some(c), Some(r)) => Some(c.min(r)),
        (c, _) => c,
    };
    gates.push(match (target, reached) {
        (Some(t), Some(r)) => {
            let need = t as f64 * (1.0 - bounds.concurrency_tolerance);
            gate("concurrency", format!(">= {}", number(need)), r, r >= need)
        }
        (Some(t), None) => not_measured("concurrency", format!(">= {t}")),
        (None, _) => not_measured(
            "concurrency",
            "no concurrency cap at an unlimited rate".into(),
        ),
    });

    gates.extend(delivered::gates(requested, summary, bounds));
    if bounds.over_saturation {
        gates.push(over_saturation(summary));
    }

    gates.push(Gate {
        name: "server_healthy".into(),
        threshold: "healthy after the point".into(),
        observed: Value::Bool(server_healthy_after),
        verdict: if server_healthy_after {
            Verdict::Pass
        } else {
            Verdict::Fail
        },
    });

    Validity {
        valid: gates.iter().all(|g| g.verdict != Verdict::Fail),
        gates,
    }
}

/// The `over_saturation` gate: fails when the summary's `over_saturation` block
/// (`metrics::over_saturation`) says in-flight requests and TTFT both kept rising.
fn over_saturation(summary: &PointSummary) -> Gate {
    let threshold = "in flight and TTFT not both rising through the window";
    let block = summary
        .other
        .get("over_saturation")
        .and_then(|v| serde_json::from_value::<crate::metrics::Saturation>(v.clone()).ok());
    match block {
        Some(s) => Gate {
            name: "over_saturation".into(),
            threshold: threshold.into(),
            observed: Value::String(s.reason),
            verdict: if s.over_saturated {
                Verdict::Fail
            } else {
                Verdict::Pass
            },
        },
        None => not_measured(
            "over_saturation",
            format!(
                "{threshold} (needs {} bins with a TTFT while the client issued)",
                crate::metrics::saturation::MIN_BINS
            ),
        ),
    }
}

fn gate(name: &str, threshold: String, observed: f64, pass: bool) -> Gate {
    Gate {
        name: name.into(),
        threshold,
        observed: serde_json::Number::from_f64(observed).map_or(Value::Null, Value::Number),
        verdict: if pass { Verdict::Pass } else { Verdict::Fail },
    }
}

fn not_measured(name: &str, threshold: String) -> Gate {
    Gate {
        name: name.into(),
        threshold,
        observed: Value::Null,
        verdict: Verdict::NotMeasured,
    }
}

fn round4(v: f64) -> f64 {
    (v * 10_000.0).round() / 10_000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A serialized `LoadPlan`, as the manifest holds it.
    fn load() -> Value {
        json!({
            "endpoint": "completions",
            "dataset": {"random": {"input_len": 1000, "output_len": 100, "range_ratio": 0.0, "prefix_len": 0}},
            "tokenizer": null, "ignore_eos": true, "seed": 0, "extra_body": {}, "request_timeout": null,
            "shape": {"max_concurrency": 8, "rate": "unlimited", "ramp_up": null, "limit": {"requests": 40}, "warmup": "0s", "cooldown": "0s"}
        })
    }

    fn from_load(load: &Value) -> Requested {
        Requested::from_plan(&serde_json::from_value(load.clone()).unwrap())
    }

    #[test]
    fn a_partial_load_reads_what_it_has() {
        let imported = json!({"imported_from": "vllm",
            "dataset": {"random": {"input_len": 1000, "output_len": 100, "range_ratio": 0.0, "prefix_len": 0}},
            "shape": {"max_concurrency": 8, "rate": "unlimited", "ramp_up": null, "limit": null}});
        assert_eq!(
            Requested::from_load(&PlannedLoad::from_json(&imported)),
            Requested {
                requests: None,
                concurrency: Some(8),
                input_len: Some(1000),
                output_len: Some(100),
            }
        );
    }

    fn evaluate(r: &Requested, s: &Value, healthy: bool, b: &ValidityBounds) -> Validity {
        super::evaluate(r, &PointSummary::from_json(s), healthy, b)
    }

    fn summary() -> Value {
        json!({"completed": 40, "failed": 0, "total_input_tokens": 40000, "total_output_tokens": 4000, "max_concurrency_reached": 8,
            "p99_dispatch_lag_ms": 0.2, "delivered_concurrency_ratio": 0.98, "p99_event_loop_lag_ms": 1.5})
    }

    fn verdict(v: &Validity, name: &str) -> Verdict {
        v.gates.iter().find(|g| g.name == name).unwrap().verdict
    }

    #[test]
    fn a_good_point_passes_every_gate() {
        let v = evaluate(
            &from_load(&load()),
            &summary(),
            true,
            &ValidityBounds::default(),
        );
        assert!(v.valid, "{v:#?}");
        assert!(v.gates.iter().all(|g| g.verdict == Verdict::Pass), "{v:#?}");
        assert_eq!(v.gates.len(), 10);
    }

    #[test]
    fn each_gate_fails_on_its_own_cause() {
        let req = from_load(&load());
        let b = ValidityBounds::default();
        let cases = [
            ("completed", json!({"completed": 39, "failed": 0})),
            ("error_rate", json!({"completed": 40, "failed": 2})),
            ("output_tokens", json!({"total_output_tokens": 0})),
            ("input_len", json!({"total_input_tokens": 30000})),
            ("output_len", json!({"total_output_tokens": 40})),
            ("concurrency", json!({"max_concurrency_reached": 5})),
            ("dispatch_lag", json!({"p99_dispatch_lag_ms": 120.0})),
            (
                "delivered_concurrency",
                json!({"delivered_concurrency_ratio": 0.5}),
            ),
            ("event_loop_lag", json!({"p99_event_loop_lag_ms": 90.0})),
        ];
        for (name, change) in cases {
            let mut s = summary();
            for (k, v) in change.as_object().unwrap() {
                s[k] = v.clone();
            }
            let v = evaluate(&req, &s, true, &b);
            assert!(!v.valid, "{name}: {v:#?}");
            assert_eq!(verdict(&v, name), Verdict::Fail, "{name}");
        }
        let v = evaluate(&req, &summary(), false, &b);
        assert_eq!(verdict(&v, "server_healthy"), Verdict::Fail);
        assert!(!v.valid);
    }

    #[test]
    fn missing_fields_are_not_measured_not_passed() {
        let mut s = summary();
        s.as_object_mut().unwrap().remove("max_concurrency_reached");
        let v = evaluate(&from_load(&load()), &s, true, &ValidityBounds::default());
        assert_eq!(verdict(&v, "concurrency"), Verdict::NotMeasured);
        assert!(v.valid);
        let rate_limited = {
            let mut l = load();
            l["shape"]["rate"] = json!({"poisson": {"rps": 2.0}});
            l
        };
        assert_eq!(from_load(&rate_limited).concurrency, None);
    }

    #[test]
    fn reads_what_the_plan_serializes() {
        use crate::dataset::DatasetSpec;
        use crate::load::{Endpoint, Limit, LoadShape, Rate};
        let plan = LoadPlan {
            endpoint: Endpoint::Completions,
            dataset: DatasetSpec::Random {
                input_len: 3000,
                output_len: 150,
                range_ratio: 0.0,
                prefix_len: 0,
            },
            tokenizer: None,
            ignore_eos: true,
            shape: LoadShape {
                max_concurrency: Some(64),
                rate: Rate::Unlimited,
                ramp_up: None,
                limit: Limit::Requests(500),
                warmup: std::time::Duration::ZERO,
                cooldown: std::time::Duration::ZERO,
            },
            seed: 0,
            extra_body: serde_json::Map::new(),
            request_timeout: None,
            goodput: Vec::new(),
            stall_timeout: None,
            prefix_block_size: 16,
            timeseries_interval: None,
            percentiles: vec![99.0],
        };
        assert_eq!(
            Requested::from_plan(&plan),
            Requested {
                requests: Some(500),
                concurrency: Some(64),
                input_len: Some(3000),
                output_len: Some(150),
            }
        );
        let mut paced = plan.clone();
        paced.shape.rate = Rate::Poisson { rps: 4.0 };
        paced.shape.limit = Limit::Duration(std::time::Duration::from_secs(60));
        let r = Requested::from_plan(&paced);
        assert_eq!((r.requests, r.concurrency), (None, None));
    }

    #[test]
    fn serializes_into_the_manifest_shape() {
        let v = evaluate(
            &from_load(&load()),
            &summary(),
            true,
            &ValidityBounds::default(),
        );
        let json = v.to_value();
        assert_eq!(json["valid"], true);
        assert_eq!(json["gates"][0]["name"], "completed");
        assert_eq!(json["gates"][0]["threshold"], ">= 40");
        assert_eq!(json["gates"][0]["verdict"], "pass");
        let back: Validity = serde_json::from_value(json).unwrap();
        assert_eq!(back, v);
    }
}
