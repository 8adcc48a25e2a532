//! Metric formulas on hand-made chunk timelines: one-token chunks, multi-token chunks,
//! failures in every denominator, goodput, token-timestamp trimming, exact peak concurrency,
//! reasoning before the answer, the prefix cache's achieved over ideal.

use std::time::Duration;

use super::*;
use crate::client::{Chunk, ChunkTokens, RequestOutcome, RequestRecord, Usage};

/// A completed request sent at `sent_ms` with chunks `(ms after sent, tokens)`.
fn rec(index: u64, sent_ms: u64, chunks: &[(u32, u16)], outcome: RequestOutcome) -> RequestRecord {
    let chunks: Vec<Chunk> = chunks
        .iter()
        .map(|&(ms, tokens)| Chunk {
            t_us: ms * 1000,
            tokens,
        })
        .collect();
    let n: u32 = chunks.iter().map(|c| u32::from(c.tokens)).sum();
    let last = chunks.last().map_or(0, |c| u64::from(c.t_us));
    RequestRecord {
        index,
        prompt_index: 0,
        session: None,
        turn: None,
        scheduled_us: sent_ms * 1000,
        dispatched_us: sent_ms * 1000,
        sent_us: sent_ms * 1000,
        headers_us: Some(1000),
        prompt_len: 10,
        output_len: n,
        usage: Usage {
            prompt_tokens: Some(10),
            completion_tokens: Some(n),
            ..Default::default()
        },
        tokenizer_output_tokens: None,
        generated_text: None,
        chunk_tokens: ChunkTokens::Usage,
        chunks,
        first_content_us: None,
        end_us: sent_ms * 1000 + last + 1000,
        outcome,
    }
}

fn get(s: &serde_json::Map<String, serde_json::Value>, k: &str) -> f64 {
    s[k].as_f64().unwrap()
}

#[test]
fn one_token_chunks() {
    let r = rec(
        0,
        0,
        &[(100, 1), (120, 1), (140, 1), (160, 1)],
        RequestOutcome::Completed,
    );
    let t = request_times(&r).unwrap();
    assert_eq!((t.ttft_ms, t.e2el_ms, t.output_tokens), (100.0, 160.0, 4));
    assert_eq!(t.tpot_ms, Some(20.0));
    let s = summarize(&[r], &SummaryOptions::default());
    assert_eq!(get(&s.latency, "mean_itl_ms"), 20.0);
    assert_eq!(get(&s.latency, "mean_icl_ms"), 20.0);
    assert_eq!(get(&s.latency, "p99_ttft_ms"), 100.0);
    assert_eq!(s.mean_tokens_per_chunk, 1.0);
    // duration = last end = 161 ms
    assert!((s.duration - 0.161).abs() < 1e-9);
    assert!((s.output_throughput - 4.0 / 0.161).abs() < 1e-9);
    assert!((s.total_token_throughput - 14.0 / 0.161).abs() < 1e-9);
}

#[test]
fn multi_token_chunks_split_gaps_per_token() {
    // First chunk 1 token at 100 ms, then two chunks of 4 tokens 40 ms apart.
    let r = rec(
        0,
        0,
        &[(100, 1), (140, 4), (180, 4)],
        RequestOutcome::Completed,
    );
    let t = request_times(&r).unwrap();
    assert_eq!(t.output_tokens, 9);
    assert_eq!(t.tpot_ms, Some(10.0)); // (180 - 100) / 8
    let mut itl = Vec::new();
    token_itls(&r, |_, v| itl.push(v));
    assert_eq!(itl, vec![10.0; 8]);
    let mut icl = Vec::new();
    chunk_gaps(&r, |_, v| icl.push(v));
    assert_eq!(icl, vec![40.0, 40.0]);
    let s = summarize(&[r], &SummaryOptions::default());
    assert_eq!(s.mean_tokens_per_chunk, 3.0);
    assert_eq!(get(&s.latency, "median_itl_ms"), 10.0);
    assert_eq!(get(&s.latency, "median_icl_ms"), 40.0);
    // Peak per-second bucket counts tokens, not chunks.
    assert_eq!(s.max_output_tokens_per_s, 9.0);
}

