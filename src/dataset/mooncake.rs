//! Mooncake trace replay (the lines are read by `trace_read`): prompts are synthesized from
//! `input_length` and `hash_ids` (one id per block of `block_size` prompt tokens, the last
//! block possibly partial) so that requests sharing a hash id share exactly that block of
//! token ids (block content is a function of the hash id and the seed); a literal prompt
//! (`text_input`, `messages`) is kept as it is. Each prompt carries its arrival offset from
//! the trace. Lines with a `session_id` (AIPerf's agentic form of the format) are replayed
//! as sessions by the `agentic` module instead.

use std::collections::HashMap;
use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::StdRng;

use super::synth::random_ids;
use super::trace_read::{Literal, TraceRequest};
use super::{DatasetError, Prompt, Tokenizer};

/// Tokens per hash id in Mooncake's published traces.
pub const DEFAULT_BLOCK_SIZE: u32 = 512;

/// Keeps block contents independent of other uses of the same seed.
const BLOCK_STREAM: u64 = 0x00B1_0C4E_D5EE_D000;
/// Stream of the filler after the last hashed block (unique per request).
const FILL_STREAM: u64 = 0x0F11_1E55_0000_0000;

/// How to replay a trace: block size, time scale and the window of the trace to keep.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Replay {
    pub block_size: u32,
    /// Arrival offsets are divided by this (2 = twice as fast).
    pub speedup: f64,
    /// Keep requests from this far into the trace (their offsets count from here).
    #[serde(with = "crate::units::serde_duration")]
    pub start: Duration,
    /// Keep requests within this long after `start`; `None` keeps the rest.
    #[serde(default, with = "crate::units::serde_opt_duration")]
    pub duration: Option<Duration>,
}

impl Replay {
    /// The window `[start, end)` in trace milliseconds, once the speedup and block size are
    /// checked.
    pub(super) fn bounds_ms(&self) -> Result<(u64, u64), DatasetError> {
        if !(self.speedup.is_finite() && self.speedup > 0.0) {
            return Err(DatasetError::Invalid(format!(
                "`speedup` must be above 0, got {}",
                self.speedup
            )));
        }
        if self.block_size == 0 {
            return Err(DatasetError::Invalid(
                "`block_size` must be at least 1".into(),
            ));
        }
        let start = self.start.as_millis() as u64;
        let end = self
            .duration
            .map_or(u64::MAX, |d| start.saturating_add(d.as_millis() as u64));
        Ok((start, end))
    }
}

/// The token ids of hash id `hash`'s block: a function of the hash id and the seed only.
pub fn block_ids(tok: &Tokenizer, hash: u64, seed: u64, block_size: u32) -> Vec<u32> {
    let mut rng =
        StdRng::seed_from_u64(seed ^ BLOCK_STREAM ^ hash.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    random_ids(tok, &mut rng, block_size as usize)
}

/// The prompt token ids of each request: its blocks' ids in order, cut to `input_length`
/// (the last block may be partial), then ids unique to the request where the hashed blocks
/// are shorter than `input_length`.
pub fn trace_ids(
    tok: &Tokenizer,
    trace: &[TraceRequest],
    block_size: u32,
    seed: u64,
) -> Vec<Vec<u32>> {
    let mut blocks: HashMap<u64, Vec<u32>> = HashMap::new();
    trace
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let want = r.input_length as usize;
            let mut ids = Vec::with_capacity(want);
            for h in &r.hash_ids {
                if ids.len() >= want {
                    break;
                }
                let b = blocks
                    .entry(*h)
                    .or_insert_with(|| block_ids(tok, *h, seed, block_size));
                let take = b.len().min(want - ids.len());
                ids.extend_from_slice(&b[..take]);
            }
            if ids.len() < want {
                let mut rng = StdRng::seed_from_u64(seed ^ FILL_STREAM ^ i as u64);
                ids.extend(random_ids(tok, &mut rng, want - ids.len()));
            }
            ids
        })
        .collect()
}

