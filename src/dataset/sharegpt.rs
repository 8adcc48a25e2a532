//! ShareGPT-format JSON: a list of `{"conversations": [{"from": "human", "value": ...},
//! {"from": "gpt", "value": ...}, ...]}`, read as single prompts here (the `conversation`
//! dataset reads every turn, as sessions). The first turn is the prompt, the second the reference
//! answer whose token count is the output length (unless overridden). With an input length, the
//! MoAI fork's rule: concatenate prompts until long enough and cut to exactly that many tokens.

use std::path::Path;

use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use serde::Deserialize;

use super::synth::cut_exact;
use super::{DatasetError, Prompt, Tokenizer};

#[derive(Deserialize)]
struct Entry {
    #[serde(default)]
    conversations: Vec<Turn>,
}

#[derive(Deserialize)]
struct Turn {
    /// `human`, `gpt` or `system` (absent in some copies).
    #[serde(default)]
    from: String,
    value: String,
}

/// Every conversation of a ShareGPT file, as `(from, value)` messages in order.
pub(crate) fn read_conversations(path: &Path) -> Result<Vec<Vec<(String, String)>>, DatasetError> {
    let raw = std::fs::read_to_string(path).map_err(|source| DatasetError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let entries: Vec<Entry> = serde_json::from_str(&raw).map_err(|e| DatasetError::Format {
        path: path.to_path_buf(),
        message: format!(
            "line {}: not a ShareGPT JSON list of conversations: {e}",
            e.line()
        ),
    })?;
    Ok(entries
        .into_iter()
        .map(|e| {
            e.conversations
                .into_iter()
                .map(|t| (t.from, t.value))
                .collect()
        })
        .collect())
}

/// vLLM's `is_valid_sequence` bounds for data-driven lengths.
const MIN_LEN: u32 = 4;
const MAX_PROMPT_LEN: u32 = 1024;
const MAX_TOTAL_LEN: u32 = 2048;

pub(crate) fn sharegpt(
    tok: &Tokenizer,
    path: &Path,
    input_len: Option<u32>,
    output_len: Option<u32>,
    num_prompts: usize,
    seed: u64,
) -> Result<Vec<Prompt>, DatasetError> {
    let mut pairs: Vec<(String, String)> = read_conversations(path)?
        .into_iter()
        .filter(|c| c.len() >= 2)
        .map(|mut c| {
            let answer = c.swap_remove(1).1;
            (c.swap_remove(0).1, answer)
        })
        .collect();
    let mut rng = StdRng::seed_from_u64(seed);
    pairs.shuffle(&mut rng);
    let mut prompts = Vec::with_capacity(num_prompts);
    match input_len {
        Some(len) => {
            // Concatenate consecutive prompts until `len` tokens, then cut exactly.
            let len = len as usize;
            let mut ids: Vec<u32> = Vec::new();
            let mut pending_out: Option<u32> = None;
            for (prompt, answer) in pairs.iter().cycle().take(pairs.len() * (num_prompts + 1)) {
                if prompts.len() == num_prompts {
                    break;
                }
                if pending_out.is_none() {
                    pending_out = Some(match output_len {
                        Some(n) => n,
                        None => tok.count(answer)?.max(1) as u32,
                    });
                }
                ids.extend(tok.encode(prompt)?);
                ids.extend(tok.encode("\n")?);
                if ids.len() >= len + len / 8 + 8 {
                    let (text, n) = cut_exact(tok, &ids, len)?;
                    prompts.push(Prompt {
                        text,
                        prompt_len: n as u32,
                        output_len: pending_out.take().unwrap_or(1),
                        at_us: None,
                        session: None,
                        messages: None,
                    });
                    ids.clear();
                }
            }
        }
        None => {
            for (prompt, answer) in &pairs {
                if prompts.len() == num_prompts {
                    break;
                }
                let prompt_len = tok.count(prompt)? as u32;
                let out = match output_len {
                    Some(n) => n,
                    None => tok.count(answer)? as u32,
                };
                let valid = prompt_len >= MIN_LEN
                    && (output_len.is_some() || out >= MIN_LEN)
                    && prompt_len <= MAX_PROMPT_LEN
                    && prompt_len + out <= MAX_TOTAL_LEN;
                if valid {
                    prompts.push(Prompt {
                        text: prompt.clone(),
                        prompt_len,
                        output_len: out,
                        at_us: None,
                        session: None,
                        messages: None,
                    });
                }
            }
        }
    }
    if prompts.is_empty() {
        return Err(DatasetError::Format {
            path: path.to_path_buf(),
            message: "no usable conversations (need a prompt and an answer of 4+ tokens)".into(),
        });
    }
    let n = prompts.len();
    Ok(prompts
        .into_iter()
        .cycle()
        .take(num_prompts.max(n).min(num_prompts))
        .collect())
}
