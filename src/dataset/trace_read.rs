//! Reading a Mooncake-format JSONL trace, in every line form AIPerf's `mooncake_trace`
//! takes: `input_length` (with optional `hash_ids`, one id per block of prompt tokens),
//! or a literal prompt as `text_input` or as chat `messages`; with `output_length`,
//! `timestamp` (ms from the trace start) and, for agent sessions, `session_id` and `delay`.
//! A line that does not parse is an error naming `file:line` (and the column for bad JSON)
//! and the field.

use std::collections::HashSet;
use std::path::Path;

use serde_json::Value;

use super::DatasetError;

/// One request of a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceRequest {
    /// Milliseconds from the trace start.
    pub timestamp_ms: u64,
    /// Prompt tokens to synthesize (0 for a literal prompt).
    pub input_length: u32,
    pub output_length: u32,
    /// One id per block of prompt tokens; requests sharing an id share that block.
    pub hash_ids: Vec<u64>,
    /// AIPerf's agentic traces: the session (conversation) this request is a turn of.
    pub session_id: Option<String>,
    /// AIPerf's agentic traces: how long to wait after the session's previous turn ended
    /// before sending this one, microseconds (the trace's `delay`, in milliseconds).
    pub delay_us: Option<u64>,
    /// The prompt given literally (`text_input` or `messages`) instead of synthesized.
    pub literal: Option<Literal>,
}

/// A prompt a trace line gives as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Literal {
    /// `text_input`: the prompt text.
    Text(String),
    /// `messages`: OpenAI chat messages, `(role, content)`, sent on the chat endpoint.
    Messages(Vec<(String, String)>),
}

impl Literal {
    /// The text to count and show: the prompt, or the messages' contents joined by lines.
    pub fn text(&self) -> String {
        match self {
            Literal::Text(t) => t.clone(),
            Literal::Messages(m) => m
                .iter()
                .map(|(_, c)| c.as_str())
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }

    /// The messages, for a `messages` line.
    pub fn messages(&self) -> Option<Vec<(String, String)>> {
        match self {
            Literal::Text(_) => None,
            Literal::Messages(m) => Some(m.clone()),
        }
    }
}

/// What every line error ends with: the forms a line may take.
const FORMS: &str = "each line is an object with `output_length` and one of `input_length` (optionally with `hash_ids`), `text_input` or `messages` (Mooncake's and AIPerf's mooncake_trace format)";

/// Read a Mooncake JSONL trace.
pub fn read_trace(path: &Path) -> Result<Vec<TraceRequest>, DatasetError> {
    let raw = std::fs::read_to_string(path).map_err(|source| DatasetError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_trace(path, &raw)
}

pub(super) fn parse_trace(path: &Path, raw: &str) -> Result<Vec<TraceRequest>, DatasetError> {
    let mut out = Vec::new();
    let mut sessions: HashSet<String> = HashSet::new();
    for (i, line) in raw.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = |column: Option<usize>, message: String| DatasetError::Line {
            path: path.to_path_buf(),
            line: i + 1,
            column,
            message: format!("{message}; {FORMS}"),
        };
        let value: Value = serde_json::from_str(line).map_err(|e| {
            // The position is in the error's own `file:line:column`.
            let message = e.to_string();
            let message = message.split(" at line ").next().unwrap_or_default();
            at(Some(e.column()), message.to_string())
        })?;
        let request = parse_line(&value, &mut sessions).map_err(|m| at(None, m))?;
        out.push(request);
    }
    if out.is_empty() {
        return Err(DatasetError::Format {
            path: path.to_path_buf(),
            message: format!("no requests; {FORMS}"),
        });
    }
    Ok(out)
}

/// A whole number >= 0 (a float with no fraction is taken, as Python writes them).
fn whole(value: &Value, key: &str) -> Result<Option<u64>, String> {
    match value.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .or_else(|| {
                v.as_f64()
                    .filter(|f| *f >= 0.0 && f.is_finite())
                    .map(|f| f as u64)
            })
            .map(Some)
            .ok_or_else(|| format!("`{key}` is {v}, not a whole number >= 0")),
    }
}

fn length(value: &Value, key: &str) -> Result<Option<u32>, String> {
    whole(value, key)?
        .map(|n| u32::try_from(n).map_err(|_| format!("`{key}` {n} is too large")))
        .transpose()
}

