//! Mooncake trace replay: one JSON object per line with `timestamp` (ms from the trace
//! start), `input_length`, `output_length` and `hash_ids` (one id per block of `block_size`
//! prompt tokens, the last block possibly partial). Prompts are synthesized so that requests
//! sharing a hash id share exactly that block of token ids (block content is a function of the
//! hash id and the seed), and each prompt carries its arrival offset from the trace. Lines
//! with a `session_id` (AIPerf's agentic form of the format) are replayed as sessions by
//! the `agentic` module instead.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::StdRng;

use super::synth::random_ids;
use super::{DatasetError, Prompt, Tokenizer};

/// Tokens per hash id in Mooncake's published traces.
pub const DEFAULT_BLOCK_SIZE: u32 = 512;

/// Keeps block contents independent of other uses of the same seed.
const BLOCK_STREAM: u64 = 0x00B1_0C4E_D5EE_D000;
/// Stream of the filler after the last hashed block (unique per request).
const FILL_STREAM: u64 = 0x0F11_1E55_0000_0000;

/// One request of a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceRequest {
    /// Milliseconds from the trace start.
    pub timestamp_ms: u64,
    pub input_length: u32,
    pub output_length: u32,
    pub hash_ids: Vec<u64>,
    /// AIPerf's agentic traces: the session (conversation) this request is a turn of.
    pub session_id: Option<String>,
    /// AIPerf's agentic traces: how long to wait after the session's previous turn ended
    /// before sending this one, microseconds (the trace's `delay`, in milliseconds).
    pub delay_us: Option<u64>,
}

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

/// Read a Mooncake JSONL trace; a line that does not parse is an error naming
/// `path:line` and the field.
pub fn read_trace(path: &Path) -> Result<Vec<TraceRequest>, DatasetError> {
    let raw = std::fs::read_to_string(path).map_err(|source| DatasetError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_trace(path, &raw)
}

fn parse_trace(path: &Path, raw: &str) -> Result<Vec<TraceRequest>, DatasetError> {
    let err = |line: usize, message: String| DatasetError::Format {
        path: path.to_path_buf(),
        message: format!(
            "line {line}: {message}; each line must be an object with `timestamp`, `input_length`, `output_length` and `hash_ids` (Mooncake's trace format)"
        ),
    };
    let mut out = Vec::new();
    let mut sessions: std::collections::HashSet<String> = std::collections::HashSet::new();
    for (i, line) in raw.lines().enumerate() {
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| err(n, format!("column {}: {e}", e.column())))?;
        let int = |key: &str| -> Result<u64, DatasetError> {
            match value.get(key) {
                None => Err(err(n, format!("no `{key}`"))),
                Some(v) => v
                    .as_u64()
                    .or_else(|| {
                        v.as_f64()
                            .filter(|f| *f >= 0.0 && f.is_finite())
                            .map(|f| f as u64)
                    })
                    .ok_or_else(|| err(n, format!("`{key}` is {v}, not a whole number >= 0"))),
            }
        };
        let len = |key: &str| -> Result<u32, DatasetError> {
            u32::try_from(int(key)?).map_err(|_| err(n, format!("`{key}` is too large")))
        };
        let hash_ids = match value.get("hash_ids") {
            None => return Err(err(n, "no `hash_ids`".into())),
            Some(serde_json::Value::Array(a)) => a
                .iter()
                .map(|h| {
                    h.as_u64().ok_or_else(|| {
                        err(n, format!("`hash_ids` holds {h}, not a whole number >= 0"))
                    })
                })
                .collect::<Result<Vec<u64>, _>>()?,
            Some(v) => return Err(err(n, format!("`hash_ids` is {v}, not a list of ids"))),
        };
        let session_id = match value.get("session_id") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            Some(serde_json::Value::Number(n)) => Some(n.to_string()),
            Some(v) => return Err(err(n, format!("`session_id` is {v}, not a string"))),
        };
        let delay_us = match value.get("delay") {
            None | Some(serde_json::Value::Null) => None,
            Some(v) => Some(
                v.as_f64()
                    .filter(|f| *f >= 0.0 && f.is_finite())
                    .map(|ms| (ms * 1000.0).round() as u64)
                    .ok_or_else(|| err(n, format!("`delay` is {v}, not milliseconds >= 0")))?,
            ),
        };
        // A session's later turns follow their previous answer: a `timestamp` is needed
        // only where a session (or a lone request) starts.
        let later_turn = session_id
            .as_ref()
            .is_some_and(|s| !sessions.insert(s.clone()));
        let timestamp_ms = if later_turn && value.get("timestamp").is_none() {
            0
        } else {
            int("timestamp")?
        };
        out.push(TraceRequest {
            timestamp_ms,
            input_length: len("input_length")?,
            output_length: len("output_length")?,
            hash_ids,
            session_id,
            delay_us,
        });
    }
    if out.is_empty() {
        return Err(err(0, "no requests".into()));
    }
    Ok(out)
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
            text,
            prompt_len,
            output_len: r.output_length,
            at_us: Some(u64::try_from(at.as_micros()).unwrap_or(u64::MAX)),
            session: None,
        })
        .collect())
}

