//! Conversations' figures, from the records' session and turn: per turn index (TTFT,
//! end-to-end latency, input tokens and the prefix-cache hit rate of the requests that were
//! that turn), and per session (duration, turns completed, sessions in flight). Pure.
//! Definitions: docs/metrics.md, "Conversations".

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::samples::request_times;
use super::stats::Stats;
use crate::client::RequestRecord;

/// A point's conversation figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sessions {
    /// Sessions that sent at least one turn.
    pub sessions: u64,
    /// Sessions none of whose turns failed (a failed turn ends its session).
    pub completed_sessions: u64,
    /// Completed turns per session, averaged over the sessions.
    pub mean_turns_completed: f64,
    /// Most sessions in flight at once (first turn sent to last turn ended).
    pub max_concurrent_sessions: u64,
    /// `mean_session_duration_ms`, `median_..`, `std_..`, `p{P}_..`: first turn sent to last
    /// turn ended, over the completed sessions.
    pub duration: Map<String, Value>,
    /// One entry per turn index, in order.
    pub turns: Vec<TurnFigures>,
}

/// The requests that were turn `turn` of their session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnFigures {
    pub turn: u32,
    /// Completed requests of this turn index.
    pub completed: u64,
    pub mean_ttft_ms: f64,
    pub median_ttft_ms: f64,
    pub p99_ttft_ms: f64,
    pub mean_e2el_ms: f64,
    /// Mean input tokens (the server's count when reported): the history grows with the turn.
    pub mean_input_tokens: f64,
    /// Σ cached prompt tokens / Σ input tokens of the completed requests that reported
    /// `cached_tokens`; absent when none did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_cache_hit_rate: Option<f64>,
}

/// The conversation figures of `records`; `None` when no request belonged to a session.
pub(super) fn sessions(records: &[RequestRecord], percentiles: &[f64]) -> Option<Sessions> {
    let mut by_session: BTreeMap<u64, Vec<&RequestRecord>> = BTreeMap::new();
    let mut by_turn: BTreeMap<u32, Vec<&RequestRecord>> = BTreeMap::new();
    for r in records {
        if let (Some(s), Some(t)) = (r.session, r.turn) {
            by_session.entry(s).or_default().push(r);
            by_turn.entry(t).or_default().push(r);
        }
    }
    if by_session.is_empty() {
        return None;
    }
    let (mut completed_sessions, mut turns_completed) = (0u64, 0u64);
    let mut durations: Vec<f64> = Vec::new();
    let mut spans: Vec<(u64, u64)> = Vec::new();
    for turns in by_session.values() {
        let start = turns.iter().map(|r| r.sent_us).min().unwrap_or(0);
        let end = turns.iter().map(|r| r.end_us).max().unwrap_or(start);
        spans.push((start, end));
        turns_completed += turns.iter().filter(|r| r.outcome.is_completed()).count() as u64;
        if turns.iter().all(|r| r.outcome.is_completed()) {
            completed_sessions += 1;
            durations.push(end.saturating_sub(start) as f64 / 1000.0);
        }
    }
    let mut duration = Map::new();
    Stats::of(&mut durations, percentiles).write("session_duration", &mut duration);
    let n = by_session.len() as u64;
    Some(Sessions {
        sessions: n,
        completed_sessions,
        mean_turns_completed: turns_completed as f64 / n as f64,
        max_concurrent_sessions: peak_of(spans.into_iter()),
        duration,
        turns: by_turn
            .into_iter()
            .map(|(turn, rs)| turn_figures(turn, &rs))
            .collect(),
    })
}

/// Each session's span, first turn sent to last turn ended (microseconds since the run
/// start); `None` when no request belonged to a session.
pub(super) fn session_spans(records: &[RequestRecord]) -> Option<Vec<(u64, u64)>> {
    let mut spans: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for r in records {
        if let Some(s) = r.session {
            let e = spans.entry(s).or_insert((r.sent_us, r.end_us));
            *e = (e.0.min(r.sent_us), e.1.max(r.end_us));
        }
    }
    (!spans.is_empty()).then(|| spans.into_values().collect())
}