/// One line's request; `sessions` holds the sessions seen so far (a session's later turns
/// need no `timestamp`).
fn parse_line(value: &Value, sessions: &mut HashSet<String>) -> Result<TraceRequest, String> {
    if !value.is_object() {
        return Err(format!("the line is {value}, not an object"));
    }
    let input_length = length(value, "input_length")?;
    let literal = literal(value)?;
    match (input_length.is_some(), &literal) {
        (false, None) => return Err("no `input_length`, `text_input` or `messages`".into()),
        (true, Some(_)) => {
            return Err(
                "`input_length`, `text_input` and `messages` exclude each other: give one".into(),
            );
        }
        _ => {}
    }
    let hash_ids = match value.get("hash_ids") {
        None | Some(Value::Null) => Vec::new(),
        Some(_) if literal.is_some() => {
            return Err(
                "`hash_ids` goes with `input_length` only, not with a literal prompt".into(),
            );
        }
        Some(Value::Array(a)) => a
            .iter()
            .map(|h| {
                h.as_u64()
                    .ok_or_else(|| format!("`hash_ids` holds {h}, not a whole number >= 0"))
            })
            .collect::<Result<Vec<u64>, _>>()?,
        Some(v) => return Err(format!("`hash_ids` is {v}, not a list of ids")),
    };
    if value.get("tools").is_some_and(|t| !t.is_null()) {
        return Err("`tools` is not supported: orchestrate sends no tool definitions".into());
    }
    let session_id = match value.get("session_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        Some(v) => return Err(format!("`session_id` is {v}, not a string")),
    };
    let delay_us = match value.get("delay") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_f64()
                .filter(|f| *f >= 0.0 && f.is_finite())
                .map(|ms| (ms * 1000.0).round() as u64)
                .ok_or_else(|| format!("`delay` is {v}, not milliseconds >= 0"))?,
        ),
    };
    // A session's later turns follow their previous answer: a `timestamp` is needed only
    // where a session (or a lone request) starts.
    let later_turn = session_id
        .as_ref()
        .is_some_and(|s| !sessions.insert(s.clone()));
    let timestamp_ms = match whole(value, "timestamp")? {
        Some(t) => t,
        None if later_turn => 0,
        None => return Err("no `timestamp`".into()),
    };
    let output_length = length(value, "output_length")?
        .ok_or("no `output_length` (orchestrate asks every request for an exact answer length)")?;
    Ok(TraceRequest {
        timestamp_ms,
        input_length: input_length.unwrap_or(0),
        output_length,
        hash_ids,
        session_id,
        delay_us,
        literal,
    })
}

/// The line's `text_input` or `messages`, if it has one (both is an error).
fn literal(value: &Value) -> Result<Option<Literal>, String> {
    let text = match value.get("text_input") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(v) => return Err(format!("`text_input` is {v}, not a string")),
    };
    let messages = match value.get("messages") {
        None | Some(Value::Null) => None,
        Some(Value::Array(a)) if a.is_empty() => {
            return Err("`messages` is empty: give at least one message".into());
        }
        Some(Value::Array(a)) => Some(
            a.iter()
                .enumerate()
                .map(|(i, m)| message(i, m))
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Some(v) => return Err(format!("`messages` is {v}, not a list of messages")),
    };
    match (text, messages) {
        (Some(_), Some(_)) => Err("`text_input` and `messages` exclude each other".into()),
        (Some(t), None) => Ok(Some(Literal::Text(t))),
        (None, Some(m)) => Ok(Some(Literal::Messages(m))),
        (None, None) => Ok(None),
    }
}

