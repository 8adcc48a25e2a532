//! One request: what every request task of a run shares (target, pool, bodies, deadlines,
//! counters), and sending one request on a pooled connection into its record (the answer's
//! text handed back when a conversation needs it for its next turn).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::conn::Pool;
use super::exchange::{Ask, Deadlines, Watch, exchange};
use super::record::{ChunkTokens, RequestOutcome, RequestRecord, Usage};
use super::request::BodyTemplate;
use super::selfcheck::ReadDelays;
use super::sse::unescape;
use super::target::Target;
use super::{ClientConfig, Prompt, TurnCounter};

pub(super) fn us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

pub(super) struct Shared {
    pub(super) target: Target,
    pub(super) pool: Pool,
    pub(super) bodies: Vec<bytes::Bytes>,
    pub(super) prompts: Vec<Prompt>,
    pub(super) deadlines: Deadlines,
    pub(super) t0: Instant,
    pub(super) cancel: CancellationToken,
    pub(super) cutoff: CancellationToken,
    pub(super) in_flight: AtomicU64,
    pub(super) max_in_flight: AtomicU64,
    pub(super) reads: ReadDelays,
    pub(super) check_every: u64,
    /// Keep every answer's text in its record (`--save-detailed`'s `generated_texts`).
    pub(super) keep_texts: bool,
    /// Prefix of every `X-Request-Id` (`<run_tag>-<index>`).
    pub(super) run_tag: String,
    pub(super) tokenizer: Option<Arc<tokenizers::Tokenizer>>,
    /// The run's config (conversation turns build their bodies as they go).
    pub(super) config: ClientConfig,
    /// Conversations: the next request index (turns take theirs when they are sent).
    pub(super) next_index: AtomicU64,
    /// Conversations: counts each turn's prompt as the server does.
    pub(super) counter: Option<Arc<dyn TurnCounter>>,
}

/// Where and what a run sends.
pub(super) struct Issue {
    pub(super) target: Target,
    pub(super) pool: Pool,
    pub(super) bodies: Vec<bytes::Bytes>,
    pub(super) prompts: Vec<Prompt>,
}

impl Shared {
    /// What every request task reads, from the config; `started` is the run start (monotonic
    /// and wall clock).
    pub(super) fn new(
        config: &ClientConfig,
        issue: Issue,
        started: (Instant, chrono::DateTime<chrono::Utc>),
        cancel: &CancellationToken,
    ) -> Self {
        let Issue {
            target,
            pool,
            bodies,
            prompts,
        } = issue;
        Shared {
            target,
            pool,
            bodies,
            prompts,
            deadlines: Deadlines {
                first_token: config.ttft_timeout,
                total: config.request_timeout,
            },
            t0: started.0,
            cutoff: cancel.child_token(),
            cancel: cancel.clone(),
            in_flight: AtomicU64::new(0),
            max_in_flight: AtomicU64::new(0),
            reads: ReadDelays::default(),
            run_tag: format!("orc{:x}", started.1.timestamp_micros()),
            check_every: config
                .output_check
                .as_ref()
                .map_or(0, |c| u64::from(c.every.max(1))),
            tokenizer: config.output_check.as_ref().map(|c| c.tokenizer.clone()),
            keep_texts: config.keep_texts,
            config: config.clone(),
            next_index: AtomicU64::new(0),
            counter: config.turn_counter.clone(),
        }
    }

    /// The request bodies' shape.
    pub(super) fn template(&self) -> BodyTemplate<'_> {
        BodyTemplate::of(&self.config)
    }
}

/// One request to send.
pub(super) struct Req {
    pub(super) index: u64,
    pub(super) prompt_index: usize,
    pub(super) body: bytes::Bytes,
    pub(super) prompt_len: u32,
    pub(super) output_len: u32,
    /// Hand the answer's text back (a conversation's next turn needs it).
    pub(super) want_text: bool,
}

