//! What the search reads of one request: its TTFT, TPOT and E2EL, or that it missed (failed,
//! timed out, was cancelled or never finished). In rate mode the latencies count from the
//! scheduled arrival, so a request the client had to hold back is not flattered
//! (coordinated omission). Samples of several measurements of a level are pooled.

use crate::client::RequestRecord;
use crate::load::{Slo, SloMetric};
use crate::metrics::{Window, request_times};

/// One request as the SLOs see it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RequestSample {
    /// Completed, with its latencies in milliseconds.
    Done {
        ttft_ms: f64,
        tpot_ms: f64,
        e2el_ms: f64,
    },
    /// Failed, timed out, cancelled or unfinished: it meets no bound.
    Miss,
}

/// Where a request's latency starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// When the request was sent (closed loop).
    Sent,
    /// When the schedule said to send it (open loop: waiting to be sent counts).
    Scheduled,
}

impl RequestSample {
    /// The value of `metric`, milliseconds; infinite for a miss.
    pub fn value(&self, metric: SloMetric) -> f64 {
        match *self {
            RequestSample::Miss => f64::INFINITY,
            RequestSample::Done {
                ttft_ms,
                tpot_ms,
                e2el_ms,
            } => match metric {
                SloMetric::Ttft => ttft_ms,
                SloMetric::Tpot => tpot_ms,
                SloMetric::E2el => e2el_ms,
            },
        }
    }

    /// The largest value / limit over `bounds`: at most 1 when the request meets every bound;
    /// infinite for a miss.
    pub fn score(&self, bounds: &[Slo]) -> f64 {
        bounds
            .iter()
            .map(|b| ratio(self.value(b.metric), b.ms))
            .fold(0.0, f64::max)
    }

    /// The sample of a record.
    pub fn of(record: &RequestRecord, origin: Origin) -> RequestSample {
        let Some(t) = request_times(record) else {
            return RequestSample::Miss;
        };
        let wait_ms = match origin {
            Origin::Sent => 0.0,
            Origin::Scheduled => record.sent_us.saturating_sub(record.scheduled_us) as f64 / 1e3,
        };
        RequestSample::Done {
            ttft_ms: t.ttft_ms + wait_ms,
            // vLLM: a request with one output token has TPOT 0.
            tpot_ms: t.tpot_ms.unwrap_or(0.0),
            e2el_ms: t.e2el_ms + wait_ms,
        }
    }
}

/// `value / limit`, with a zero limit met only by zero.
pub(super) fn ratio(value: f64, limit: f64) -> f64 {
    if limit > 0.0 {
        value / limit
    } else if value <= 0.0 {
        0.0
    } else {
        f64::INFINITY
    }
}

/// The samples of the requests sent inside `window` (all of them without one).
pub fn samples(
    records: &[RequestRecord],
    origin: Origin,
    window: Option<Window>,
) -> Vec<RequestSample> {
    records
        .iter()
        .filter(|r| window.is_none_or(|w| w.contains(r.sent_us)))
        .map(|r| RequestSample::of(r, origin))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{Chunk, ChunkTokens, RequestOutcome, Usage};

    fn record(scheduled_us: u64, sent_us: u64, outcome: RequestOutcome) -> RequestRecord {
        RequestRecord {
            index: 0,
            prompt_index: 0,
            scheduled_us,
            dispatched_us: scheduled_us,
            sent_us,
            headers_us: Some(100),
            prompt_len: 8,
            output_len: 3,
            usage: Usage::default(),
            tokenizer_output_tokens: None,
            generated_text: None,
            chunk_tokens: ChunkTokens::Usage,
            chunks: vec![
                Chunk {
                    t_us: 10_000,
                    tokens: 1,
                },
                Chunk {
                    t_us: 30_000,
                    tokens: 2,
                },
            ],
            first_content_us: None,
            end_us: sent_us + 30_000,
            outcome,
            session: None,
            turn: None,
        }
    }

    #[test]
    fn rate_mode_counts_from_the_scheduled_arrival() {
        let r = record(1_000_000, 1_500_000, RequestOutcome::Completed);
        let sent = RequestSample::of(&r, Origin::Sent);
        let scheduled = RequestSample::of(&r, Origin::Scheduled);
        assert_eq!(sent.value(SloMetric::Ttft), 10.0);
        assert_eq!(scheduled.value(SloMetric::Ttft), 510.0);
        assert_eq!(scheduled.value(SloMetric::E2el), 530.0);
        // TPOT is between tokens: where the latency starts does not change it.
        assert_eq!(sent.value(SloMetric::Tpot), 10.0);
        assert_eq!(scheduled.value(SloMetric::Tpot), 10.0);
    }

    #[test]
    fn failed_and_unfinished_requests_are_misses() {
        for outcome in [
            RequestOutcome::Incomplete,
            RequestOutcome::TimedOut {
                phase: crate::client::TimeoutPhase::Total,
            },
            RequestOutcome::HttpStatus {
                code: 503,
                body: String::new(),
            },
        ] {
            let s = RequestSample::of(&record(0, 0, outcome), Origin::Sent);
            assert_eq!(s, RequestSample::Miss);
            assert!(
                s.score(&[Slo {
                    metric: SloMetric::Ttft,
                    ms: 1e9
                }])
                .is_infinite()
            );
        }
    }

    #[test]
    fn the_score_is_the_worst_bound_ratio() {
        let s = RequestSample::of(&record(0, 0, RequestOutcome::Completed), Origin::Sent);
        let bounds = [
            Slo {
                metric: SloMetric::Ttft,
                ms: 20.0,
            },
            Slo {
                metric: SloMetric::Tpot,
                ms: 5.0,
            },
        ];
        assert_eq!(s.score(&bounds), 2.0);
    }

    #[test]
    fn a_window_keeps_the_requests_sent_inside_it() {
        let rs = [
            record(0, 100, RequestOutcome::Completed),
            record(0, 2_000_000, RequestOutcome::Incomplete),
        ];
        let w = Window {
            start_us: 1_000_000,
            end_us: 3_000_000,
        };
        assert_eq!(
            samples(&rs, Origin::Sent, Some(w)),
            vec![RequestSample::Miss]
        );
        assert_eq!(samples(&rs, Origin::Sent, None).len(), 2);
    }
}