#[test]
fn a_first_chunk_with_several_tokens_counts_in_tpot_not_in_itl() {
    let r = rec(0, 0, &[(50, 3), (70, 1)], RequestOutcome::Completed);
    let t = request_times(&r).unwrap();
    assert_eq!(t.tpot_ms, Some(20.0 / 3.0));
    let mut itl = Vec::new();
    token_itls(&r, |_, v| itl.push(v));
    assert_eq!(itl, vec![20.0]);
}

#[test]
fn failures_stay_in_the_denominators() {
    let ok = rec(0, 0, &[(100, 1), (120, 1)], RequestOutcome::Completed);
    let mid = rec(
        1,
        0,
        &[(90, 1)],
        RequestOutcome::StreamError {
            message: "error event: engine died".into(),
        },
    );
    let http = rec(
        2,
        0,
        &[],
        RequestOutcome::HttpStatus {
            code: 503,
            body: "busy".into(),
        },
    );
    let slow = rec(3, 0, &[(400, 1), (420, 1)], RequestOutcome::Completed);
    let opts = SummaryOptions {
        goodput: vec![Slo {
            metric: SloMetric::Ttft,
            ms: 150.0,
        }],
        ..SummaryOptions::default()
    };
    let s = summarize(&[ok, mid, http, slow], &opts);
    assert_eq!((s.completed, s.failed), (2, 2));
    assert_eq!(s.outcomes["stream_error"], 1);
    assert_eq!(s.outcomes["http_status"], 1);
    // The failed request's chunk is not in any latency.
    assert_eq!(get(&s.latency, "mean_ttft_ms"), 250.0);
    let g = s.goodput.unwrap();
    assert_eq!(g.good_requests, 1);
    assert_eq!(g.good_request_fraction, 0.25);
    assert!((s.request_goodput.unwrap() - 1.0 / s.duration).abs() < 1e-9);
    assert!(
        s.errors
            .iter()
            .any(|(r, n)| r.contains("HTTP 503") && *n == 1)
    );
    assert!(s.errors.iter().any(|(r, _)| r.contains("engine died")));
}

#[test]
fn trimming_keeps_tokens_inside_the_window_only() {
    // Run ends at 2.901 s; warm-up 1 s, cool-down 1 s -> window [1 s, 1.901 s).
    let early = rec(0, 0, &[(500, 1), (1500, 1)], RequestOutcome::Completed);
    let middle = rec(1, 1200, &[(100, 1), (300, 1)], RequestOutcome::Completed);
    let late = rec(2, 2000, &[(500, 1), (900, 1)], RequestOutcome::Completed);
    let opts = SummaryOptions {
        warmup: Duration::from_secs(1),
        cooldown: Duration::from_secs(1),
        ..SummaryOptions::default()
    };
    let s = summarize(&[early, middle, late], &opts);
    let t = s.trimmed.unwrap();
    assert_eq!(t.window_start_s, 1.0);
    assert!((t.window_end_s - 1.901).abs() < 1e-9);
    // Tokens at 1.5 s (early), 1.3 s and 1.5 s (middle); none of late's (2.5 s, 2.9 s).
    assert_eq!(t.output_tokens, 3);
    assert_eq!((t.requests_started, t.requests_completed), (1, 1));
    // ITL gaps ending inside: early's 1000 ms gap and middle's 200 ms gap.
    assert_eq!(get(&t.latency, "mean_itl_ms"), 600.0);
    assert_eq!(get(&t.latency, "mean_ttft_ms"), 100.0);
    // Untrimmed figures still cover everything.
    assert_eq!(s.total_output_tokens, 6);
}

#[test]
fn peak_concurrency_is_exact() {
    let a = rec(0, 0, &[(100, 1)], RequestOutcome::Completed); // [0, 101)
    let b = rec(1, 50, &[(100, 1)], RequestOutcome::Completed); // [50, 151)
    let c = rec(2, 101, &[(10, 1)], RequestOutcome::Completed); // starts when a ends
    let s = summarize(&[a, b, c], &SummaryOptions::default());
    assert_eq!(s.max_concurrent_requests, 2);
}

