//! Weka's agentic-coding traces (the KV-cache tester's format, which AIPerf replays): one
//! JSON file per session with its `block_size`, `hash_id_scope` and `requests`, each
//! `{t, type: "n"|"s", in, out, hash_ids, think_time}` or a `subagent` entry with nested
//! requests. The sessions become agentic trace turns (the `agentic` module replays them):
//! a subagent's requests run in place, in order; a turn waits its `think_time` (else the
//! gap from the previous request's end, `t` + `api_time`) after the previous answer. With
//! `hash_id_scope: local` equal ids in different files are different blocks. The files
//! carry no start times: sessions start as the point's rate and concurrency allow.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::DatasetError;
use super::trace_read::TraceRequest;

/// The sessions of a Weka trace file or of every `.json` file of a directory (in name
/// order), as turns with their session ids, and the block size they share.
pub(super) fn read_weka(path: &Path) -> Result<(Vec<TraceRequest>, u32), DatasetError> {
    let files: Vec<PathBuf> = if path.is_dir() {
        let read = |source| DatasetError::Read {
            path: path.to_path_buf(),
            source,
        };
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(read)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        files.sort();
        files
    } else {
        vec![path.to_path_buf()]
    };
    let mut block_size: Option<u32> = None;
    let mut out = Vec::new();
    for (session, file) in files.iter().enumerate() {
        let raw = std::fs::read_to_string(file).map_err(|source| DatasetError::Read {
            path: file.clone(),
            source,
        })?;
        let bad = |message: String| DatasetError::Format {
            path: file.clone(),
            message: format!(
                "{message}; a Weka trace is one JSON object with `id`, `block_size`, `hash_id_scope` and `requests`"
            ),
        };
        let trace: Value = serde_json::from_str(&raw).map_err(|e| DatasetError::Line {
            path: file.clone(),
            line: e.line(),
            column: Some(e.column()),
            message: e.to_string(),
        })?;
        let size = trace
            .get("block_size")
            .and_then(Value::as_u64)
            .and_then(|b| u32::try_from(b).ok())
            .filter(|b| *b > 0)
            .ok_or_else(|| bad("no `block_size` of at least 1".into()))?;
        match block_size {
            Some(b) if b != size => {
                return Err(bad(format!(
                    "`block_size` {size} differs from the other files' {b}; replay them apart"
                )));
            }
            _ => block_size = Some(size),
        }
        // Local ids name blocks of this session only: give each session its own range.
        let offset = match trace.get("hash_id_scope").and_then(Value::as_str) {
            Some("local") => (session as u64 + 1) << 40,
            Some("global") => 0,
            other => {
                return Err(bad(format!(
                    "`hash_id_scope` is {other:?}, not \"local\" or \"global\""
                )));
            }
        };
        let id = match trace.get("id").and_then(Value::as_str) {
            Some(id) => format!("{session}:{id}"),
            None => session.to_string(),
        };
        let requests = trace
            .get("requests")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("no `requests` list".into()))?;
        let mut turns = Vec::new();
        flatten(requests, "requests", offset, &mut turns).map_err(bad)?;
        if turns.is_empty() {
            return Err(bad("no request in `requests`".into()));
        }
        let mut previous_end: Option<f64> = None;
        for (i, t) in turns.into_iter().enumerate() {
            let delay_s = match (t.think_time, previous_end) {
                (Some(think), _) => think,
                (None, Some(end)) => (t.t - end).max(0.0),
                (None, None) => 0.0,
            };
            previous_end = Some(t.t + t.api_time.unwrap_or(0.0));
            out.push(TraceRequest {
                timestamp_ms: 0,
                input_length: t.input,
                output_length: t.output.max(1),
                hash_ids: t.hash_ids,
                session_id: Some(id.clone()),
                delay_us: (i > 0).then(|| (delay_s * 1e6).round() as u64),
                literal: None,
            });
        }
    }
    let Some(block_size) = block_size else {
        return Err(DatasetError::Format {
            path: path.to_path_buf(),
            message: "no `.json` Weka trace file here".into(),
        });
    };
    Ok((out, block_size))
}

/// One API call of a session, as read.
struct Call {
    t: f64,
    input: u32,
    output: u32,
    hash_ids: Vec<u64>,
    think_time: Option<f64>,
    api_time: Option<f64>,
}

