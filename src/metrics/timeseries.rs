//! What the client did over time, on the run's clock: the run cut into bins of a fixed
//! interval (1 s by default), each with the requests in flight (time-weighted mean), the
//! requests scheduled, sent, completed and failed per second, output tokens per second, and
//! TTFT and ITL p50/p99 of what arrived in it (docs/metrics.md, "Time series"). Pure: request
//! records in, bins out; the server's gauges beside them come from the client's scrapes.

use serde::{Deserialize, Serialize};

use super::samples::token_itls;
use super::stats::percentile;
use super::window::Window;
use crate::client::{RequestRecord, ServerSeries};

/// A point's series as archived (`points/<point>/timeseries.json`, docs/archive.md): the
/// client's bins and every scraped server's gauges, on the run's clock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimeSeries {
    /// Bin width, seconds.
    pub interval_s: f64,
    /// The measured window (the whole run when nothing is trimmed); before it is the
    /// warm-up, after it the cool-down.
    pub window: Span,
    /// When the last request ended, seconds since the run start.
    pub run_end_s: f64,
    pub client: Vec<ClientBin>,
    /// The entry first, then the other instances.
    pub servers: Vec<ServerSeries>,
}

/// `[from_s, to_s)` on the run's clock.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Span {
    pub from_s: f64,
    pub to_s: f64,
}

/// The series of a point: the client's from `records` in bins of `interval`, the measured
/// window from `warmup` and `cooldown` (as the summary trims), and the servers' `servers`.
pub fn time_series(
    records: &[RequestRecord],
    interval: std::time::Duration,
    (warmup, cooldown): (std::time::Duration, std::time::Duration),
    servers: Vec<ServerSeries>,
) -> TimeSeries {
    let run_end_us = records.iter().map(|r| r.end_us).max().unwrap_or(0);
    let window = Window::trimmed(run_end_us, warmup, cooldown).unwrap_or(Window {
        start_us: 0,
        end_us: run_end_us,
    });
    TimeSeries {
        interval_s: interval.as_secs_f64(),
        window: Span {
            from_s: window.start_us as f64 / 1e6,
            to_s: window.end_us as f64 / 1e6,
        },
        run_end_s: run_end_us as f64 / 1e6,
        client: client_series(
            records,
            u64::try_from(interval.as_micros()).unwrap_or(u64::MAX),
        ),
        servers,
    }
}

/// One bin `[t_s, t_s + interval)` of the client's series. Rates are per second; the
/// percentiles are `None` when nothing of that kind arrived in the bin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientBin {
    /// Start of the bin, seconds since the run start.
    pub t_s: f64,
    /// Mean requests in flight (from send to end) over the bin.
    pub in_flight: f64,
    /// Requests due (their scheduled time) in the bin, per second.
    pub scheduled_per_s: f64,
    /// Requests sent in the bin, per second.
    pub sent_per_s: f64,
    /// Requests that ended completed in the bin, per second.
    pub completed_per_s: f64,
    /// Requests that ended any other way in the bin, per second.
    pub failed_per_s: f64,
    /// Output tokens that arrived in the bin, per second.
    pub output_tokens_per_s: f64,
    /// TTFT of the requests whose first token arrived in the bin, ms.
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
    /// Inter-token latencies of the tokens that arrived in the bin, ms.
    pub itl_p50_ms: Option<f64>,
    pub itl_p99_ms: Option<f64>,
}

/// Per-bin accumulators.
#[derive(Default, Clone)]
struct Acc {
    busy_us: u64,
    scheduled: u64,
    sent: u64,
    completed: u64,
    failed: u64,
    tokens: u64,
    ttft: Vec<f64>,
    itl: Vec<f64>,
}

