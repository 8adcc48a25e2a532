//! The delivered-load gates: did the client put on the server the load the point asked for?
//! `dispatch_lag` (p99 of sent minus scheduled, open loop), `delivered_concurrency` (mean in
//! flight while issuing over the concurrency cap, closed loop with more requests than the cap)
//! and `event_loop_lag` (p99 of the client's 10 ms probe's late wake-ups). A point whose
//! client fell behind measured a lighter load than its label says: it is invalid.

use super::{Gate, Requested, ValidityBounds, gate, not_measured, round4};
use crate::archive::PointSummary;
use crate::units::number;

/// The three delivered-load gates of one point.
pub(super) fn gates(
    requested: &Requested,
    summary: &PointSummary,
    bounds: &ValidityBounds,
) -> [Gate; 3] {
    let lag_threshold = format!("<= {} ms", bounds.max_dispatch_lag_ms);
    let dispatch = match summary.p99_dispatch_lag_ms {
        Some(lag) => gate(
            "dispatch_lag",
            lag_threshold,
            round4(lag),
            lag <= bounds.max_dispatch_lag_ms,
        ),
        None => not_measured("dispatch_lag", lag_threshold),
    };

    // A cap is only filled when more requests are asked than it holds (or the point runs for
    // a duration): otherwise every request leaves at once and nothing is issued after.
    let fillable = requested
        .concurrency
        .filter(|&c| requested.requests.is_none_or(|r| r > c));
    let share = number(bounds.min_delivered_concurrency * 100.0);
    let concurrency = match (fillable, summary.delivered_concurrency_ratio) {
        (Some(c), Some(ratio)) => gate(
            "delivered_concurrency",
            format!(">= {share}% of {c} in flight"),
            round4(ratio),
            ratio >= bounds.min_delivered_concurrency,
        ),
        (Some(c), None) => not_measured(
            "delivered_concurrency",
            format!(">= {share}% of {c} in flight"),
        ),
        (None, _) => not_measured(
            "delivered_concurrency",
            "no cap the requests could fill at an unlimited rate".into(),
        ),
    };

    let loop_threshold = format!("<= {} ms", bounds.max_event_loop_lag_ms);
    let event_loop = match summary.p99_event_loop_lag_ms {
        Some(lag) => gate(
            "event_loop_lag",
            loop_threshold,
            round4(lag),
            lag <= bounds.max_event_loop_lag_ms,
        ),
        None => not_measured("event_loop_lag", loop_threshold),
    };
    [dispatch, concurrency, event_loop]
}

#[cfg(test)]
mod tests {
    use super::super::Verdict;
    use super::*;
    use serde_json::json;

    fn closed(requests: u64, cap: u64) -> Requested {
        Requested {
            requests: Some(requests),
            concurrency: Some(cap),
            ..Requested::default()
        }
    }

    fn verdicts(r: &Requested, s: serde_json::Value, b: &ValidityBounds) -> [Verdict; 3] {
        gates(r, &PointSummary::from_json(&s), b).map(|g| g.verdict)
    }

    #[test]
    fn each_gate_passes_at_and_fails_past_its_bound() {
        use Verdict::{Fail, NotMeasured, Pass};
        let b = ValidityBounds::default();
        let r = closed(40, 8);
        let good = json!({"p99_dispatch_lag_ms": 50.0, "delivered_concurrency_ratio": 0.9, "p99_event_loop_lag_ms": 50.0});
        assert_eq!(verdicts(&r, good, &b), [Pass, Pass, Pass]);
        let late = json!({"p99_dispatch_lag_ms": 50.5, "delivered_concurrency_ratio": 1.0, "p99_event_loop_lag_ms": 1.0});
        assert_eq!(verdicts(&r, late, &b), [Fail, Pass, Pass]);
        let thin = json!({"delivered_concurrency_ratio": 0.89, "p99_event_loop_lag_ms": 1.0});
        assert_eq!(verdicts(&r, thin, &b), [NotMeasured, Fail, Pass]);
        let stalled = json!({"delivered_concurrency_ratio": 1.0, "p99_event_loop_lag_ms": 80.0});
        assert_eq!(verdicts(&r, stalled, &b), [NotMeasured, Pass, Fail]);
        // Bounds from the task file move the verdicts.
        let strict = ValidityBounds {
            max_dispatch_lag_ms: 0.001,
            min_delivered_concurrency: 1.0,
            max_event_loop_lag_ms: 0.001,
            ..ValidityBounds::default()
        };
        let fine = json!({"p99_dispatch_lag_ms": 0.5, "delivered_concurrency_ratio": 0.95, "p99_event_loop_lag_ms": 0.5});
        assert_eq!(verdicts(&r, fine, &strict), [Fail, Fail, Fail]);
    }

    #[test]
    fn a_cap_the_requests_cannot_fill_is_not_judged() {
        let b = ValidityBounds::default();
        let s = json!({"delivered_concurrency_ratio": 0.1});
        // As many requests as slots: all leave at once.
        assert_eq!(
            verdicts(&closed(8, 8), s.clone(), &b)[1],
            Verdict::NotMeasured
        );
        assert_eq!(verdicts(&closed(9, 8), s.clone(), &b)[1], Verdict::Fail);
        // A duration-bound closed loop keeps issuing.
        let duration = Requested {
            requests: None,
            ..closed(0, 8)
        };
        assert_eq!(verdicts(&duration, s.clone(), &b)[1], Verdict::Fail);
        // No cap (or a finite rate, which `Requested` reads as no cap).
        assert_eq!(
            verdicts(&Requested::default(), s, &b)[1],
            Verdict::NotMeasured
        );
    }

    #[test]
    fn the_failed_gate_names_its_figure_and_bound() {
        let g = gates(
            &closed(40, 8),
            &PointSummary::from_json(&json!({"delivered_concurrency_ratio": 0.5})),
            &ValidityBounds::default(),
        );
        assert_eq!(g[1].name, "delivered_concurrency");
        assert_eq!(g[1].threshold, ">= 90% of 8 in flight");
        assert_eq!(g[1].observed, json!(0.5));
    }
}