/// The API calls of `requests` in order, subagents' nested ones in place; `at` names the
/// list in errors.
fn flatten(requests: &[Value], at: &str, offset: u64, out: &mut Vec<Call>) -> Result<(), String> {
    for (i, r) in requests.iter().enumerate() {
        let here = format!("{at}[{i}]");
        match r.get("type").and_then(Value::as_str) {
            Some("n" | "s") => out.push(call(r, &here, offset)?),
            Some("subagent") => {
                let inner = r
                    .get("requests")
                    .and_then(Value::as_array)
                    .ok_or_else(|| format!("`{here}` is a subagent without `requests`"))?;
                flatten(inner, &format!("{here}.requests"), offset, out)?;
            }
            other => {
                return Err(format!(
                    "`{here}.type` is {other:?}, not \"n\", \"s\" or \"subagent\""
                ));
            }
        }
    }
    Ok(())
}

fn call(r: &Value, here: &str, offset: u64) -> Result<Call, String> {
    let seconds = |key: &str| -> Result<Option<f64>, String> {
        match r.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_f64()
                .filter(|f| *f >= 0.0 && f.is_finite())
                .map(Some)
                .ok_or_else(|| format!("`{here}.{key}` is {v}, not seconds >= 0")),
        }
    };
    let tokens = |key: &str| -> Result<u32, String> {
        r.get(key)
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| format!("`{here}.{key}` is missing or not a token count"))
    };
    let hash_ids = match r.get("hash_ids") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|h| h.as_u64().map(|h| h.wrapping_add(offset)))
            .collect::<Option<Vec<u64>>>()
            .ok_or_else(|| format!("`{here}.hash_ids` holds something not a whole number"))?,
        Some(v) => return Err(format!("`{here}.hash_ids` is {v}, not a list")),
    };
    Ok(Call {
        t: seconds("t")?.ok_or_else(|| format!("`{here}` has no `t`"))?,
        input: tokens("in")?,
        output: tokens("out")?,
        hash_ids,
        think_time: seconds("think_time")?,
        api_time: seconds("api_time")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/traces/weka-sample"
    );

    #[test]
    fn sessions_flatten_subagents_and_keep_their_scope() {
        let (turns, block) = read_weka(Path::new(SAMPLE)).unwrap();
        assert_eq!(block, 32);
        let sessions: Vec<&str> = turns
            .iter()
            .map(|t| t.session_id.as_deref().unwrap())
            .collect();
        // Session 0: three calls, a subagent of two, one more; session 1: three calls.
        assert_eq!(sessions.iter().filter(|s| s.starts_with("0:")).count(), 6);
        assert_eq!(sessions.iter().filter(|s| s.starts_with("1:")).count(), 3);
        let first: Vec<&TraceRequest> = turns
            .iter()
            .filter(|t| t.session_id == turns[0].session_id)
            .collect();
        assert_eq!(first[0].delay_us, None);
        // think_time 2.5 s; then no think_time: t 10 - (t 4 + api_time 3) = 3 s.
        assert_eq!(first[1].delay_us, Some(2_500_000));
        assert_eq!(first[2].delay_us, Some(3_000_000));
        // Local scope: the same id in the two files names different blocks; within a file
        // a later call extends the earlier one's blocks.
        let second: Vec<&TraceRequest> = turns
            .iter()
            .filter(|t| t.session_id != turns[0].session_id)
            .collect();
        assert_eq!(first[0].hash_ids.len(), 2);
        assert_ne!(first[0].hash_ids[0], second[0].hash_ids[0]);
        assert_eq!(first[1].hash_ids[..2], first[0].hash_ids[..]);
    }

    #[test]
    fn a_bad_file_is_named_with_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.json");
        for (text, want) in [
            (
                r#"{"id": "x", "block_size": 16, "hash_id_scope": "galaxy", "requests": []}"#,
                "`hash_id_scope`",
            ),
            (
                r#"{"id": "x", "block_size": 16, "hash_id_scope": "local", "requests": [{"t": 0, "type": "n", "out": 3}]}"#,
                "`requests[0].in`",
            ),
            (
                r#"{"id": "x", "block_size": 16, "hash_id_scope": "local", "requests": [{"t": 0, "type": "subagent", "requests": [{"t": 1, "type": "q"}]}]}"#,
                "`requests[0].requests[0].type`",
            ),
            ("{\"id\": ", "bad.json:1:"),
        ] {
            std::fs::write(&path, text).unwrap();
            let e = read_weka(&path).unwrap_err().to_string();
            assert!(e.contains("bad.json") && e.contains(want), "{e}");
        }
    }
}
