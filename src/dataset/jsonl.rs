//! JSONL prompts: one JSON object per line with a `prompt` string and an optional `output_len`.

use std::path::Path;

use super::{DatasetError, Prompt, Tokenizer};

pub(crate) fn jsonl(
    tok: &Tokenizer,
    path: &Path,
    output_len: Option<u32>,
    num_prompts: usize,
    _seed: u64,
) -> Result<Vec<Prompt>, DatasetError> {
    let raw = std::fs::read_to_string(path).map_err(|source| DatasetError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let format = |line: usize, message: String| DatasetError::Format {
        path: path.to_path_buf(),
        message: format!("line {line}: {message}"),
    };
    let mut prompts = Vec::new();
    for (i, line) in raw.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format(i + 1, e.to_string()))?;
        let text = value
            .get("prompt")
            .and_then(|v| v.as_str())
            .ok_or_else(|| format(i + 1, "expected an object with a `prompt` string".into()))?;
        let out = match (output_len, value.get("output_len").and_then(|v| v.as_u64())) {
            (Some(n), _) => n,
            (None, Some(n)) => n as u32,
            (None, None) => {
                return Err(format(
                    i + 1,
                    "no `output_len`; add one per line or pass an output length".into(),
                ));
            }
        };
        prompts.push(Prompt {
            text: text.to_string(),
            prompt_len: tok.count(text)? as u32,
            output_len: out,
            at_us: None,
            session: None,
            messages: None,
        });
    }
    if prompts.is_empty() {
        return Err(format(0, "no prompts".into()));
    }
    Ok(prompts.iter().cycle().take(num_prompts).cloned().collect())
}