/// Issue prompt `index` (cyclically) with its prepared body and build its record.
pub(super) async fn one(
    shared: &Shared,
    index: u64,
    scheduled: Instant,
    dispatched: Instant,
) -> RequestRecord {
    let n = shared.prompts.len() as u64;
    let prompt_index = (index % n) as usize;
    let prompt = &shared.prompts[prompt_index];
    let req = Req {
        index,
        prompt_index,
        body: shared.bodies[prompt_index].clone(),
        prompt_len: prompt.prompt_len,
        output_len: prompt.output_len,
        want_text: false,
    };
    send(shared, req, scheduled, dispatched).await.0
}

/// Send one request and build its record; the answer's text too when asked for.
pub(super) async fn send(
    shared: &Shared,
    req: Req,
    scheduled: Instant,
    dispatched: Instant,
) -> (RequestRecord, Option<String>) {
    let index = req.index;
    let base = |sent: Instant, end: Instant, outcome: RequestOutcome| RequestRecord {
        index,
        prompt_index: req.prompt_index as u32,
        session: None,
        turn: None,
        scheduled_us: us(scheduled.saturating_duration_since(shared.t0)),
        dispatched_us: us(dispatched.saturating_duration_since(shared.t0)),
        sent_us: us(sent.saturating_duration_since(shared.t0)),
        headers_us: None,
        prompt_len: req.prompt_len,
        output_len: req.output_len,
        usage: Usage::default(),
        tokenizer_output_tokens: None,
        generated_text: None,
        chunk_tokens: ChunkTokens::AssumedOne,
        chunks: Vec::new(),
        first_content_us: None,
        end_us: us(end.saturating_duration_since(shared.t0)),
        outcome,
    };
    let now = shared.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
    shared.max_in_flight.fetch_max(now, Ordering::Relaxed);
    let conn_start = Instant::now();
    let conn = tokio::select! {
        biased;
        _ = shared.cancel.cancelled() => Err(RequestOutcome::Cancelled),
        _ = shared.cutoff.cancelled() => Err(RequestOutcome::Incomplete),
        c = shared.pool.get(&shared.target) => c.map_err(|e| e.outcome()),
    };
    let (conn, fresh) = match conn {
        Ok(c) => c,
        Err(outcome) => {
            shared.in_flight.fetch_sub(1, Ordering::Relaxed);
            return (base(conn_start, Instant::now(), outcome), None);
        }
    };
    let check = shared.check_every > 0 && index.is_multiple_of(shared.check_every);
    let keep_text = check || shared.keep_texts || req.want_text;
    let ask = Ask {
        body: req.body.clone(),
        request_id: format!("{}-{index}", shared.run_tag),
        expect_chunks: (req.output_len as usize + 1).min(1 << 16),
    };
    let ex = exchange(
        conn,
        fresh,
        &shared.target,
        ask,
        shared.deadlines,
        keep_text,
        Watch {
            cancel: &shared.cancel,
            cutoff: &shared.cutoff,
            reads: &shared.reads,
        },
    )
    .await;
    shared.in_flight.fetch_sub(1, Ordering::Relaxed);
    if let Some(conn) = ex.conn {
        shared.pool.put(conn);
    }
    let mut record = base(ex.sent, ex.end, ex.outcome);
    record.headers_us = ex.headers_us;
    record.usage = ex.usage;
    record.chunk_tokens = ex.chunk_tokens;
    record.chunks = ex.chunks;
    record.first_content_us = ex.first_content_us;
    let text = ex.text.map(|raw| unescape(&raw));
    if let (Some(text), Some(tok), true) = (&text, shared.tokenizer.clone(), check) {
        let text = text.clone();
        let counted = tokio::task::spawn_blocking(move || {
            tok.encode_fast(text.as_str(), false)
                .map(|e| e.get_ids().len() as u32)
                .ok()
        })
        .await
        .ok()
        .flatten();
        record.tokenizer_output_tokens = counted;
    }
    if shared.keep_texts {
        record.generated_text = text.clone();
    }
    (record, text.filter(|_| req.want_text))
}
