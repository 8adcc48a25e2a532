//! One measurement, shared by a sweep point (measure) and `orchestrate bench`: the prompts
//! built through the tokenizer (through the chat template for the chat endpoint), then the
//! client driven here or on the client host, its records handed to the observer.
//!
//! Does not own: where records go (the observer), the summary, or the archive.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::client::{self, ClientConfig, ClientError, Observer, RunOutcome};
use crate::dataset::{self, ChatCounting, DatasetError, DatasetSpec, Tokenizer};
use crate::fleet::RemoteSite;
use crate::load::Endpoint;

/// What one measurement sends.
pub struct Sample<'a> {
    pub config: &'a ClientConfig,
    pub dataset: &'a DatasetSpec,
    pub tokenizer: Arc<Tokenizer>,
    /// How many prompts to build (a duration-bound load reuses them cyclically).
    pub prompts: usize,
    /// Where the client runs: `None` here, else on the client host.
    pub site: Option<&'a RemoteSite>,
}

/// What one measurement gave.
pub struct Sampled {
    pub outcome: RunOutcome,
    /// Chat endpoint: how the input lengths were counted.
    pub chat_counting: Option<ChatCounting>,
}

/// Why a measurement gave nothing.
#[derive(Debug, thiserror::Error)]
pub enum SampleError {
    #[error("prompt generation panicked")]
    Panicked(#[source] tokio::task::JoinError),
    #[error("failed to build prompts")]
    Prompts(#[source] DatasetError),
    #[error(transparent)]
    Client(ClientError),
    /// The client on the client host failed.
    #[error("{0}")]
    Remote(String),
}

/// Build the prompts, call `on_prompts` with how chat lengths were counted (before any
/// request), then drive the client with them.
pub async fn sample(
    s: Sample<'_>,
    on_prompts: impl FnOnce(Option<&ChatCounting>),
    observer: Arc<dyn Observer>,
    cancel: CancellationToken,
) -> Result<Sampled, SampleError> {
    let (spec, tok, num, seed) = (s.dataset.clone(), s.tokenizer, s.prompts, s.config.seed);
    let chat = s.config.endpoint == Endpoint::Chat;
    let (prompts, chat_counting) = tokio::task::spawn_blocking(move || {
        if chat {
            // Input lengths through the chat template, as the server counts them.
            dataset::generate_chat(&spec, &tok, num, seed).map(|(p, c)| (p, Some(c)))
        } else {
            dataset::generate(&spec, &tok, num, seed).map(|p| (p, None))
        }
    })
    .await
    .map_err(SampleError::Panicked)?
    .map_err(SampleError::Prompts)?;
    on_prompts(chat_counting.as_ref());
    let outcome = match s.site {
        None => client::run(s.config, prompts, observer, cancel)
            .await
            .map_err(SampleError::Client)?,
        Some(site) => site
            .run(s.config, prompts, observer, cancel)
            .await
            .map_err(|e| SampleError::Remote(e.to_string()))?,
    };
    Ok(Sampled {
        outcome,
        chat_counting,
    })
}
