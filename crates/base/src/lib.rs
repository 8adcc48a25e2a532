//! The leaf layer that `orchestrate` and its mock server (`orchestrate-mock`) share, with no
//! domain knowledge of either: `fetch` (one HTTP/1.1 request on the cold paths), `units`
//! (durations, sizes, numbers, shell quoting, error chains) and `chat_template` (a model's
//! chat template, rendered as Hugging Face does). `orchestrate` re-exports `fetch` and
//! `units` at its root and `ChatTemplate` from its `dataset` module.

pub mod chat_template;
pub mod fetch;
pub mod units;
