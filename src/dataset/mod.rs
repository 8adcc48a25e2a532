//! Prompt sources: random token ids, ShareGPT JSON, plain-text corpora, generated shared
//! prefixes, JSONL prompts, Mooncake traces (replayed at their timestamps), multi-turn
//! conversations (sessions whose turns the client sends with their history) and agentic
//! traces (Mooncake lines with sessions, and Weka's per-session files, replayed turn after
//! turn). Each produces prompts of exact token lengths through the model's
//! tokenizer. Knows nothing of task files, the client's wire format or the archive.

mod agentic;
mod chat;
mod conversation;
mod corpus;
mod dist;
mod jsonl;
mod mooncake;
mod random;
mod server_tokenizer;
mod sharegpt;
mod synth;
mod tokenizer;
mod trace_read;
mod weka;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use chat::{ChatCounting, ChatTemplate};
pub use conversation::{ChatCounter, Conversation, DEFAULT_NUM_TURNS, SessionTurn, turn_messages};
pub use dist::Dist;
pub use mooncake::{DEFAULT_BLOCK_SIZE, Replay, block_ids, trace_ids};
pub use tokenizer::{Tokenizer, TokenizerSource, hf_hub_cache};
pub use trace_read::{Literal, TraceRequest, read_trace};

/// One prompt to send: its text, its exact length in tokens of the model's tokenizer, and how
/// many tokens the answer should have.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prompt {
    /// The prompt text (sent as `prompt`, or as the one user message on the chat endpoint).
    pub text: String,
    /// Tokens the server sees, verified by re-tokenizing: of `text` (no special tokens) for
    /// completions; of the conversation rendered through the chat template for chat prompts
    /// (`generate_chat`).
    pub prompt_len: u32,
    /// Requested output tokens (`max_tokens`).
    pub output_len: u32,
    /// Trace replay: when to send it, in microseconds from the run start (the trace's
    /// timestamp scaled by its speedup); `None` follows the point's arrival rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_us: Option<u64>,
    /// Conversations: the session and turn this prompt is (`text` is then the turn's user
    /// message, sent after the history so far); `None` for independent prompts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionTurn>,
    /// A trace's literal chat messages, `(role, content)`, sent as they are on the chat
    /// endpoint (AIPerf's `messages` lines); `text` is then their contents joined, for
    /// display only. `None`: the prompt is `text`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<(String, String)>>,
}

/// Errors building prompts.
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    #[error(
        "tokenizer for model `{model}` is not in the local Hugging Face cache {searched}; pass --tokenizer PATH/TO/tokenizer.json, or download it there"
    )]
    TokenizerNotFound { model: String, searched: PathBuf },
    #[error("failed to load tokenizer {path}: {message}")]
    TokenizerLoad { path: PathBuf, message: String },
    #[error("tokenizer failed: {0}")]
    Tokenize(String),
    #[error("tokenizer server {url}: {message}")]
    Server { url: String, message: String },
    #[error("cannot read dataset {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("dataset {path}: {message}")]
    Format { path: PathBuf, message: String },
    /// One line of a line-oriented file (a trace): `file:line[:column]: message`.
    #[error("dataset {}:{line}{}: {message}", path.display(), column.map(|c| format!(":{c}")).unwrap_or_default())]
    Line {
        path: PathBuf,
        line: usize,
        column: Option<usize>,
        message: String,
    },
    #[error("invalid dataset parameters: {0}")]
    Invalid(String),
}

/// Build `num_prompts` prompts from `spec`, sized with `tokenizer`, reproducibly from `seed`,
/// for the completions endpoint (a trace's chat `messages` lines need the chat endpoint:
/// `generate_chat`). Blocking (tokenization); call it off the async runtime.
pub fn generate(
    spec: &DatasetSpec,
    tokenizer: &Tokenizer,
    num_prompts: usize,
    seed: u64,
) -> Result<Vec<Prompt>, DatasetError> {
    let prompts = build(spec, tokenizer, num_prompts, seed)?;
    if prompts.iter().any(|p| p.messages.is_some()) {
        return Err(DatasetError::Invalid(
            "the trace has `messages` lines, which only the chat endpoint can send: use --endpoint /v1/chat/completions (task file: `endpoint: chat`)".into(),
        ));
    }
    Ok(prompts)
}