/// Message `i`: its `role` and its `content` (a string, or text parts joined).
fn message(i: usize, m: &Value) -> Result<(String, String), String> {
    let role = m
        .get("role")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("`messages[{i}]` has no `role` string"))?;
    let content = match m.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .map(|p| match (p.get("type").and_then(Value::as_str), p.get("text")) {
                (Some("text"), Some(Value::String(t))) => Ok(t.as_str()),
                _ => Err(format!(
                    "`messages[{i}].content` holds {p}, not a text part ({{\"type\": \"text\", \"text\": ...}})"
                )),
            })
            .collect::<Result<Vec<_>, _>>()?
            .concat(),
        None | Some(Value::Null) => String::new(),
        Some(v) => {
            return Err(format!(
                "`messages[{i}].content` is {v}, not a string or text parts"
            ));
        }
    };
    Ok((role.to_string(), content))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/traces/mooncake-sample.jsonl"
    );

    fn first_error(lines: &[&str]) -> String {
        parse_trace(Path::new("t.jsonl"), &lines.join("\n"))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn the_sample_parses_and_a_bad_line_names_file_line_and_field() {
        let trace = read_trace(Path::new(SAMPLE)).unwrap();
        assert_eq!(trace.len(), 50);
        assert!(
            trace
                .windows(2)
                .all(|w| w[0].timestamp_ms <= w[1].timestamp_ms)
        );
        let good =
            r#"{"timestamp": 0, "input_length": 20, "output_length": 3, "hash_ids": [1, 2]}"#;
        let bad_type =
            r#"{"timestamp": 5, "input_length": "x", "output_length": 3, "hash_ids": [1]}"#;
        let e = first_error(&[good, "", bad_type]);
        assert!(e.contains("t.jsonl:3: `input_length`"), "{e}");
        let e = first_error(&[good, r#"{"timestamp": 5, "output_length": 3}"#]);
        assert!(
            e.contains("t.jsonl:2: no `input_length`, `text_input` or `messages`"),
            "{e}"
        );
        let e = first_error(&[good, "{\"timestamp\": "]);
        assert!(e.contains("t.jsonl:2:14: EOF while parsing"), "{e}");
        let ok = parse_trace(Path::new("t"), good).unwrap();
        assert_eq!(ok[0].hash_ids, vec![1, 2]);
        assert_eq!((ok[0].input_length, ok[0].output_length), (20, 3));
        assert_eq!(ok[0].literal, None);
        // AIPerf's minimal form: `input_length` without `hash_ids` is a unique prompt.
        let ok = parse_trace(
            Path::new("t"),
            r#"{"timestamp": 1.0, "input_length": 7, "output_length": 2}"#,
        )
        .unwrap();
        assert!(ok[0].hash_ids.is_empty());
    }

    #[test]
    fn literal_prompts_come_as_text_input_or_messages_and_exclude_the_rest() {
        let lines = [
            r#"{"timestamp": 0, "text_input": "What is the capital of France?", "output_length": 20}"#,
            r#"{"timestamp": 3, "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": " there"}]}], "output_length": 4}"#,
        ];
        let t = parse_trace(Path::new("t"), &lines.join("\n")).unwrap();
        assert_eq!(
            t[0].literal,
            Some(Literal::Text("What is the capital of France?".into()))
        );
        assert_eq!(t[0].input_length, 0);
        let m = t[1].literal.as_ref().unwrap();
        assert_eq!(
            m.messages().unwrap(),
            vec![
                ("system".to_string(), "Be brief.".to_string()),
                ("user".to_string(), "Hi there".to_string())
            ]
        );
        assert_eq!(m.text(), "Be brief.\nHi there");
        for (line, want) in [
            (
                r#"{"timestamp": 0, "text_input": "x", "input_length": 3, "output_length": 1}"#,
                "t.jsonl:1: `input_length`, `text_input` and `messages` exclude each other",
            ),
            (
                r#"{"timestamp": 0, "text_input": "x", "hash_ids": [1], "output_length": 1}"#,
                "t.jsonl:1: `hash_ids` goes with `input_length` only",
            ),
            (
                r#"{"timestamp": 0, "messages": [], "output_length": 1}"#,
                "t.jsonl:1: `messages` is empty",
            ),
            (
                r#"{"timestamp": 0, "messages": [{"content": "x"}], "output_length": 1}"#,
                "`messages[0]` has no `role`",
            ),
            (
                r#"{"timestamp": 0, "messages": [{"role": "user", "content": "x"}], "tools": [{}], "output_length": 1}"#,
                "`tools` is not supported",
            ),
            (
                r#"{"timestamp": 0, "text_input": "x"}"#,
                "t.jsonl:1: no `output_length`",
            ),
        ] {
            let e = first_error(&[line]);
            assert!(e.contains(want), "{e}");
        }
    }
}