/// The trace's requests in the replay window, with their arrival offsets (from the window
/// start, divided by the speedup), at most `num_prompts` of them.
pub(crate) fn window(
    trace: Vec<TraceRequest>,
    replay: &Replay,
    num_prompts: usize,
) -> Result<Vec<(Duration, TraceRequest)>, DatasetError> {
    let (start, end) = replay.bounds_ms()?;
    let kept: Vec<(Duration, TraceRequest)> = trace
        .into_iter()
        .filter(|r| r.timestamp_ms >= start && r.timestamp_ms < end)
        .take(num_prompts)
        .map(|r| {
            let at = (r.timestamp_ms - start) as f64 / 1000.0 / replay.speedup;
            (Duration::from_secs_f64(at), r)
        })
        .collect();
    if kept.is_empty() {
        return Err(DatasetError::Invalid(
            "no request of the trace falls in the window `start`..`start + duration`; widen it"
                .into(),
        ));
    }
    Ok(kept)
}

/// Prompts replaying `trace`: one per request in the window, in trace order,
/// each with its arrival offset. The text is the blocks' decoded texts joined by spaces, so
/// a shared hash id gives the same text (and, with a whitespace pre-tokenizer, the same
/// tokens); `prompt_len` is the re-tokenized count.
pub(crate) fn mooncake(
    tok: &Tokenizer,
    trace: Vec<TraceRequest>,
    replay: &Replay,
    num_prompts: usize,
    seed: u64,
) -> Result<Vec<Prompt>, DatasetError> {
    let kept = window(trace, replay, num_prompts)?;
    let requests: Vec<TraceRequest> = kept.iter().map(|(_, r)| r.clone()).collect();
    let texts = trace_texts(tok, &requests, replay.block_size, seed)?;
    Ok(kept
        .iter()
        .zip(texts)
        .map(|((at, r), (text, prompt_len))| Prompt {
            messages: r.literal.as_ref().and_then(Literal::messages),
            text,
            prompt_len,
            output_len: r.output_length,
            at_us: Some(u64::try_from(at.as_micros()).unwrap_or(u64::MAX)),
            session: None,
        })
        .collect())
}

