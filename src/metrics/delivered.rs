//! The load the client delivered, as the delivered-load validity gate reads it: the mean
//! number of requests in flight while the client was still issuing them, inside the measured
//! window, and the summary figures of delivered load (docs/metrics.md, "Delivered load").
//! Pure: a run's outcome in, figures out.

use serde_json::{Value, json};

use super::sessions::session_spans;
use crate::client::{RequestRecord, RunOutcome};
use crate::load::{Limit, LoadShape, Rate};

/// The delivered-load figures of a point's summary: `p99_dispatch_lag_ms` (paced points
/// only: a closed loop has no schedule), `p99_event_loop_lag_ms`, `mean_in_flight` and, for a
/// closed loop under a concurrency cap, `delivered_concurrency_ratio` (mean in flight over the
/// cap, or over the request count when that is smaller).
pub fn delivered_load(shape: &LoadShape, outcome: &RunOutcome) -> Vec<(&'static str, Value)> {
    let check = &outcome.self_check;
    let closed_loop = shape.rate == Rate::Unlimited && shape.ramp_up.is_none();
    let ms = |us: u64| us as f64 / 1000.0;
    let mut out = Vec::new();
    if !closed_loop {
        out.push(("p99_dispatch_lag_ms", json!(ms(check.dispatch_lag_p99_us))));
    }
    out.push(("p99_event_loop_lag_ms", json!(ms(check.loop_lag_p99_us))));
    let mean = mean_in_flight(
        &outcome.records,
        u64::try_from(shape.warmup.as_micros()).unwrap_or(u64::MAX),
        u64::try_from(shape.cooldown.as_micros()).unwrap_or(u64::MAX),
    );
    if let Some(mean) = mean {
        out.push(("mean_in_flight", json!(round4(mean))));
        if let (Some(cap), true) = (shape.max_concurrency, closed_loop) {
            let target = match shape.limit {
                Limit::Requests(n) => n.min(u64::from(cap)),
                Limit::Duration(_) => u64::from(cap),
            };
            if target > 0 {
                out.push((
                    "delivered_concurrency_ratio",
                    json!(round4(mean / target as f64)),
                ));
            }
        }
    }
    out
}

fn round4(v: f64) -> f64 {
    (v * 10_000.0).round() / 10_000.0
}

/// Mean requests in flight (from each request's send to its end) over the part of the
/// measured window in which the client was still issuing requests: from the later of the
/// warm-up's end and the first send, to the earlier of the last send and the cool-down's
/// start. Past the last send a closed loop drains and its in-flight count falls by design, so
/// that tail is left out. `None` when that span is empty (every request left at once).
///
/// Conversations count sessions in flight (first turn sent to last turn ended, issuing
/// until the last session started): their cap is on sessions, and think time leaves a
/// session's slot without a request by design.
pub fn mean_in_flight(records: &[RequestRecord], warmup_us: u64, cooldown_us: u64) -> Option<f64> {
    let spans = session_spans(records)
        .unwrap_or_else(|| records.iter().map(|r| (r.sent_us, r.end_us)).collect());
    let (from, to) = issuing_span(&spans, warmup_us, cooldown_us)?;
    let busy: u64 = spans
        .iter()
        .map(|(sent, end)| (*end).min(to).saturating_sub((*sent).max(from)))
        .sum();
    Some(busy as f64 / (to - from) as f64)
}

/// The part of the measured window in which the client was still issuing, `[from, to)` in
/// µs on the run's clock, of (sent, end) `spans`: from the later of the warm-up's end and the
/// first send to the earlier of the last send and the cool-down's start; `None` when empty.
pub(super) fn issuing_span(
    spans: &[(u64, u64)],
    warmup_us: u64,
    cooldown_us: u64,
) -> Option<(u64, u64)> {
    let first_sent = spans.iter().map(|s| s.0).min()?;
    let last_sent = spans.iter().map(|s| s.0).max()?;
    let run_end = spans.iter().map(|s| s.1).max()?;
    let from = first_sent.max(warmup_us);
    let to = last_sent.min(run_end.saturating_sub(cooldown_us));
    (to > from).then_some((from, to))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{ChunkTokens, RequestOutcome, Usage};

    fn record(sent_us: u64, end_us: u64) -> RequestRecord {
        RequestRecord {
            index: 0,
            prompt_index: 0,
            session: None,
            turn: None,
            scheduled_us: 0,
            dispatched_us: sent_us,
            sent_us,
            headers_us: None,
            prompt_len: 1,
            output_len: 1,
            usage: Usage::default(),
            tokenizer_output_tokens: None,
            generated_text: None,
            chunk_tokens: ChunkTokens::Usage,
            chunks: Vec::new(),
            first_content_us: None,
            end_us,
            outcome: RequestOutcome::Completed,
        }
    }

    #[test]
    fn a_held_cap_reads_as_the_cap_and_the_drain_is_left_out() {
        // Two slots, each request 100 us, the next sent as one ends: 2 in flight until the
        // last send at 200 us, then a drain to 300 us that does not count.
        let records: Vec<_> = [0, 0, 100, 100, 200, 200]
            .iter()
            .map(|&s| record(s, s + 100))
            .collect();
        assert_eq!(mean_in_flight(&records, 0, 0), Some(2.0));
        // A single slot used, where two were asked: half of that.
        let one: Vec<_> = [0, 100, 200].iter().map(|&s| record(s, s + 100)).collect();
        assert_eq!(mean_in_flight(&one, 0, 0), Some(1.0));
        // Gaps between sends lower the mean: busy 100 of every 200 us.
        let gappy: Vec<_> = [0, 200, 400].iter().map(|&s| record(s, s + 100)).collect();
        assert_eq!(mean_in_flight(&gappy, 0, 0), Some(0.5));
    }

    #[test]
    fn the_warm_up_is_trimmed_and_an_empty_span_is_none() {
        let records: Vec<_> = [0, 100, 200, 300]
            .iter()
            .map(|&s| record(s, s + 100))
            .collect();
        // Window [100, 300]: one in flight throughout.
        assert_eq!(mean_in_flight(&records, 100, 0), Some(1.0));
        let at_once: Vec<_> = (0..4).map(|_| record(5, 100)).collect();
        assert_eq!(mean_in_flight(&at_once, 0, 0), None);
        assert_eq!(mean_in_flight(&[], 0, 0), None);
    }
}
