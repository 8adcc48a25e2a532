//! Token counting for prompts (whitespace-separated words by default, or a HF
//! `tokenizer.json` for exact counts) and the filler text the server generates. Not here:
//! request parsing (which decides what text to count) or the chunking of the output.

use std::path::Path;
use std::sync::Arc;

use super::MockError;

/// How prompt tokens are counted.
#[derive(Clone, Default)]
pub enum TokenCounter {
    /// One token per whitespace-separated word; ids are a hash of the word.
    #[default]
    Whitespace,
    /// A Hugging Face tokenizer, with special tokens added as the server would.
    HuggingFace(Arc<tokenizers::Tokenizer>),
}

impl std::fmt::Debug for TokenCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Whitespace => f.write_str("Whitespace"),
            Self::HuggingFace(_) => f.write_str("HuggingFace(..)"),
        }
    }
}

/// Vocabulary size of the whitespace counter's hashed ids.
const WHITESPACE_VOCAB: u64 = 32_000;

impl TokenCounter {
    /// Load a HF `tokenizer.json`.
    pub fn from_file(path: &Path) -> Result<Self, MockError> {
        tokenizers::Tokenizer::from_file(path)
            .map(|t| Self::HuggingFace(Arc::new(t)))
            .map_err(|source| MockError::Tokenizer {
                path: path.to_path_buf(),
                source,
            })
    }

    /// The token ids of `text` (`add_special_tokens` as vLLM's `/tokenize`).
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Vec<u32> {
        match self {
            Self::Whitespace => text.split_whitespace().map(word_id).collect(),
            Self::HuggingFace(t) => t
                .encode_fast(text, add_special_tokens)
                .map(|e| e.get_ids().to_vec())
                .unwrap_or_default(),
        }
    }

    /// The number of tokens in `text`.
    pub fn count(&self, text: &str, add_special_tokens: bool) -> u32 {
        match self {
            Self::Whitespace => saturate(text.split_whitespace().count()),
            Self::HuggingFace(t) => t
                .encode_fast(text, add_special_tokens)
                .map(|e| saturate(e.len()))
                .unwrap_or(0),
        }
    }
}

fn saturate(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn word_id(word: &str) -> u32 {
    // FNV-1a: stable across runs and platforms.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in word.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h % WHITESPACE_VOCAB) as u32
}

/// Short, common English words: one token each in the usual BPE vocabularies, so a client
/// that re-tokenizes the output counts about what `usage` says.
const WORDS: [&str; 48] = [
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by",
    "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an",
    "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there",
    "been", "if", "more", "when", "will", "would", "who", "so", "no",
];

/// Append the text of output tokens `from..to` of a sequence whose words start at `seed`:
/// each token is `" " + word`.
pub fn push_filler(out: &mut Vec<u8>, seed: u64, from: u32, to: u32) {
    for i in from..to {
        let w = WORDS[((seed + u64::from(i)) % WORDS.len() as u64) as usize];
        out.push(b' ');
        out.extend_from_slice(w.as_bytes());
    }
}

/// splitmix64: a stateless hash used for every seeded choice (error injection, output
/// lengths, word offsets), so the same seed and request order give the same answers.
pub fn mix(seed: u64, n: u64) -> u64 {
    let mut z = seed.wrapping_add(n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A uniform number in [0, 1) from `mix`.
pub fn unit(seed: u64, n: u64) -> f64 {
    (mix(seed, n) >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whitespace_counts_words() {
        let t = TokenCounter::Whitespace;
        assert_eq!(t.count("  hello   big\nworld ", true), 3);
        assert_eq!(t.encode("a b a", true).len(), 3);
        let ids = t.encode("a b a", false);
        assert_eq!(ids[0], ids[2]);
        assert_ne!(ids[0], ids[1]);
    }

    #[test]
    fn filler_has_one_word_per_token() {
        let mut out = Vec::new();
        push_filler(&mut out, 5, 3, 10);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(TokenCounter::Whitespace.count(&text, false), 7);
        assert!(text.starts_with(' '));
    }

    #[test]
    fn seeded_choices_are_stable_and_spread() {
        assert_eq!(mix(1, 2), mix(1, 2));
        assert_ne!(mix(1, 2), mix(1, 3));
        let mean = (0..10_000).map(|i| unit(7, i)).sum::<f64>() / 10_000.0;
        assert!((mean - 0.5).abs() < 0.02, "{mean}");
    }

    #[test]
    fn missing_tokenizer_file_is_an_error() {
        let err = TokenCounter::from_file(Path::new("/nonexistent/tokenizer.json")).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/tokenizer.json"));
    }
}
