//! Values drawn from one record's chunk timeline: TTFT, TTFOT, E2EL, TPOT per request; per-token ITL
//! and per-chunk inter-chunk latency (ICL) per gap, each with the absolute time it refers to so
//! a window can keep or drop it. Definitions: docs/metrics.md.

use crate::client::RequestRecord;

/// Per-request latencies of a completed request, milliseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RequestTimes {
    pub ttft_ms: f64,
    pub e2el_ms: f64,
    /// `(e2el - ttft) / (output_tokens - 1)`; `None` with one output token or fewer.
    pub tpot_ms: Option<f64>,
    /// Time to first output token: the first answer (content) chunk, after any reasoning;
    /// `None` when no chunk carried an answer (or the record predates the field).
    pub ttfot_ms: Option<f64>,
    pub output_tokens: u64,
}

fn ms(us: u32) -> f64 {
    f64::from(us) / 1000.0
}

/// TTFT, E2EL and TPOT of a completed request with at least one output-bearing chunk.
pub fn request_times(r: &RequestRecord) -> Option<RequestTimes> {
    if !r.outcome.is_completed() {
        return None;
    }
    let ttft = r.ttft_us()?;
    let e2el = r.e2el_us()?;
    let n = r.output_tokens();
    let tpot = (n > 1).then(|| (ms(e2el) - ms(ttft)) / (n - 1) as f64);
    Some(RequestTimes {
        ttft_ms: ms(ttft),
        e2el_ms: ms(e2el),
        tpot_ms: tpot,
        ttfot_ms: r.first_content_us.map(ms),
        output_tokens: n,
    })
}

/// Per-token inter-token latencies: a chunk carrying k tokens that arrived `g` after the
/// previous token-bearing chunk contributes k values of `g / k`. Tokens of the first chunk have
/// no predecessor and contribute none. Calls `f(arrival_us since run start, itl_ms)`.
pub fn token_itls(r: &RequestRecord, mut f: impl FnMut(u64, f64)) {
    let mut prev: Option<u32> = None;
    for c in r.chunks.iter().filter(|c| c.tokens > 0) {
        if let Some(p) = prev {
            let per = ms(c.t_us.saturating_sub(p)) / f64::from(c.tokens);
            for _ in 0..c.tokens {
                f(r.sent_us + u64::from(c.t_us), per);
            }
        }
        prev = Some(c.t_us);
    }
}

/// Inter-chunk latencies: the gap between consecutive output-bearing chunks, one value per gap
/// whatever the chunks carry (vLLM's historical "ITL"). Calls `f(arrival_us, icl_ms)`.
pub fn chunk_gaps(r: &RequestRecord, mut f: impl FnMut(u64, f64)) {
    for w in r.chunks.windows(2) {
        f(
            r.sent_us + u64::from(w[1].t_us),
            ms(w[1].t_us.saturating_sub(w[0].t_us)),
        );
    }
}

/// Every output token's arrival (absolute µs), with how many tokens arrived then.
pub fn token_arrivals(r: &RequestRecord, mut f: impl FnMut(u64, u64)) {
    for c in &r.chunks {
        f(r.sent_us + u64::from(c.t_us), u64::from(c.tokens));
    }
}