/// The prompts of `spec`, for either endpoint.
fn build(
    spec: &DatasetSpec,
    tokenizer: &Tokenizer,
    num_prompts: usize,
    seed: u64,
) -> Result<Vec<Prompt>, DatasetError> {
    match spec {
        DatasetSpec::Random {
            input_len,
            output_len,
            range_ratio,
            prefix_len,
        } => random::random(
            tokenizer,
            &random::RandomParams {
                input_len: *input_len,
                output_len: *output_len,
                range_ratio: *range_ratio,
                prefix_len: *prefix_len,
            },
            num_prompts,
            seed,
        ),
        DatasetSpec::SharedPrefix {
            num_groups,
            prompts_per_group,
            system_prompt_len,
            question_len,
            output_len,
        } => random::shared_prefix(
            tokenizer,
            &random::SharedPrefixParams {
                num_groups: *num_groups,
                prompts_per_group: *prompts_per_group,
                system_prompt_len: *system_prompt_len,
                question_len: *question_len,
                output_len: *output_len,
            },
            num_prompts,
            seed,
        ),
        DatasetSpec::ShareGpt {
            path,
            input_len,
            output_len,
        } => sharegpt::sharegpt(tokenizer, path, *input_len, *output_len, num_prompts, seed),
        DatasetSpec::Text {
            path,
            input_len,
            output_len,
        } => corpus::text(tokenizer, path, *input_len, *output_len, num_prompts, seed),
        DatasetSpec::Jsonl { path, output_len } => {
            jsonl::jsonl(tokenizer, path, *output_len, num_prompts, seed)
        }
        DatasetSpec::Mooncake { path, replay } => {
            let trace = read_trace(path)?;
            if trace.iter().any(|r| r.session_id.is_some()) {
                agentic::sessions(tokenizer, trace, replay, (num_prompts, seed), true)
            } else {
                mooncake::mooncake(tokenizer, trace, replay, num_prompts, seed)
            }
        }
        DatasetSpec::Conversation(c) => conversation::conversation(tokenizer, c, num_prompts, seed),
        DatasetSpec::Weka { path, speedup } => {
            let (trace, block_size) = weka::read_weka(path)?;
            let replay = Replay {
                block_size,
                speedup: *speedup,
                start: std::time::Duration::ZERO,
                duration: None,
            };
            agentic::sessions(tokenizer, trace, &replay, (num_prompts, seed), false)
        }
    }
}

/// Prompts for the chat endpoint: like `generate`, then fitted to the tokenizer's chat template
/// so that the rendered conversation has the requested length (datasets with a requested
/// input length) or so that `prompt_len` is the rendered length (the others). Blocking.
pub fn generate_chat(
    spec: &DatasetSpec,
    tokenizer: &Tokenizer,
    num_prompts: usize,
    seed: u64,
) -> Result<(Vec<Prompt>, ChatCounting), DatasetError> {
    let prompts = build(spec, tokenizer, num_prompts, seed)?;
    chat::fit(prompts, tokenizer, spec.has_input_len())
}

/// The token ids the server sees for each prompt: the text's, or on the chat endpoint the
/// conversation rendered through the model's chat template (the raw text's when there is no
/// local template). Each distinct text is tokenized once. Blocking.
pub fn prompt_ids(
    prompts: &[Prompt],
    tokenizer: &Tokenizer,
    chat: bool,
) -> Result<Vec<Vec<u32>>, DatasetError> {
    let template = if chat {
        tokenizer.chat_template()?
    } else {
        None
    };
    let mut done: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    let mut out: Vec<Vec<u32>> = Vec::with_capacity(prompts.len());
    // Plain texts through a tokenizer whose ids add up across spaces: word by word.
    let mut words = if template.is_none() {
        tokenizer.word_cache()
    } else {
        None
    };
    for p in prompts {
        if let Some(messages) = &p.messages {
            let messages: Vec<(&str, &str)> = messages
                .iter()
                .map(|(r, c)| (r.as_str(), c.as_str()))
                .collect();
            out.push(match &template {
                Some(t) => tokenizer.encode(&t.render(&messages)?)?,
                None => tokenizer.encode(&p.text)?,
            });
            continue;
        }
        if let Some(&i) = done.get(p.text.as_str()) {
            let ids = out[i].clone();
            out.push(ids);
            continue;
        }
        let ids = match (&template, words.as_mut()) {
            (Some(t), _) => tokenizer.encode(&t.render_user(&p.text)?)?,
            (None, Some(w)) => {
                let mut ids = Vec::new();
                w.extend(&p.text, &mut ids)?;
                ids
            }
            (None, None) => tokenizer.encode(&p.text)?,
        };
        done.insert(&p.text, out.len());
        out.push(ids);
    }
    Ok(out)
}

/// Which prompts to send, and how long they and their answers are (in tokens).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// Mooncake's JSONL trace, replayed at its timestamps with prompts sharing tokens where
    /// the trace shares hash ids; lines with a `session_id` (AIPerf's agentic traces) are
    /// replayed as sessions.
    Mooncake { path: PathBuf, replay: Replay },
    /// Multi-turn sessions, synthesized or read from ShareGPT; each turn is sent with the
    /// history so far, the server's real answers included.
    Conversation(Conversation),
    /// Weka's agentic-coding traces: one JSON file per session (a file, or a directory of
    /// them), replayed as agent sessions started at the point's rate.
    Weka {
        path: PathBuf,
        /// Think times are divided by this (2 = twice as fast).
        speedup: f64,
    },
}

impl DatasetSpec {
    /// Whether the dataset is asked for an input length (else lengths come from the data).
    pub fn has_input_len(&self) -> bool {
        match self {
            DatasetSpec::Random { .. } | DatasetSpec::Text { .. } => true,
            DatasetSpec::SharedPrefix { .. } => true,
            DatasetSpec::ShareGpt { input_len, .. } => input_len.is_some(),
            // The trace's blocks are kept as they are; the chat template adds its own tokens.
            DatasetSpec::Jsonl { .. } | DatasetSpec::Mooncake { .. } => false,
            DatasetSpec::Weka { .. } => false,
            // A turn's length is its history's, counted as it is sent.
            DatasetSpec::Conversation(_) => false,
        }
    }
}