/// Each request's prompt text and its re-tokenized length: its blocks' decoded texts joined
/// by spaces (a shared hash id gives the same text).
pub(super) fn trace_texts(
    tok: &Tokenizer,
    requests: &[TraceRequest],
    block_size: u32,
    seed: u64,
) -> Result<Vec<(String, u32)>, DatasetError> {
    let ids = trace_ids(tok, requests, block_size, seed);
    let bs = block_size as usize;
    let mut texts: HashMap<Vec<u32>, String> = HashMap::new();
    ids.into_iter()
        .map(|ids| {
            let mut parts = Vec::with_capacity(ids.len().div_ceil(bs));
            for chunk in ids.chunks(bs) {
                if let Some(t) = texts.get(chunk) {
                    parts.push(t.clone());
                    continue;
                }
                let t = tok.decode(chunk)?;
                texts.insert(chunk.to_vec(), t.clone());
                parts.push(t);
            }
            let text = parts.join(" ");
            let prompt_len = tok.count(&text)? as u32;
            Ok((text, prompt_len))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHIPPED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/tokenizer/tokenizer.json");
    const SAMPLE: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/traces/mooncake-sample.jsonl"
    );

    fn tok() -> Tokenizer {
        Tokenizer::from_file(Path::new(SHIPPED)).unwrap()
    }

    #[test]
    fn the_sample_parses_and_a_bad_line_names_its_number_and_field() {
        let trace = read_trace(Path::new(SAMPLE)).unwrap();
        assert_eq!(trace.len(), 50);
        assert!(
            trace
                .windows(2)
                .all(|w| w[0].timestamp_ms <= w[1].timestamp_ms)
        );
        let p = Path::new("t.jsonl");
        let good =
            r#"{"timestamp": 0, "input_length": 20, "output_length": 3, "hash_ids": [1, 2]}"#;
        let bad_type = format!(
            "{good}\n\n{}",
            r#"{"timestamp": 5, "input_length": "x", "output_length": 3, "hash_ids": [1]}"#
        );
        let e = parse_trace(p, &bad_type).unwrap_err().to_string();
        assert!(
            e.contains("t.jsonl") && e.contains("line 3") && e.contains("`input_length`"),
            "{e}"
        );
        let missing = format!(
            "{good}\n{}",
            r#"{"timestamp": 5, "input_length": 4, "output_length": 3}"#
        );
        let e = parse_trace(p, &missing).unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("no `hash_ids`"), "{e}");
        let garbled = format!("{good}\n{{\"timestamp\": ");
        let e = parse_trace(p, &garbled).unwrap_err().to_string();
        assert!(e.contains("line 2: column"), "{e}");
        let ok = parse_trace(p, good).unwrap();
        assert_eq!(ok[0].hash_ids, vec![1, 2]);
        assert_eq!((ok[0].input_length, ok[0].output_length), (20, 3));
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
