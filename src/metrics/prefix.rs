//! The prefix cache measured per point: what the server says it served from its cache
//! (`cached_tokens` per request, summed into the client-side hit rate), and what the workload
//! itself allowed: the ideal hit rate, the share of prompt tokens whose block was already sent
//! earlier in the point, as if the cache were infinite. Achieved over ideal tells a routing or
//! eviction problem from a workload with no reuse. Pure: the prompts' token ids come from the
//! caller (the dataset's tokenizer); the server's own rate from its `/metrics` (client).
//! Definitions: docs/metrics.md, "Prefix cache".

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};

use crate::client::RequestRecord;

pub use crate::load::DEFAULT_PREFIX_BLOCK_TOKENS as DEFAULT_BLOCK_TOKENS;

/// One prompt's full blocks, each named by a hash chained over the blocks before it (so two
/// prompts share a block only when they share everything up to its end), and its length.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Blocks {
    hashes: Vec<u64>,
    tokens: u32,
}

/// The blocks of every prompt of a point, by prompt index (or, for conversations, whose
/// turns' prompts are known only once sent, by request index).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptBlocks {
    block_tokens: u32,
    prompts: Vec<Blocks>,
    /// Conversations: blocks by request index instead.
    requests: HashMap<u64, Blocks>,
}

impl PromptBlocks {
    /// Blocks of `block_tokens` tokens (at least 1) of each prompt's token ids, as the
    /// server sees them (through the chat template on the chat endpoint).
    pub fn new(block_tokens: u32, ids: &[Vec<u32>]) -> Self {
        let block_tokens = block_tokens.max(1);
        Self {
            block_tokens,
            prompts: ids
                .iter()
                .map(|ids| Blocks::of(ids, block_tokens))
                .collect(),
            requests: HashMap::new(),
        }
    }

    /// No blocks yet; each request's are added by request index as it is sent
    /// (conversation turns: [`PromptBlocks::add_request`]).
    pub fn per_request(block_tokens: u32) -> Self {
        Self {
            block_tokens: block_tokens.max(1),
            prompts: Vec::new(),
            requests: HashMap::new(),
        }
    }

    /// The blocks of request `index`'s token ids (only their hashes are kept).
    pub fn add_request(&mut self, index: u64, ids: &[u32]) {
        self.requests
            .insert(index, Blocks::of(ids, self.block_tokens));
    }

    /// The blocks of what `r` sent.
    fn of(&self, r: &RequestRecord) -> Option<&Blocks> {
        if self.requests.is_empty() {
            self.prompts.get(r.prompt_index as usize)
        } else {
            self.requests.get(&r.index)
        }
    }

    /// Tokens per block.
    pub fn block_tokens(&self) -> u32 {
        self.block_tokens
    }
}

impl Blocks {
    fn of(ids: &[u32], block_tokens: u32) -> Self {
        Blocks {
            hashes: chained_hashes(ids, block_tokens),
            tokens: u32::try_from(ids.len()).unwrap_or(u32::MAX),
        }
    }
}

/// The hashes of the full blocks of `ids` (a partial last block is never cached), each
/// chained over its predecessor's.
fn chained_hashes(ids: &[u32], block_tokens: u32) -> Vec<u64> {
    let mut parent = 0u64;
    ids.chunks_exact(block_tokens as usize)
        .map(|block| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            parent.hash(&mut h);
            block.hash(&mut h);
            parent = h.finish();
            parent
        })
        .collect()
}

/// The ideal hit rate of the point's completed requests, taken in the order they were sent:
/// Σ tokens of the leading blocks some earlier request already sent / Σ prompt tokens (the
/// client's count). As vLLM, only blocks wholly before the last prompt token count (the last
/// token is always computed). `None` without a completed request whose prompt is known.
pub fn ideal_hit_rate(records: &[RequestRecord], blocks: &PromptBlocks) -> Option<f64> {
    let mut sent: Vec<&RequestRecord> = records
        .iter()
        .filter(|r| r.outcome.is_completed())
        .collect();
    sent.sort_by_key(|r| (r.sent_us, r.index));
    let b = blocks.block_tokens;
    let mut seen: HashSet<u64> = HashSet::new();
    let (mut hit, mut total) = (0u64, 0u64);
    for r in sent {
        let Some(p) = blocks.of(r) else {
            continue;
        };
        let most = (p.tokens.saturating_sub(1) / b) as usize;
        let leading = p
            .hashes
            .iter()
            .take(most)
            .take_while(|h| seen.contains(h))
            .count();
        hit += leading as u64 * u64::from(b);
        total += u64::from(p.tokens);
        seen.extend(p.hashes.iter().copied());
    }
    (total > 0).then(|| hit as f64 / total as f64)
}

