//! The mock server's prefix cache: a prompt is cut into blocks of `block_tokens` token ids,
//! each block named by a hash chained over its predecessors' (as vLLM's block hashes, so a
//! block is shared only with prompts that share everything before it), kept up to a capacity
//! in tokens and evicted least recently used. A lookup answers how many leading prompt tokens
//! were cached, which is what the prefill is charged for not computing and what
//! `usage.prompt_tokens_details.cached_tokens` reports. Not here: the token ids (protocol.rs)
//! or the counters on /metrics (prom.rs).

use std::collections::{BTreeMap, HashMap};

/// Prefix cache settings; `capacity_tokens == 0` means no cache (the server's old behaviour).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefixCacheConfig {
    /// Tokens per block (vLLM's `--block-size`; 16 by default there).
    pub block_tokens: u32,
    /// Most tokens held, in whole blocks; 0 turns the cache off.
    pub capacity_tokens: u64,
}

impl Default for PrefixCacheConfig {
    fn default() -> Self {
        Self {
            block_tokens: 16,
            capacity_tokens: 0,
        }
    }
}

impl PrefixCacheConfig {
    /// Whether a cache is kept at all.
    pub fn enabled(&self) -> bool {
        self.capacity_tokens > 0
    }
}

/// The chained hashes of the prompt's full blocks, first block first. A partial last block
/// is never cached (as vLLM).
pub(crate) fn block_hashes(ids: &[u32], block_tokens: u32) -> Vec<u64> {
    let b = block_tokens.max(1) as usize;
    let mut parent: u64 = 0x9e37_79b9_7f4a_7c15;
    ids.chunks_exact(b)
        .map(|block| {
            // FNV-1a over the parent hash and the block's ids: stable across runs.
            let mut h: u64 = 0xcbf2_9ce4_8422_2325;
            for byte in parent.to_le_bytes() {
                h ^= u64::from(byte);
                h = h.wrapping_mul(0x0000_0100_0000_01b3);
            }
            for id in block {
                for byte in id.to_le_bytes() {
                    h ^= u64::from(byte);
                    h = h.wrapping_mul(0x0000_0100_0000_01b3);
                }
            }
            parent = h;
            h
        })
        .collect()
}

/// An LRU set of block hashes bounded in tokens.
#[derive(Debug)]
pub(crate) struct PrefixCache {
    config: PrefixCacheConfig,
    /// Block hash -> the stamp of its last use.
    blocks: HashMap<u64, u64>,
    /// Stamp -> block hash, oldest first.
    by_age: BTreeMap<u64, u64>,
    clock: u64,
}

impl PrefixCache {
    pub(crate) fn new(config: PrefixCacheConfig) -> Self {
        Self {
            config,
            blocks: HashMap::new(),
            by_age: BTreeMap::new(),
            clock: 0,
        }
    }

    /// The most blocks held.
    fn max_blocks(&self) -> usize {
        let b = u64::from(self.config.block_tokens.max(1));
        usize::try_from(self.config.capacity_tokens / b).unwrap_or(usize::MAX)
    }

    fn touch(&mut self, hash: u64) {
        self.clock += 1;
        if let Some(old) = self.blocks.insert(hash, self.clock) {
            self.by_age.remove(&old);
        }
        self.by_age.insert(self.clock, hash);
    }

    /// Look a prompt of `prompt_tokens` tokens up by its block hashes, then hold all its
    /// blocks as most recently used (evicting the oldest beyond the capacity). Returns the
    /// cached tokens: the leading blocks found, as vLLM at most `prompt_tokens - 1` (the last
    /// token is always computed, so a prompt that is wholly cached still prefills a block).
    pub(crate) fn lookup_and_insert(&mut self, hashes: &[u64], prompt_tokens: u32) -> u32 {
        let b = self.config.block_tokens.max(1);
        let most = (prompt_tokens.saturating_sub(1) / b) as usize;
        let hit_blocks = hashes
            .iter()
            .take(most)
            .take_while(|h| self.blocks.contains_key(h))
            .count();
        let max_blocks = self.max_blocks();
        // A prompt longer than the whole cache keeps only its leading blocks. The head is
        // touched last, so a prompt's tail is evicted before its head (as vLLM frees blocks).
        for &h in hashes.iter().take(max_blocks).rev() {
            self.touch(h);
        }
        while self.blocks.len() > max_blocks {
            let Some((_, oldest)) = self.by_age.pop_first() else {
                break;
            };
            self.blocks.remove(&oldest);
        }
        u32::try_from(hit_blocks).unwrap_or(u32::MAX) * b
    }

    /// Blocks held now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.blocks.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(block: u32, capacity: u64) -> PrefixCache {
        PrefixCache::new(PrefixCacheConfig {
            block_tokens: block,
            capacity_tokens: capacity,
        })
    }

    fn ids(range: std::ops::Range<u32>) -> Vec<u32> {
        range.collect()
    }

    fn ask(c: &mut PrefixCache, ids: &[u32]) -> u32 {
        let h = block_hashes(ids, c.config.block_tokens);
        c.lookup_and_insert(&h, ids.len() as u32)
    }

    #[test]
    fn hashes_chain_over_predecessors() {
        let a = block_hashes(&[1, 2, 3, 4, 5, 6, 7], 2);
        assert_eq!(a.len(), 3, "the partial last block has no hash");
        let b = block_hashes(&[9, 9, 3, 4], 2);
        assert_ne!(a[1], b[1], "same block after a different prefix");
        assert_eq!(a[..2], block_hashes(&[1, 2, 3, 4], 2)[..]);
    }

    #[test]
    fn repeated_prompt_hits_all_but_the_last_block() {
        let mut c = cache(4, 1000);
        let p = ids(0..17);
        assert_eq!(ask(&mut c, &p), 0);
        assert_eq!(ask(&mut c, &p), 16);
        // A prompt of exactly whole blocks recomputes its last block.
        let q = ids(100..116);
        assert_eq!(ask(&mut c, &q), 0);
        assert_eq!(ask(&mut c, &q), 12);
    }

    #[test]
    fn shared_prefix_hits_only_its_blocks() {
        let mut c = cache(4, 1000);
        let mut a = ids(0..10);
        a.extend(ids(500..520));
        let mut b = ids(0..10);
        b.extend(ids(700..720));
        assert_eq!(ask(&mut c, &a), 0);
        // 10 shared tokens = 2 whole blocks of 4; the third block differs.
        assert_eq!(ask(&mut c, &b), 8);
    }

    #[test]
    fn small_capacity_evicts_least_recently_used() {
        let mut c = cache(4, 16); // 4 blocks
        let a = ids(0..9); // 2 blocks held
        let b = ids(100..109);
        let d = ids(200..209);
        ask(&mut c, &a);
        ask(&mut c, &b);
        assert_eq!(c.len(), 4);
        assert_eq!(ask(&mut c, &a), 8, "a still held; now the most recent");
        ask(&mut c, &d); // evicts b, the least recently used
        assert_eq!(c.len(), 4);
        assert_eq!(ask(&mut c, &a), 8);
        assert_eq!(ask(&mut c, &b), 0, "b was evicted");
    }

    #[test]
    fn prompt_longer_than_the_cache_keeps_its_head() {
        let mut c = cache(4, 8);
        let p = ids(0..41);
        assert_eq!(ask(&mut c, &p), 0);
        assert_eq!(c.len(), 2);
        assert_eq!(ask(&mut c, &p), 8);
    }
}
