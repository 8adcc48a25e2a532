//! Prompt sources: random token ids, ShareGPT JSON, plain-text corpora, generated shared
//! prefixes, JSONL prompts. Each produces prompts of exact token lengths through the model's
//! tokenizer. Knows nothing of task files or the archive.

use std::path::PathBuf;

use serde::Serialize;

/// Which prompts to send, and how long they and their answers are (in tokens).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DatasetSpec {
    /// Random token ids, vLLM's `random` dataset.
    Random {
        input_len: u32,
        output_len: u32,
        /// Lengths vary uniformly in `[len * (1 - r), len * (1 + r)]`.
        range_ratio: f64,
        /// A fixed random prefix of this many tokens shared by every prompt.
        prefix_len: u32,
    },
    /// ShareGPT-format JSON (conversations); lengths from the data unless overridden.
    ShareGpt {
        path: PathBuf,
        input_len: Option<u32>,
        output_len: Option<u32>,
    },
    /// Plain-text files (Gutenberg-style) cut to exact token lengths.
    Text {
        path: PathBuf,
        input_len: u32,
        output_len: u32,
    },
    /// SGLang's generated-shared-prefix dataset.
    SharedPrefix {
        num_groups: u32,
        prompts_per_group: u32,
        system_prompt_len: u32,
        question_len: u32,
        output_len: u32,
    },
    /// One JSON object per line with a `prompt` (and optional `output_len`).
    Jsonl {
        path: PathBuf,
        output_len: Option<u32>,
    },
}