#[test]
fn usage_and_tokenizer_counts_are_compared() {
    let mut a = rec(0, 0, &[(10, 1), (20, 1)], RequestOutcome::Completed);
    a.tokenizer_output_tokens = Some(2);
    let mut b = rec(1, 0, &[(10, 1), (20, 1)], RequestOutcome::Completed);
    b.tokenizer_output_tokens = Some(3);
    let s = summarize(&[a, b], &SummaryOptions::default());
    assert_eq!((s.usage_check.checked, s.usage_check.mismatched), (2, 1));
    assert_eq!(s.usage_check.max_diff_pct, 50.0);
}

#[test]
fn reasoning_first_gets_its_own_time_to_first_output_token() {
    // Reasoning in the first two chunks, the answer from 300 ms.
    let mut a = rec(
        0,
        0,
        &[(100, 1), (200, 1), (300, 1), (400, 1)],
        RequestOutcome::Completed,
    );
    a.first_content_us = Some(300_000);
    a.usage.reasoning_tokens = Some(2);
    let mut b = rec(1, 0, &[(100, 1), (500, 1)], RequestOutcome::Completed);
    b.first_content_us = Some(500_000);
    // An ordinary answer: its TTFOT is its TTFT.
    let mut c = rec(2, 0, &[(100, 1), (200, 1)], RequestOutcome::Completed);
    c.first_content_us = Some(100_000);
    let s = summarize(&[a, b, c.clone()], &SummaryOptions::default());
    assert_eq!(s.reasoning_requests, 2);
    assert_eq!(s.total_reasoning_tokens, Some(2));
    assert_eq!(get(&s.latency, "mean_ttfot_ms"), 300.0);
    assert_eq!(get(&s.latency, "mean_ttft_ms"), 100.0);
    let text = render_text(&s, &[99.0], None);
    assert!(text.contains("Mean TTFOT (ms):"), "{text}");
    // Nobody reasoned: no TTFOT figures and nothing about reasoning.
    let s = summarize(&[c], &SummaryOptions::default());
    assert_eq!((s.reasoning_requests, s.total_reasoning_tokens), (0, None));
    assert!(!s.latency.contains_key("mean_ttfot_ms"));
    assert!(!render_text(&s, &[99.0], None).contains("TTFOT"));
}

#[test]
fn achieved_over_ideal_uses_the_client_rate_else_the_server_s() {
    let mut a = rec(0, 0, &[(100, 1)], RequestOutcome::Completed);
    a.usage.cached_tokens = Some(4);
    let mut s = summarize(&[a], &SummaryOptions::default());
    assert_eq!(s.prefix_cache_hit_rate, Some(0.4));
    s.set_prefix_cache(Some(0.3), Some((0.8, 16)));
    assert_eq!(s.prefix_cache_hit_vs_ideal, Some(0.5));
    assert_eq!(s.prefix_block_tokens, Some(16));
    let text = render_text(&s, &[99.0], None);
    assert!(
        text.lines()
            .any(|l| l.starts_with("Prefix cache hit rate (server):") && l.contains("30.00%")),
        "{text}"
    );
    // No client figure: the server's is the achieved one; no reuse: no ratio.
    let b = rec(0, 0, &[(100, 1)], RequestOutcome::Completed);
    let mut s = summarize(&[b], &SummaryOptions::default());
    assert_eq!(s.prefix_cache_hit_rate, None);
    s.set_prefix_cache(Some(0.3), Some((0.6, 16)));
    assert_eq!(s.prefix_cache_hit_vs_ideal, Some(0.5));
    s.set_prefix_cache(Some(0.3), Some((0.0, 16)));
    assert_eq!(s.prefix_cache_hit_vs_ideal, None);
    assert!(
        !render_text(&summarize(&[], &SummaryOptions::default()), &[99.0], None).contains("Prefix")
    );
}

