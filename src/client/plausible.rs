//! Chunk times checked against the run's own figures: per-token ITL must agree with TPOT
//! (both divide the same span between a request's first and last output chunk), and gaps
//! far below a millisecond while tokens take milliseconds are not decode steps. Either
//! failing means the chunk times or token counts are wrong (a miscounted usage report,
//! events stamped together) or the server sends in bursts; the self-check then refuses to
//! vouch for the ITL. Same definitions as crate::metrics (docs/metrics.md), computed here
//! because the client sits below metrics.

use super::record::RequestRecord;

/// Fewer per-token ITL values than this say nothing.
const MIN_ITL_SAMPLES: usize = 20;
/// Median ITL below this share of median TPOT disagrees with it.
const ITL_TPOT_RATIO: f64 = 0.5;
/// A gap shorter than this is no decode step...
const TINY_GAP_US: f64 = 100.0;
/// ...when the median TPOT is at least this,
const TPOT_FLOOR_US: f64 = 1_000.0;
/// ...and more than this share of ITL values are that short.
const TINY_SHARE: f64 = 0.25;

/// ITL and TPOT of the completed requests, as the self-check sees them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct ChunkTiming {
    /// Per-token ITL values.
    pub itls: usize,
    /// Of which shorter than 0.1 ms.
    pub tiny: usize,
    pub median_itl_us: f64,
    pub median_tpot_us: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mid = v.len() / 2;
    let (_, m, _) = v.select_nth_unstable_by(mid, f64::total_cmp);
    *m
}

impl ChunkTiming {
    /// Per-token ITL (`k` values of `gap / k` for a `k`-token chunk after the first) and
    /// TPOT (`(last - first) / (n - 1)`) over the completed records.
    pub(crate) fn of(records: &[RequestRecord]) -> Self {
        let mut itls = Vec::new();
        let mut tpots = Vec::new();
        for r in records.iter().filter(|r| r.outcome.is_completed()) {
            let mut prev: Option<u32> = None;
            for c in r.chunks.iter().filter(|c| c.tokens > 0) {
                if let Some(p) = prev {
                    let per = f64::from(c.t_us.saturating_sub(p)) / f64::from(c.tokens);
                    itls.extend(std::iter::repeat_n(per, usize::from(c.tokens)));
                }
                prev = Some(c.t_us);
            }
            let n = r.output_tokens();
            if let (Some(first), Some(last), true) = (r.chunks.first(), r.chunks.last(), n > 1) {
                tpots.push(f64::from(last.t_us.saturating_sub(first.t_us)) / (n - 1) as f64);
            }
        }
        ChunkTiming {
            itls: itls.len(),
            tiny: itls.iter().filter(|&&v| v < TINY_GAP_US).count(),
            median_itl_us: median(itls),
            median_tpot_us: median(tpots),
        }
    }

    /// Why the chunk times cannot be trusted; empty when they can (or too few to tell).
    pub(crate) fn reasons(&self) -> Vec<String> {
        let mut reasons = Vec::new();
        if self.itls < MIN_ITL_SAMPLES || self.median_tpot_us <= 0.0 {
            return reasons;
        }
        let (itl_ms, tpot_ms) = (self.median_itl_us / 1e3, self.median_tpot_us / 1e3);
        if self.median_itl_us < ITL_TPOT_RATIO * self.median_tpot_us {
            reasons.push(format!(
                "median ITL {itl_ms:.3} ms is under half the median TPOT {tpot_ms:.3} ms: chunk times or per-chunk token counts are wrong, or the server sends tokens in bursts; do not quote the ITL"
            ));
        }
        let share = self.tiny as f64 / self.itls as f64;
        if self.median_tpot_us >= TPOT_FLOOR_US && share > TINY_SHARE {
            reasons.push(format!(
                "{} of {} ITL values ({:.0}%) are under 0.1 ms while the median TPOT is {tpot_ms:.3} ms: those gaps are not decode steps; do not quote the ITL",
                self.tiny,
                self.itls,
                share * 100.0
            ));
        }
        reasons
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{Chunk, ChunkTokens, RequestOutcome, Usage};

    /// A completed record with chunks `(t_us, tokens)` and `usage` completion tokens.
    fn record(chunks: &[(u32, u16)], usage: Option<u32>) -> RequestRecord {
        RequestRecord {
            index: 0,
            prompt_index: 0,
            session: None,
            turn: None,
            scheduled_us: 0,
            dispatched_us: 0,
            sent_us: 0,
            headers_us: None,
            prompt_len: 8,
            output_len: 8,
            usage: Usage {
                prompt_tokens: None,
                completion_tokens: usage,
                ..Default::default()
            },
            tokenizer_output_tokens: None,
            generated_text: None,
            chunk_tokens: ChunkTokens::AssumedOne,
            chunks: chunks
                .iter()
                .map(|&(t_us, tokens)| Chunk { t_us, tokens })
                .collect(),
            first_content_us: None,
            end_us: 0,
            outcome: RequestOutcome::Completed,
        }
    }

    /// Ten one-token chunks 10 ms apart.
    fn steady() -> Vec<(u32, u16)> {
        (0..10).map(|i| (10_000 + i * 10_000, 1)).collect()
    }

    #[test]
    fn steady_chunks_pass() {
        let records: Vec<_> = (0..5).map(|_| record(&steady(), Some(10))).collect();
        let t = ChunkTiming::of(&records);
        assert_eq!(t.itls, 45);
        assert!((t.median_itl_us - 10_000.0).abs() < 1e-6, "{t:?}");
        assert!((t.median_tpot_us - 10_000.0).abs() < 1e-6, "{t:?}");
        assert!(t.reasons().is_empty(), "{:?}", t.reasons());
    }

    /// What a usage total read as new tokens in the last chunk gave against llama.cpp: ten
    /// tokens 2 ms after the last, pooled as ten ITL values of 0.2 ms.
    #[test]
    fn a_last_chunk_claiming_every_token_is_flagged() {
        let mut chunks = steady();
        chunks.push((102_000, 10));
        let records: Vec<_> = (0..5).map(|_| record(&chunks, Some(10))).collect();
        let t = ChunkTiming::of(&records);
        let reasons = t.reasons();
        assert!(
            reasons
                .iter()
                .any(|r| r.contains("under half the median TPOT")),
            "{t:?} {reasons:?}"
        );
    }

    /// Chunks stamped together (microseconds apart) while tokens take milliseconds.
    #[test]
    fn gaps_far_below_tpot_are_flagged() {
        let mut chunks: Vec<(u32, u16)> = (0..10).map(|i| (10_000 + i * 10, 1)).collect();
        chunks.push((100_000, 1));
        let records: Vec<_> = (0..5).map(|_| record(&chunks, None)).collect();
        let t = ChunkTiming::of(&records);
        let reasons = t.reasons();
        assert!(
            reasons.iter().any(|r| r.contains("under 0.1 ms")),
            "{t:?} {reasons:?}"
        );
        // Too few values say nothing.
        assert!(ChunkTiming::of(&records[..1]).reasons().is_empty());
    }
}
