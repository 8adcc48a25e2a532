//! One measurement, shared by a sweep point (measure) and `orchestrate bench`: the prompts
//! built through the tokenizer (through the chat template for the chat endpoint), then the
//! client driven here or on the client host, its records handed to the observer; and the
//! prompts' blocks kept for the workload's ideal prefix-cache hit rate (a conversation's
//! turns are counted through the chat template as they are sent, and their blocks kept then).
//!
//! Does not own: where records go (the observer), the summary, or the archive.

use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use crate::client::{self, ClientConfig, ClientError, Observer, RunOutcome, TurnCounter};
use crate::dataset::{self, ChatCounter, ChatCounting, DatasetError, DatasetSpec, Tokenizer};
use crate::fleet::RemoteSite;
use crate::load::Endpoint;
use crate::metrics::{self, PromptBlocks, Summary, TimeSeries};

/// What one measurement sends.
pub struct Sample<'a> {
    pub config: &'a ClientConfig,
    pub dataset: &'a DatasetSpec,
    pub tokenizer: Arc<Tokenizer>,
    /// How many prompts to build (a duration-bound load reuses them cyclically).
    pub prompts: usize,
    /// Where the client runs: `None` here, else on the client host.
    pub site: Option<&'a RemoteSite>,
    /// Tokens per block of the workload's ideal prefix-cache hit rate.
    pub prefix_block_tokens: u32,
}

/// What one measurement gave.
pub struct Sampled {
    pub outcome: RunOutcome,
    /// Chat endpoint: how the input lengths were counted.
    pub chat_counting: Option<ChatCounting>,
    /// The prompts' blocks, for the ideal prefix-cache hit rate; `None` when the prompts
    /// could not be tokenized again (a warning says why).
    pub prompt_blocks: Option<PromptBlocks>,
}

impl Sampled {
    /// Add the server's prefix-cache hit rate and the workload's ideal one to `summary`.
    pub fn prefix_cache(&self, summary: &mut Summary) {
        let server = self
            .outcome
            .server_metrics
            .as_ref()
            .and_then(|w| w.prefix_cache_hit_rate);
        let ideal = self.prompt_blocks.as_ref().and_then(|b| {
            metrics::ideal_hit_rate(&self.outcome.records, b).map(|r| (r, b.block_tokens()))
        });
        summary.set_prefix_cache(server, ideal);
    }

    /// The point's time series, at `config`'s interval and window; `None` when it is off.
    pub fn time_series(&self, config: &ClientConfig) -> Option<TimeSeries> {
        let interval = config.timeseries_interval?;
        Some(metrics::time_series(
            &self.outcome.records,
            interval,
            (config.shape.warmup, config.shape.cooldown),
            self.outcome.server_series.clone(),
        ))
    }
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
    let block = s.prefix_block_tokens;
    let (prompts, chat_counting, mut prompt_blocks, turns) =
        tokio::task::spawn_blocking(move || {
            let (prompts, counting) = if chat {
                // Input lengths through the chat template, as the server counts them.
                dataset::generate_chat(&spec, &tok, num, seed).map(|(p, c)| (p, Some(c)))?
            } else {
                dataset::generate(&spec, &tok, num, seed).map(|p| (p, None))?
            };
            if prompts
                .iter()
                .any(|p| p.session.as_ref().is_some_and(|s| !s.standalone))
            {
                // Conversations: what a turn sends is known once the answers before it are.
                let counter = ChatCounter::new(tok.clone())?.map(|counter| {
                    Arc::new(TurnIds {
                        counter,
                        blocks: Mutex::new(PromptBlocks::per_request(block)),
                    })
                });
                return Ok((prompts, counting, None, counter));
            }
            let blocks = match dataset::prompt_ids(&prompts, &tok, chat) {
                Ok(ids) => Some(PromptBlocks::new(block, &ids)),
                Err(e) => {
                    tracing::warn!("no ideal prefix-cache hit rate: the prompts' token ids: {e}");
                    None
                }
            };
            Ok::<_, DatasetError>((prompts, counting, blocks, None))
        })
        .await
        .map_err(SampleError::Panicked)?
        .map_err(SampleError::Prompts)?;
    on_prompts(chat_counting.as_ref());
    let outcome = match s.site {
        None => {
            let mut config = s.config.clone();
            if let Some(t) = &turns {
                config.turn_counter = Some(t.clone() as Arc<dyn TurnCounter>);
            }
            client::run(&config, prompts, observer, cancel)
                .await
                .map_err(SampleError::Client)?
        }
        Some(site) => site
            .run(s.config, prompts, observer, cancel)
            .await
            .map_err(|e| SampleError::Remote(e.to_string()))?,
    };
    if let Some(t) = turns {
        prompt_blocks = t.blocks.lock().ok().map(|b| PromptBlocks::clone(&b));
    }
    Ok(Sampled {
        outcome,
        chat_counting,
        prompt_blocks,
    })
}

/// Conversation turns counted through the chat template as they are sent, their token ids
/// blocks kept (by request index) for the workload's ideal prefix-cache hit rate.
struct TurnIds {
    counter: ChatCounter,
    blocks: Mutex<PromptBlocks>,
}

impl TurnCounter for TurnIds {
    fn count(&self, index: u64, messages: &[(String, String)]) -> Option<u32> {
        let messages: Vec<(&str, &str)> = messages
            .iter()
            .map(|(r, c)| (r.as_str(), c.as_str()))
            .collect();
        let ids = self.counter.ids(&messages).ok()?;
        let n = u32::try_from(ids.len()).ok();
        if let Ok(mut blocks) = self.blocks.lock() {
            blocks.add_request(index, &ids);
        }
        n
    }
}