/// Σ cached prompt tokens and the client-side hit rate (Σ cached / Σ input tokens) over the
/// completed requests that reported `cached_tokens`; `None` when none did.
pub(super) fn client_hit_rate(records: &[RequestRecord]) -> (Option<u64>, Option<f64>) {
    let (mut cached, mut prompt, mut reported) = (0u64, 0u64, false);
    for r in records.iter().filter(|r| r.outcome.is_completed()) {
        if let Some(c) = r.usage.cached_tokens {
            reported = true;
            cached += u64::from(c);
            prompt += r.input_tokens();
        }
    }
    if !reported {
        return (None, None);
    }
    (
        Some(cached),
        (prompt > 0).then(|| (cached as f64 / prompt as f64).min(1.0)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{ChunkTokens, RequestOutcome, Usage};

    fn rec(index: u64, prompt_index: u32, cached: Option<u32>, prompt: u32) -> RequestRecord {
        RequestRecord {
            index,
            prompt_index,
            session: None,
            turn: None,
            scheduled_us: 0,
            dispatched_us: 0,
            // Sent in reverse index order: the ideal follows the send order.
            sent_us: 1000 - index,
            headers_us: None,
            prompt_len: prompt,
            output_len: 1,
            usage: Usage {
                prompt_tokens: Some(prompt),
                cached_tokens: cached,
                ..Usage::default()
            },
            tokenizer_output_tokens: None,
            generated_text: None,
            chunk_tokens: ChunkTokens::Usage,
            chunks: vec![crate::client::Chunk { t_us: 1, tokens: 1 }],
            first_content_us: Some(1),
            end_us: 2000,
            outcome: RequestOutcome::Completed,
        }
    }

    #[test]
    fn ideal_counts_leading_blocks_sent_before() {
        // Prompt 0: 40 tokens; prompt 1 shares its first 20; prompt 2 shares nothing.
        let a: Vec<u32> = (0..40).collect();
        let mut b: Vec<u32> = (0..20).collect();
        b.extend(100..120);
        let c: Vec<u32> = (500..540).collect();
        let blocks = PromptBlocks::new(8, &[a, b, c]);
        // Sent order (by sent_us): index 2 (prompt 0), then 1 (prompt 1), then 0 (prompt 0).
        let records = [
            rec(2, 0, None, 40),
            rec(1, 1, None, 40),
            rec(0, 0, None, 40),
        ];
        // Prompt 1 after prompt 0: 2 whole blocks of 8 shared (16 of its 20 shared tokens);
        // prompt 0 again: 4 of its 5 blocks (the last token's block is computed).
        let ideal = ideal_hit_rate(&records, &blocks).unwrap();
        assert!((ideal - (16.0 + 32.0) / 120.0).abs() < 1e-12, "{ideal}");
        // Unrelated prompts never hit, however often the point sends other ones.
        let records = [rec(1, 2, None, 40), rec(0, 1, None, 40)];
        assert_eq!(ideal_hit_rate(&records, &blocks), Some(0.0));
        // A failed request is not counted, and nothing completed gives no figure.
        let mut failed = rec(0, 0, None, 40);
        failed.outcome = RequestOutcome::Cancelled;
        assert_eq!(ideal_hit_rate(&[failed], &blocks), None);
    }

    #[test]
    fn conversation_turns_are_looked_up_by_request() {
        // Turn 1 (request 5) repeats turn 0's 24 tokens (request 9) and adds 16; both are
        // prompt 0 of the dataset, which says nothing of what was sent.
        let t0: Vec<u32> = (0..24).collect();
        let t1: Vec<u32> = (0..40).collect();
        let mut blocks = PromptBlocks::per_request(8);
        blocks.add_request(9, &t0);
        blocks.add_request(5, &t1);
        let (mut a, mut b) = (rec(9, 0, None, 24), rec(5, 0, None, 40));
        (a.sent_us, b.sent_us) = (1, 2);
        let ideal = ideal_hit_rate(&[b, a], &blocks).unwrap();
        assert!((ideal - 24.0 / 64.0).abs() < 1e-12, "{ideal}");
    }

    #[test]
    fn client_rate_sums_only_requests_that_reported() {
        let records = [
            rec(0, 0, Some(0), 100),
            rec(1, 0, Some(96), 100),
            rec(2, 0, None, 100),
        ];
        assert_eq!(client_hit_rate(&records), (Some(96), Some(0.48)));
        assert_eq!(client_hit_rate(&records[2..]), (None, None));
    }
}