/// Each request's prompt text and its token count: a literal prompt's text (messages'
/// contents joined; the chat endpoint re-counts them through the template), else its blocks'
/// decoded texts joined by spaces (a shared hash id gives the same text), then unique filler in blocks where the
/// hashed blocks are shorter than `input_length`. Each distinct block (hash id, tokens
/// taken) is decoded once. With a tokenizer whose counts add up across spaces
/// ([`Tokenizer::splits_at_spaces`]) the count is the sum of the blocks' counts, each
/// counted once; otherwise the whole text is re-tokenized.
pub(super) fn trace_texts(
    tok: &Tokenizer,
    requests: &[TraceRequest],
    block_size: u32,
    seed: u64,
) -> Result<Vec<(String, u32)>, DatasetError> {
    let mut words = tok.word_cache();
    let additive = words.is_some();
    let bs = block_size as usize;
    let mut counted = |text: &str| -> Result<u32, DatasetError> {
        Ok(match words.as_mut() {
            Some(w) => w.count(text)? as u32,
            None => 0,
        })
    };
    let mut blocks: HashMap<(u64, usize), (String, u32)> = HashMap::new();
    let push = |text: &mut String, piece: &str| {
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(piece);
    };
    let mut out = Vec::with_capacity(requests.len());
    for (i, r) in requests.iter().enumerate() {
        if let Some(literal) = &r.literal {
            let text = literal.text();
            let n = tok.count(&text)? as u32;
            out.push((text, n));
            continue;
        }
        let want = r.input_length as usize;
        let (mut text, mut count, mut have) = (String::new(), 0u32, 0usize);
        for h in &r.hash_ids {
            if have >= want {
                break;
            }
            let take = bs.min(want - have);
            let (piece, n) = match blocks.entry((*h, take)) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    let ids = block_ids(tok, *h, seed, block_size);
                    let piece = tok.decode(&ids[..take.min(ids.len())])?;
                    let n = counted(&piece)?;
                    e.insert((piece, n))
                }
            };
            if text.is_empty() {
                text.reserve(piece.len() * want.div_ceil(take.max(1)) + 16);
            }
            push(&mut text, piece);
            count += *n;
            have += take;
        }
        if have < want {
            let mut rng = StdRng::seed_from_u64(seed ^ FILL_STREAM ^ i as u64);
            for chunk in random_ids(tok, &mut rng, want - have).chunks(bs.max(1)) {
                let piece = tok.decode(chunk)?;
                count += counted(&piece)?;
                push(&mut text, &piece);
            }
        }
        let prompt_len = if additive {
            count
        } else {
            tok.count(&text)? as u32
        };
        out.push((text, prompt_len));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::dataset::read_trace;

    const SHIPPED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/tokenizer/tokenizer.json");

    fn tok() -> Tokenizer {
        Tokenizer::from_file(Path::new(SHIPPED)).unwrap()
    }

    #[test]
    fn requests_sharing_a_hash_id_share_exactly_that_block() {
        let t = tok();
        let req = |ids: Vec<u64>, len: u32| TraceRequest {
            timestamp_ms: 0,
            input_length: len,
            output_length: 1,
            hash_ids: ids,
            session_id: None,
            delay_us: None,
            literal: None,
        };
        let trace = [
            req(vec![7, 8, 9], 40),
            req(vec![7, 8, 5], 36),
            req(vec![1, 8], 20),
        ];
        let ids = trace_ids(&t, &trace, 16, 3);
        assert_eq!(
            ids.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![40, 36, 20]
        );
        // Same first two blocks, then different ones.
        assert_eq!(ids[0][..32], ids[1][..32]);
        assert_ne!(ids[0][32..36], ids[1][32..36]);
        // Block 8 is the same wherever it appears; the partial last block is its start.
        assert_eq!(ids[2][16..20], ids[0][16..20]);
        assert_ne!(ids[2][..16], ids[0][..16]);
        // A function of (hash id, seed): another seed gives other blocks.
        assert_eq!(ids, trace_ids(&t, &trace, 16, 3));
        assert_ne!(ids[0], trace_ids(&t, &trace, 16, 4)[0]);
        // Through the text the server sees: the shared blocks re-tokenize to the same ids.
        let spec = Replay {
            block_size: 16,
            speedup: 1.0,
            start: Duration::ZERO,
            duration: None,
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let lines: Vec<String> = trace
            .iter()
            .map(|r| {
                format!(
                    r#"{{"timestamp": 0, "input_length": {}, "output_length": 1, "hash_ids": {:?}}}"#,
                    r.input_length, r.hash_ids
                )
            })
            .collect();
        std::fs::write(&path, lines.join("\n")).unwrap();
        let prompts = mooncake(&t, read_trace(&path).unwrap(), &spec, 10, 3).unwrap();
        let enc: Vec<Vec<u32>> = prompts.iter().map(|p| t.encode(&p.text).unwrap()).collect();
        assert_eq!(enc[0][..32], enc[1][..32]);
        assert_eq!(prompts[0].prompt_len, 40);
        assert_eq!(prompts[1].prompt_len, 36);
        // The summed block counts are the re-tokenized counts, filler included.
        assert!(t.splits_at_spaces());
        let long = [req(vec![7, 8], 50), req(vec![], 20), req(vec![8, 7, 8], 45)];
        for (text, n) in trace_texts(&t, &long, 16, 3).unwrap() {
            assert_eq!(t.count(&text).unwrap() as u32, n, "{text}");
        }
    }

    #[test]
    fn the_window_and_speedup_set_the_arrival_offsets() {
        let trace: Vec<TraceRequest> = [0u64, 1000, 2500, 4000]
            .iter()
            .map(|&ts| TraceRequest {
                timestamp_ms: ts,
                input_length: 4,
                output_length: 1,
                hash_ids: vec![ts],
                session_id: None,
                delay_us: None,
                literal: None,
            })
            .collect();
        let replay = |speedup: f64, start: u64, duration: Option<u64>| Replay {
            block_size: 512,
            speedup,
            start: Duration::from_millis(start),
            duration: duration.map(Duration::from_millis),
        };
        let at = |r: Replay, n: usize| -> Vec<u128> {
            window(trace.clone(), &r, n)
                .unwrap()
                .iter()
                .map(|(d, _)| d.as_millis())
                .collect()
        };
        assert_eq!(at(replay(1.0, 0, None), 10), vec![0, 1000, 2500, 4000]);
        assert_eq!(at(replay(2.0, 0, None), 10), vec![0, 500, 1250, 2000]);
        assert_eq!(at(replay(1.0, 1000, Some(2000)), 10), vec![0, 1500]);
        assert_eq!(at(replay(1.0, 0, None), 2), vec![0, 1000]);
        assert!(window(trace.clone(), &replay(0.0, 0, None), 10).is_err());
        let e = window(trace, &replay(1.0, 9000, None), 10).unwrap_err();
        assert!(e.to_string().contains("window"), "{e}");
    }
}