/// The client's series of `records` in bins of `interval_us` (at least 1), from the run start
/// to the last request's end (the last bin may be partial: its rates are over its covered part).
pub fn client_series(records: &[RequestRecord], interval_us: u64) -> Vec<ClientBin> {
    let step = interval_us.max(1);
    let Some(run_end) = records.iter().map(|r| r.end_us.max(r.sent_us)).max() else {
        return Vec::new();
    };
    // Events at the run's very end fall in the last bin.
    let bins = usize::try_from(run_end.div_ceil(step).max(1)).unwrap_or(usize::MAX);
    let mut acc = vec![Acc::default(); bins];
    let bin = |t: u64| {
        usize::try_from(t / step)
            .unwrap_or(usize::MAX)
            .min(bins - 1)
    };
    for r in records {
        acc[bin(r.scheduled_us)].scheduled += 1;
        acc[bin(r.sent_us)].sent += 1;
        let end = &mut acc[bin(r.end_us)];
        if r.outcome.is_completed() {
            end.completed += 1;
        } else {
            end.failed += 1;
        }
        // In flight over [sent, end): spread over the bins it spans.
        let mut t = r.sent_us;
        while t < r.end_us {
            let i = bin(t);
            let edge = ((i as u64 + 1) * step).min(r.end_us);
            acc[i].busy_us += edge - t;
            t = edge;
        }
        if let Some(ttft) = r.ttft_us() {
            acc[bin(r.sent_us + u64::from(ttft))]
                .ttft
                .push(f64::from(ttft) / 1000.0);
        }
        for c in &r.chunks {
            acc[bin(r.sent_us + u64::from(c.t_us))].tokens += u64::from(c.tokens);
        }
        token_itls(r, |at, itl| acc[bin(at)].itl.push(itl));
    }
    acc.into_iter()
        .enumerate()
        .map(|(i, mut a)| {
            let start = i as u64 * step;
            // The last bin ends at the run's end.
            let span_us = ((start + step).min(run_end) - start).max(1);
            let secs = span_us as f64 / 1e6;
            let per_s = |n: u64| n as f64 / secs;
            let (ttft_p50_ms, ttft_p99_ms) = p50_p99(&mut a.ttft);
            let (itl_p50_ms, itl_p99_ms) = p50_p99(&mut a.itl);
            ClientBin {
                t_s: start as f64 / 1e6,
                in_flight: a.busy_us as f64 / span_us as f64,
                scheduled_per_s: per_s(a.scheduled),
                sent_per_s: per_s(a.sent),
                completed_per_s: per_s(a.completed),
                failed_per_s: per_s(a.failed),
                output_tokens_per_s: per_s(a.tokens),
                ttft_p50_ms,
                ttft_p99_ms,
                itl_p50_ms,
                itl_p99_ms,
            }
        })
        .collect()
}

