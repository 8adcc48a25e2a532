//! Over-saturation of one point: did the requests in flight and the TTFT keep rising through
//! the measured window, as they do when requests arrive faster than the server finishes them
//! and its queue grows without bound (GuideLLM's over-saturation stop tests the same two
//! slopes)? Pure: request records in, the two trends and the verdict out (docs/metrics.md,
//! "Over-saturation"). The runner records the verdict as the point's `over_saturation` gate
//! and, with `over_saturation: stop`, stops the sweep's escalation there.
//!
//! The span is the part of the measured window in which the client was still issuing (as
//! for the delivered load: a drain after the last send falls by design), cut into equal bins
//! (one per second, at least [`MIN_BINS`] and at most [`MAX_BINS`]). Per bin: the time-weighted
//! mean of requests in flight, and the median TTFT of the requests sent in it. Each series
//! gets a least-squares slope and its one-sided confidence bound (Student's t). Both rise
//! only when the bound is above zero and the rise is material: the in-flight count grows by
//! at least [`MIN_BACKLOG`] of the requests sent per second (the server finishes less than
//! 95% of what arrives), and the fitted TTFT climbs across the span by at least [`MIN_RISE`]
//! of its mean. Over-saturated: both rise. A closed loop at its concurrency cap cannot show a
//! rising in-flight count, so the verdict is for paced (open-loop) points.

use serde::{Deserialize, Serialize};

use super::delivered::issuing_span;
use super::sessions::session_spans;
use super::stats::t_quantile;
use crate::client::RequestRecord;

/// Fewest bins with data in both series for a verdict.
pub const MIN_BINS: usize = 5;
/// Most bins the span is cut into.
pub const MAX_BINS: usize = 120;
/// Smallest fitted TTFT rise across the span, relative to its mean, that counts.
pub const MIN_RISE: f64 = 0.2;
/// Smallest growth of the in-flight count, per second, relative to the requests sent per
/// second, that counts.
pub const MIN_BACKLOG: f64 = 0.05;
/// One-sided confidence of each slope's bound.
pub const CONFIDENCE: f64 = 0.95;

/// One series' straight-line fit over the span.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trend {
    /// Least-squares slope, per second of the span.
    pub slope_per_s: f64,
    /// The slope's one-sided lower confidence bound.
    pub slope_lower_per_s: f64,
    /// Mean of the series over its bins.
    pub mean: f64,
    /// Fitted rise across the span over the mean (`slope × span / mean`).
    pub rise: f64,
    /// The lower bound is above zero and the rise is material (see the module's doc).
    pub rising: bool,
}

/// The verdict of one point (the summary's `over_saturation` block).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Saturation {
    pub over_saturated: bool,
    /// The span judged, seconds on the run's clock, and its bins.
    pub from_s: f64,
    pub to_s: f64,
    pub bins: usize,
    /// Requests sent per second over the span.
    pub sent_per_s: f64,
    /// The in-flight count's slope over the requests sent per second: the share of the
    /// arrivals the server did not keep up with.
    pub backlog: f64,
    /// Mean requests in flight per bin.
    pub in_flight: Trend,
    /// Median TTFT (ms) of the requests sent in each bin.
    pub ttft_ms: Trend,
    /// Why, in words.
    pub reason: String,
}

