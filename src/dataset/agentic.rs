//! Agentic traces replayed as sessions: AIPerf's `mooncake_trace` lines that carry a
//! `session_id` (the form AIPerf and InferenceX use for agent sessions). A session starts at
//! its first turn's `timestamp`; each later turn is sent `delay` milliseconds after the
//! previous answer ended (both divided by the replay's speedup). A turn's `hash_ids` already
//! name its whole context (the blocks of the turns before it, then its own), so its prompt is
//! synthesized from them as a plain Mooncake request's and sent alone, not after a history.

use std::time::Duration;

use super::conversation::SessionTurn;
use super::mooncake::{Replay, trace_texts};
use super::trace_read::{Literal, TraceRequest};
use super::{DatasetError, Prompt, Tokenizer};

/// The sessions of `trace` whose first turn falls in the replay window, in start order, as
/// prompts (first turns carry their arrival offset when `timed`, later turns their delay),
/// `num_prompts` turns at most (the last session kept is cut). Untimed sessions (Weka's)
/// start as the point's rate and concurrency allow.
pub(super) fn sessions(
    tok: &Tokenizer,
    trace: Vec<TraceRequest>,
    replay: &Replay,
    (num_prompts, seed): (usize, u64),
    timed: bool,
) -> Result<Vec<Prompt>, DatasetError> {
    let (start, end) = replay.bounds_ms()?;
    // Sessions in order of first appearance; a line without `session_id` is a session of one.
    let mut order: Vec<Vec<TraceRequest>> = Vec::new();
    let mut index: std::collections::HashMap<String, usize> = Default::default();
    for r in trace {
        match r.session_id.clone() {
            Some(id) => match index.get(&id) {
                Some(&i) => order[i].push(r),
                None => {
                    index.insert(id, order.len());
                    order.push(vec![r]);
                }
            },
            None => order.push(vec![r]),
        }
    }
    let mut kept: Vec<Vec<TraceRequest>> = order
        .into_iter()
        .filter(|s| (start..end).contains(&s[0].timestamp_ms))
        .collect();
    kept.sort_by_key(|s| s[0].timestamp_ms);
    let mut left = num_prompts;
    for s in &mut kept {
        s.truncate(left);
        left -= s.len();
    }
    kept.retain(|s| !s.is_empty());
    if kept.is_empty() {
        return Err(DatasetError::Invalid(
            "no session of the trace starts in the window `start`..`start + duration`; widen it"
                .into(),
        ));
    }
    let requests: Vec<TraceRequest> = kept.iter().flatten().cloned().collect();
    let mut texts = trace_texts(tok, &requests, replay.block_size, seed)?.into_iter();
    let scaled = |ms: f64| Duration::from_secs_f64(ms / 1000.0 / replay.speedup);
    let mut prompts = Vec::with_capacity(requests.len());
    for (session, turns) in kept.iter().enumerate() {
        let at = scaled((turns[0].timestamp_ms - start) as f64);
        for (turn, r) in turns.iter().enumerate() {
            let (text, prompt_len) = texts.next().unwrap_or_default();
            let think = if turn == 0 {
                Duration::ZERO
            } else {
                scaled(r.delay_us.unwrap_or(0) as f64 / 1000.0)
            };
            prompts.push(Prompt {
                text,
                prompt_len,
                output_len: r.output_length,
                at_us: (timed && turn == 0)
                    .then(|| u64::try_from(at.as_micros()).unwrap_or(u64::MAX)),
                session: Some(SessionTurn {
                    session: session as u32,
                    turn: turn as u32,
                    think_us: u64::try_from(think.as_micros()).unwrap_or(u64::MAX),
                    system: None,
                    standalone: true,
                }),
                messages: r.literal.as_ref().and_then(Literal::messages),
            });
        }
    }
    Ok(prompts)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::dataset::read_trace;

    const SHIPPED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/tokenizer/tokenizer.json");
    const SAMPLE: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/traces/agentic-sample.jsonl"
    );

    fn replay(speedup: f64, start_ms: u64) -> Replay {
        Replay {
            block_size: 32,
            speedup,
            start: Duration::from_millis(start_ms),
            duration: None,
        }
    }

    #[test]
    fn the_sample_replays_as_sessions_with_their_turns_and_delays() {
        let tok = Tokenizer::from_file(Path::new(SHIPPED)).unwrap();
        let trace = read_trace(Path::new(SAMPLE)).unwrap();
        let sessions_in_file: std::collections::HashSet<_> = trace
            .iter()
            .map(|r| r.session_id.clone().unwrap())
            .collect();
        let prompts = sessions(&tok, trace.clone(), &replay(2.0, 0), (1000, 1), true).unwrap();
        assert_eq!(prompts.len(), trace.len());
        let turns: Vec<&SessionTurn> = prompts
            .iter()
            .map(|p| p.session.as_ref().unwrap())
            .collect();
        let n = turns.iter().map(|t| t.session).max().unwrap() as usize + 1;
        assert_eq!(n, sessions_in_file.len());
        let mut last_start = 0;
        for (p, t) in prompts.iter().zip(&turns) {
            assert!(t.standalone);
            if t.turn == 0 {
                // Sessions in start order; offsets at half the trace's time.
                let at = p.at_us.unwrap();
                assert!(at >= last_start);
                last_start = at;
                assert_eq!(t.think_us, 0);
            } else {
                assert_eq!(p.at_us, None);
                assert!(t.think_us > 0);
            }
        }
        // A later turn's prompt starts with its previous turn's (its hash ids extend them).
        let (a, b) = (&prompts[0], &prompts[1]);
        assert_eq!(b.session.as_ref().unwrap().turn, 1);
        let (ea, eb) = (tok.encode(&a.text).unwrap(), tok.encode(&b.text).unwrap());
        let half = ea.len() / 2;
        assert_eq!(ea[..half], eb[..half]);
        assert!(b.prompt_len > a.prompt_len);
        // A request cap cuts the last session kept.
        let cut = sessions(&tok, trace.clone(), &replay(1.0, 0), (5, 1), true).unwrap();
        assert_eq!(cut.len(), 5);
        // A window past every session start is an error that says what to do.
        let e = sessions(&tok, trace, &replay(1.0, 10_000_000), (10, 1), true).unwrap_err();
        assert!(e.to_string().contains("widen"), "{e}");
    }

    #[test]
    fn delays_follow_the_speedup_and_lone_lines_are_sessions_of_one() {
        let tok = Tokenizer::from_file(Path::new(SHIPPED)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let lines = [
            r#"{"session_id": "a", "timestamp": 1000, "input_length": 32, "output_length": 2, "hash_ids": [1]}"#,
            r#"{"timestamp": 500, "input_length": 32, "output_length": 2, "hash_ids": [9]}"#,
            r#"{"session_id": "a", "delay": 400, "input_length": 64, "output_length": 2, "hash_ids": [1, 2]}"#,
        ];
        std::fs::write(&path, lines.join("\n")).unwrap();
        let trace = read_trace(&path).unwrap();
        let p = sessions(&tok, trace, &replay(2.0, 0), (10, 0), true).unwrap();
        // The lone line starts first (500 ms), then session a (1000 ms) and its turn.
        let at: Vec<Option<u64>> = p.iter().map(|p| p.at_us).collect();
        assert_eq!(at, [Some(250_000), Some(500_000), None]);
        assert_eq!(p[2].session.as_ref().unwrap().think_us, 200_000);
        assert_eq!(p[2].session.as_ref().unwrap().session, 1);
        // A first turn needs its timestamp; a bad delay names its line.
        let bad = [
            r#"{"session_id": "b", "delay": 5, "input_length": 3, "output_length": 1, "hash_ids": [1]}"#,
            r#"{"session_id": "a", "timestamp": 0, "input_length": 3, "output_length": 1, "hash_ids": [1]}
{"session_id": "a", "delay": -3, "input_length": 3, "output_length": 1, "hash_ids": [1]}"#,
        ];
        for (text, want) in bad
            .iter()
            .zip(["t.jsonl:1: no `timestamp`", "t.jsonl:2: `delay`"])
        {
            std::fs::write(&path, text).unwrap();
            let e = read_trace(&path).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
    }
}
