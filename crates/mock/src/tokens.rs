//! Token counting for prompts (whitespace-separated words by default, or a HF
//! `tokenizer.json` for exact counts, chat prompts through the chat template beside it) and
//! the filler text the server generates. Not here:
//! request parsing (which decides what text to count) or the chunking of the output.

use std::path::Path;
use std::sync::Arc;

use crate::error::MockError;
use orchestrate_base::chat_template::ChatTemplate;

/// How prompt tokens are counted.
#[derive(Clone, Default)]
pub enum TokenCounter {
    /// One token per whitespace-separated word; ids are a hash of the word.
    #[default]
    Whitespace,
    /// A Hugging Face tokenizer, with special tokens added as the server would, and the chat
    /// template found beside it (chat prompts are counted through it, as vLLM does).
    HuggingFace(Arc<tokenizers::Tokenizer>, Option<Arc<ChatTemplate>>),
}

impl std::fmt::Debug for TokenCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Whitespace => f.write_str("Whitespace"),
            Self::HuggingFace(..) => f.write_str("HuggingFace(..)"),
        }
    }
}

/// Vocabulary size of the whitespace counter's hashed ids.
const WHITESPACE_VOCAB: u64 = 32_000;

impl TokenCounter {
    /// Load a HF `tokenizer.json`, and the chat template beside it when there is one.
    pub fn from_file(path: &Path) -> Result<Self, MockError> {
        let err = |source: Box<dyn std::error::Error + Send + Sync>| MockError::Tokenizer {
            path: path.to_path_buf(),
            source,
        };
        let tokenizer = tokenizers::Tokenizer::from_file(path).map_err(err)?;
        let chat = match path.parent() {
            Some(dir) => ChatTemplate::find_in(dir).map_err(|e| err(Box::new(e)))?,
            None => None,
        };
        Ok(Self::HuggingFace(Arc::new(tokenizer), chat.map(Arc::new)))
    }

    /// The token ids of a chat conversation rendered through the chat template (with the
    /// generation prompt); `None` without a template (the caller counts the contents).
    pub fn encode_chat(&self, messages: &[(&str, &str)]) -> Option<Result<Vec<u32>, String>> {
        match self {
            Self::HuggingFace(_, Some(chat)) => Some(
                chat.render(messages)
                    .map_err(|e| e.to_string())
                    .map(|text| self.encode(&text, false)),
            ),
            _ => None,
        }
    }

    /// The token ids of `text` (`add_special_tokens` as vLLM's `/tokenize`).
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Vec<u32> {
        match self {
            Self::Whitespace => text.split_whitespace().map(word_id).collect(),
            Self::HuggingFace(t, _) => t
                .encode_fast(text, add_special_tokens)
                .map(|e| e.get_ids().to_vec())
                .unwrap_or_default(),
        }
    }

    /// The text of `ids` (vLLM's `/detokenize`). The whitespace counter's ids are hashes, so it
    /// spells each id as a pseudo-word: decoding and re-encoding keeps the number of tokens,
    /// not the ids.
    pub fn decode(&self, ids: &[u32]) -> Result<String, String> {
        match self {
            Self::Whitespace => Ok(ids
                .iter()
                .map(|&id| id_word(id))
                .collect::<Vec<_>>()
                .join(" ")),
            Self::HuggingFace(t, _) => t.decode(ids, false).map_err(|e| e.to_string()),
        }
    }

    /// The number of tokens in `text`.
    pub fn count(&self, text: &str, add_special_tokens: bool) -> u32 {
        match self {
            Self::Whitespace => saturate(text.split_whitespace().count()),
            Self::HuggingFace(t, _) => t
                .encode_fast(text, add_special_tokens)
                .map(|e| saturate(e.len()))
                .unwrap_or(0),
        }
    }
}

fn saturate(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// A pronounceable pseudo-word for a whitespace id: consonant-vowel pairs from its digits.
fn id_word(id: u32) -> String {
    const C: &[u8] = b"bdfgklmnprstvz";
    const V: &[u8] = b"aeiou";
    let mut n = id as usize;
    let mut w = String::new();
    loop {
        w.push(C[n % C.len()] as char);
        n /= C.len();
        w.push(V[n % V.len()] as char);
        n /= V.len();
        if n == 0 {
            return w;
        }
    }
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
pub(crate) fn push_filler(out: &mut Vec<u8>, seed: u64, from: u32, to: u32) {
    for i in from..to {
        let w = WORDS[((seed + u64::from(i)) % WORDS.len() as u64) as usize];
        out.push(b' ');
        out.extend_from_slice(w.as_bytes());
    }
}

/// splitmix64: a stateless hash used for every seeded choice (error injection, output
/// lengths, word offsets), so the same seed and request order give the same answers.
pub(crate) fn mix(seed: u64, n: u64) -> u64 {
    let mut z = seed.wrapping_add(n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A uniform number in [0, 1) from `mix`.
pub(crate) fn unit(seed: u64, n: u64) -> f64 {
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
    fn decode_keeps_the_token_count() {
        let t = TokenCounter::Whitespace;
        let ids: Vec<u32> = (0..500).map(|i| i * 61).collect();
        let text = t.decode(&ids).unwrap();
        assert_eq!(t.count(&text, false), 500);
        assert_eq!(t.decode(&[0]).unwrap(), "ba");
        assert_ne!(id_word(1), id_word(14));
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