/// The over-saturation verdict of a point's `records` with `warmup_us` and `cooldown_us`
/// trimmed; `None` when the span holds fewer than [`MIN_BINS`] bins with a TTFT.
pub fn over_saturation(
    records: &[RequestRecord],
    warmup_us: u64,
    cooldown_us: u64,
) -> Option<Saturation> {
    let spans = session_spans(records)
        .unwrap_or_else(|| records.iter().map(|r| (r.sent_us, r.end_us)).collect());
    let (from, to) = issuing_span(&spans, warmup_us, cooldown_us)?;
    let length = to - from;
    let bins = usize::try_from(length / 1_000_000)
        .unwrap_or(MAX_BINS)
        .clamp(MIN_BINS, MAX_BINS);
    let width = length as f64 / bins as f64;
    let edge = |i: usize| from as f64 + width * i as f64;
    let mut busy = vec![0.0; bins];
    for &(sent, end) in &spans {
        for (i, b) in busy.iter_mut().enumerate() {
            let overlap = (end as f64).min(edge(i + 1)) - (sent as f64).max(edge(i));
            if overlap > 0.0 {
                *b += overlap;
            }
        }
    }
    let mut ttfts: Vec<Vec<f64>> = vec![Vec::new(); bins];
    for r in records {
        let (Some(ttft), true) = (r.ttft_us(), (from..to).contains(&r.sent_us)) else {
            continue;
        };
        let i = (((r.sent_us - from) as f64 / width) as usize).min(bins - 1);
        ttfts[i].push(f64::from(ttft) / 1000.0);
    }
    let mid = |i: usize| (edge(i) + width / 2.0) / 1e6;
    let mut in_flight = Vec::new();
    let mut ttft = Vec::new();
    for (i, (b, mut t)) in busy.iter().zip(ttfts).enumerate() {
        if t.is_empty() {
            continue;
        }
        t.sort_by(f64::total_cmp);
        in_flight.push((mid(i), b / width));
        ttft.push((mid(i), super::stats::percentile(&t, 50.0)));
    }
    if ttft.len() < MIN_BINS {
        return None;
    }
    let span_s = length as f64 / 1e6;
    let sent = spans.iter().filter(|s| (from..to).contains(&s.0)).count();
    let sent_per_s = sent as f64 / span_s;
    let mut in_flight = trend(&in_flight, span_s);
    let backlog = if sent_per_s > 0.0 {
        in_flight.slope_per_s / sent_per_s
    } else {
        0.0
    };
    in_flight.rising = in_flight.slope_lower_per_s > 0.0 && backlog >= MIN_BACKLOG;
    let mut ttft_ms = trend(&ttft, span_s);
    ttft_ms.rising = ttft_ms.slope_lower_per_s > 0.0 && ttft_ms.rise >= MIN_RISE;
    let over_saturated = in_flight.rising && ttft_ms.rising;
    let verb = |t: &Trend| {
        if t.rising {
            "rose"
        } else {
            "did not keep rising"
        }
    };
    let reason = format!(
        "requests in flight {} ({:+.3}/s, lower bound {:+.3}: {:.0}% of the {:.3} sent/s); \
         TTFT {} by {:+.0}% across the window ({:+.3} ms/s, lower bound {:+.3})",
        verb(&in_flight),
        in_flight.slope_per_s,
        in_flight.slope_lower_per_s,
        backlog * 100.0,
        sent_per_s,
        verb(&ttft_ms),
        ttft_ms.rise * 100.0,
        ttft_ms.slope_per_s,
        ttft_ms.slope_lower_per_s
    );
    Some(Saturation {
        over_saturated,
        from_s: from as f64 / 1e6,
        to_s: to as f64 / 1e6,
        bins: ttft.len(),
        sent_per_s: round6(sent_per_s),
        backlog: round6(backlog),
        in_flight,
        ttft_ms,
        reason,
    })
}

/// The least-squares line through `points` (x in seconds) and its one-sided lower bound
/// (`rising` left for the caller to judge).
fn trend(points: &[(f64, f64)], span_s: f64) -> Trend {
    let n = points.len() as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    let residuals: f64 = points
        .iter()
        .map(|p| (p.1 - (my + slope * (p.0 - mx))).powi(2))
        .sum();
    let se = if sxx > 0.0 && n > 2.0 {
        (residuals / (n - 2.0) / sxx).sqrt()
    } else {
        f64::INFINITY
    };
    let lower = slope - t_quantile(CONFIDENCE, (n - 2.0).max(1.0)) * se;
    let rise = if my > 0.0 { slope * span_s / my } else { 0.0 };
    Trend {
        slope_per_s: round6(slope),
        slope_lower_per_s: round6(lower),
        mean: round6(my),
        rise: round6(rise),
        rising: false,
    }
}

fn round6(v: f64) -> f64 {
    if v.is_finite() {
        (v * 1e6).round() / 1e6
    } else {
        v
    }
}