/// Most spans `(start, end)` open at once (an end before a start at the same instant).
pub(super) fn peak_of(spans: impl Iterator<Item = (u64, u64)>) -> u64 {
    let mut edges: Vec<(u64, i64)> = spans.flat_map(|(a, b)| [(a, 1), (b, -1)]).collect();
    edges.sort_unstable();
    let (mut now, mut peak) = (0i64, 0i64);
    for (_, d) in edges {
        now += d;
        peak = peak.max(now);
    }
    peak as u64
}

fn turn_figures(turn: u32, records: &[&RequestRecord]) -> TurnFigures {
    let (mut ttft, mut e2el, mut input) = (Vec::new(), Vec::new(), 0u64);
    let (mut cached, mut cached_of, mut reported) = (0u64, 0u64, false);
    for r in records {
        let Some(t) = request_times(r) else { continue };
        ttft.push(t.ttft_ms);
        e2el.push(t.e2el_ms);
        input += r.input_tokens();
        if let Some(c) = r.usage.cached_tokens {
            reported = true;
            cached += u64::from(c);
            cached_of += r.input_tokens();
        }
    }
    let n = ttft.len();
    let t = Stats::of(&mut ttft, &[99.0]);
    let e = Stats::of(&mut e2el, &[]);
    TurnFigures {
        turn,
        completed: n as u64,
        mean_ttft_ms: t.mean,
        median_ttft_ms: t.median,
        p99_ttft_ms: t.percentiles.first().map_or(0.0, |p| p.1),
        mean_e2el_ms: e.mean,
        mean_input_tokens: if n == 0 { 0.0 } else { input as f64 / n as f64 },
        prefix_cache_hit_rate: (reported && cached_of > 0)
            .then(|| (cached as f64 / cached_of as f64).min(1.0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{Chunk, ChunkTokens, RequestOutcome, Usage};

    fn rec(session: u64, turn: u32, sent_ms: u64, end_ms: u64, cached: u32) -> RequestRecord {
        RequestRecord {
            index: session * 10 + u64::from(turn),
            prompt_index: 0,
            session: Some(session),
            turn: Some(turn),
            scheduled_us: 0,
            dispatched_us: 0,
            sent_us: sent_ms * 1000,
            headers_us: None,
            prompt_len: 100 * (turn + 1),
            output_len: 2,
            usage: Usage {
                prompt_tokens: Some(100 * (turn + 1)),
                completion_tokens: Some(2),
                cached_tokens: Some(cached),
                reasoning_tokens: None,
            },
            tokenizer_output_tokens: None,
            generated_text: None,
            chunk_tokens: ChunkTokens::Usage,
            chunks: vec![
                Chunk {
                    t_us: 1000 * (turn + 1),
                    tokens: 1,
                },
                Chunk {
                    t_us: 2000 * (turn + 1),
                    tokens: 1,
                },
            ],
            first_content_us: None,
            end_us: end_ms * 1000,
            outcome: RequestOutcome::Completed,
        }
    }

    #[test]
    fn figures_per_turn_and_per_session() {
        let mut failed = rec(1, 1, 30, 35, 0);
        failed.outcome = RequestOutcome::Cancelled;
        let records = vec![
            rec(0, 0, 0, 10, 0),
            rec(0, 1, 20, 40, 100),
            rec(1, 0, 5, 25, 0),
            failed,
        ];
        let s = sessions(&records, &[99.0]).unwrap();
        assert_eq!((s.sessions, s.completed_sessions), (2, 1));
        assert_eq!(s.mean_turns_completed, 1.5);
        // Session 0 spans 0-40 ms, session 1 5-35 ms.
        assert_eq!(s.max_concurrent_sessions, 2);
        assert_eq!(s.duration["mean_session_duration_ms"], 40.0);
        assert_eq!(s.turns.len(), 2);
        let (t0, t1) = (&s.turns[0], &s.turns[1]);
        assert_eq!((t0.turn, t0.completed, t1.completed), (0, 2, 1));
        assert_eq!((t0.mean_ttft_ms, t1.mean_ttft_ms), (1.0, 2.0));
        assert_eq!((t0.mean_input_tokens, t1.mean_input_tokens), (100.0, 200.0));
        assert_eq!(t0.prefix_cache_hit_rate, Some(0.0));
        assert_eq!(t1.prefix_cache_hit_rate, Some(0.5));
        // Independent prompts have no conversation figures.
        let mut plain = rec(0, 0, 0, 1, 0);
        (plain.session, plain.turn) = (None, None);
        assert_eq!(sessions(&[plain], &[99.0]), None);
    }
}