/// An open loop at 10 requests/s for 10 s; request i has TTFT `ttft(i)` ms and lasts
/// `last(i)` ms after it was sent.
fn paced(ttft: impl Fn(u64) -> u32, last: impl Fn(u64) -> u32) -> Vec<RequestRecord> {
    (0..100)
        .map(|i| {
            let (first, end) = (ttft(i), last(i).max(ttft(i) + 1));
            rec(
                i,
                i * 100,
                &[(first, 1), (end, 1)],
                RequestOutcome::Completed,
            )
        })
        .collect()
}

#[test]
fn a_steady_open_loop_is_not_over_saturated() {
    let records = paced(|i| 50 + (i % 3) as u32, |i| 200 + (i % 5) as u32 * 10);
    let s = over_saturation(&records, 0, 0).expect("ten seconds judge");
    assert!(!s.over_saturated, "{s:?}");
    assert!(!s.in_flight.rising && !s.ttft_ms.rising, "{s:?}");
    assert!((s.in_flight.mean - 2.2).abs() < 0.3, "{s:?}");
    assert_eq!(s.bins, 9, "one bin per second of the issuing span (9.9 s)");
}

#[test]
fn a_growing_queue_is_over_saturated() {
    // Served at 5 requests/s: request i waits for the i before it, its TTFT grows by 100 ms
    // per request, and so does the number in flight.
    let records = paced(|i| 100 * i as u32 + 20, |i| 100 * i as u32 + 120);
    let s = over_saturation(&records, 0, 0).expect("judged");
    assert!(s.over_saturated, "{s:?}");
    assert!(s.in_flight.slope_lower_per_s > 0.0 && s.ttft_ms.slope_lower_per_s > 0.0);
    // TTFT rises 1000 ms per second of the run.
    assert!((s.ttft_ms.slope_per_s - 1000.0).abs() < 50.0, "{s:?}");
    assert!(s.reason.contains("requests in flight rose"), "{}", s.reason);
}

#[test]
fn longer_answers_with_a_flat_ttft_are_not_over_saturation() {
    // In flight rises (each answer is longer than the last), the server starts each at once.
    let records = paced(|i| 40 + (i % 4) as u32, |i| 100 + 30 * i as u32);
    let s = over_saturation(&records, 0, 0).expect("judged");
    assert!(s.in_flight.rising, "{s:?}");
    assert!(!s.ttft_ms.rising && !s.over_saturated, "{s:?}");
}

#[test]
fn a_span_too_short_for_five_bins_with_a_ttft_is_not_judged() {
    let records: Vec<RequestRecord> = (0..4)
        .map(|i| rec(i, i * 100, &[(50, 1)], RequestOutcome::Completed))
        .collect();
    assert_eq!(over_saturation(&records, 0, 0), None);
    // The warm-up is left out: only the last second of a ten-second run remains.
    let long = paced(|_| 50, |_| 100);
    assert_eq!(over_saturation(&long, 9_500_000, 0), None);
}

#[test]
fn t_quantiles_match_the_tables() {
    for (p, df, t) in [(0.95, 3.0, 2.353), (0.95, 10.0, 1.812), (0.975, 5.0, 2.571)] {
        assert!((t_quantile(p, df) - t).abs() / t < 0.01, "{p} {df}");
    }
    assert!((t_quantile(0.95, 1e6) - normal_quantile(0.95)).abs() < 1e-4);
}

#[test]
fn a_slower_first_token_without_a_backlog_is_not_over_saturation() {
    // TTFT drifts from 5 to 15 ms (a busy client machine), each request still ends 100 ms
    // after its first token: the server keeps up, the in-flight count barely moves.
    let records = paced(|i| 5 + (i / 10) as u32, |i| 105 + (i / 10) as u32);
    let s = over_saturation(&records, 0, 0).expect("judged");
    assert!(s.ttft_ms.rising, "{s:?}");
    assert!(s.backlog < 0.05 && !s.in_flight.rising, "{s:?}");
    assert!(!s.over_saturated);
    assert!(
        s.reason.contains("requests in flight did not keep rising"),
        "{}",
        s.reason
    );
}