fn p50_p99(values: &mut [f64]) -> (Option<f64>, Option<f64>) {
    if values.is_empty() {
        return (None, None);
    }
    values.sort_by(f64::total_cmp);
    (
        Some(percentile(values, 50.0)),
        Some(percentile(values, 99.0)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{Chunk, ChunkTokens, RequestOutcome, Usage};

    /// A request scheduled at `scheduled`, sent at `sent`, whose chunks (one token each) come
    /// at `chunks` after the send and which ends at the last of them.
    fn record(scheduled: u64, sent: u64, chunks: &[u32], outcome: RequestOutcome) -> RequestRecord {
        RequestRecord {
            index: 0,
            prompt_index: 0,
            scheduled_us: scheduled,
            dispatched_us: sent,
            sent_us: sent,
            headers_us: None,
            prompt_len: 1,
            output_len: chunks.len() as u32,
            usage: Usage::default(),
            tokenizer_output_tokens: None,
            generated_text: None,
            chunk_tokens: ChunkTokens::AssumedOne,
            chunks: chunks
                .iter()
                .map(|&t_us| Chunk { t_us, tokens: 1 })
                .collect(),
            first_content_us: None,
            end_us: sent + u64::from(chunks.last().copied().unwrap_or(0)),
            outcome,
            session: None,
            turn: None,
        }
    }

    #[test]
    fn known_timelines_give_known_bins() {
        let ok = RequestOutcome::Completed;
        // Bins of 1 s. Request A: scheduled 0.0, sent 0.1 s, tokens at +0.2, +0.4, +1.4 s
        // (ends 1.5 s). Request B: scheduled 0.5 s, sent 0.9 s (late), tokens at +0.3 s,
        // +0.5 s (ends 1.4 s). Request C fails at 2.5 s without a token.
        let records = [
            record(0, 100_000, &[200_000, 400_000, 1_400_000], ok.clone()),
            record(500_000, 900_000, &[300_000, 500_000], ok),
            record(
                2_000_000,
                2_000_000,
                &[500_000],
                RequestOutcome::StreamError {
                    message: "x".into(),
                },
            ),
        ];
        let mut c = records[2].clone();
        c.chunks.clear();
        let records = [records[0].clone(), records[1].clone(), c];
        let bins = client_series(&records, 1_000_000);
        assert_eq!(bins.len(), 3);
        let [b0, b1, b2] = [&bins[0], &bins[1], &bins[2]];
        assert_eq!((b0.t_s, b1.t_s, b2.t_s), (0.0, 1.0, 2.0));
        assert_eq!((b0.scheduled_per_s, b0.sent_per_s), (2.0, 2.0));
        // The last bin is [2.0, 2.5): one request over half a second.
        assert_eq!((b2.scheduled_per_s, b2.sent_per_s), (2.0, 2.0));
        assert_eq!((b1.completed_per_s, b1.failed_per_s), (2.0, 0.0));
        assert_eq!((b2.completed_per_s, b2.failed_per_s), (0.0, 2.0));
        // In flight: A for 0.9 s and B for 0.1 s of bin 0; A 0.5 s and B 0.4 s of bin 1;
        // C the whole covered half of bin 2.
        assert!((b0.in_flight - 1.0).abs() < 1e-9, "{}", b0.in_flight);
        assert!((b1.in_flight - 0.9).abs() < 1e-9, "{}", b1.in_flight);
        assert!((b2.in_flight - 1.0).abs() < 1e-9, "{}", b2.in_flight);
        // Tokens: A's 0.3 and 0.5 s in bin 0; B's 1.2, 1.4 and A's 1.5 s in bin 1.
        assert_eq!((b0.output_tokens_per_s, b1.output_tokens_per_s), (2.0, 3.0));
        // TTFT: A's 200 ms arrived in bin 0, B's 300 ms in bin 1.
        assert_eq!((b0.ttft_p50_ms, b0.ttft_p99_ms), (Some(200.0), Some(200.0)));
        assert_eq!(b1.ttft_p50_ms, Some(300.0));
        assert_eq!(b2.ttft_p50_ms, None);
        // ITL: A's 200 ms gap ends at 0.5 s, in bin 0.
        assert_eq!(b0.itl_p50_ms, Some(200.0));
        // Bin 1: B's 200 ms gap and A's 1000 ms gap: p50 600, p99 992.
        assert_eq!(b1.itl_p50_ms, Some(600.0));
        assert!((b1.itl_p99_ms.unwrap() - 992.0).abs() < 1e-9);
        assert_eq!((b2.itl_p50_ms, b2.itl_p99_ms), (None, None));
    }

    #[test]
    fn the_window_is_the_summarys_and_the_file_round_trips() {
        let records: Vec<_> = (0..10u64)
            .map(|k| {
                record(
                    k * 1_000_000,
                    k * 1_000_000,
                    &[500_000, 1_000_000],
                    RequestOutcome::Completed,
                )
            })
            .collect();
        let secs = std::time::Duration::from_secs;
        let ts = time_series(&records, secs(2), (secs(2), secs(3)), Vec::new());
        assert_eq!(ts.interval_s, 2.0);
        assert_eq!(ts.run_end_s, 10.0);
        assert_eq!(
            ts.window,
            Span {
                from_s: 2.0,
                to_s: 7.0
            }
        );
        assert_eq!(ts.client.len(), 5);
        let back: TimeSeries = serde_json::from_str(&serde_json::to_string(&ts).unwrap()).unwrap();
        assert_eq!(back, ts);
        // Untrimmed: the whole run.
        let whole = time_series(&records, secs(1), (secs(0), secs(0)), Vec::new());
        assert_eq!(
            whole.window,
            Span {
                from_s: 0.0,
                to_s: 10.0
            }
        );
    }

    #[test]
    fn a_held_concurrency_reads_as_itself_in_every_full_bin() {
        // Two slots for 3 s, each request 250 ms, the next sent as one ends.
        let records: Vec<_> = (0..12u64)
            .flat_map(|k| {
                let sent = k * 250_000;
                [0, 1].map(|_| record(sent, sent, &[100_000, 250_000], RequestOutcome::Completed))
            })
            .collect();
        let bins = client_series(&records, 500_000);
        // The run ends at 3 s: six whole bins, the last requests' ends in the last.
        assert_eq!(bins.len(), 6);
        for b in &bins {
            assert!((b.in_flight - 2.0).abs() < 1e-9, "{b:?}");
            assert_eq!(b.sent_per_s, 8.0);
        }
        // Away from the edges, 4 requests of 2 tokens each per half second.
        for b in &bins[1..5] {
            assert_eq!(b.output_tokens_per_s, 16.0, "{b:?}");
        }
        assert!(client_series(&[], 1_000_000).is_empty());
    }
}
