//! The model's tokenizer: a `tokenizer.json` file, a model id resolved in the local Hugging Face
//! cache (offline; `HF_HUB_CACHE` / `HF_HOME` honoured), or the server's own `/tokenize` and
//! `/detokenize` endpoints (vLLM, SGLang and llama.cpp expose them). Owns loading and the three
//! operations datasets need (encode, decode, which ids are plain text); not prompt shaping.

use std::path::{Path, PathBuf};

use orchestrate_base::chat_template::ChatTemplate;

use super::DatasetError;
use super::server_tokenizer::ServerTokenizer;

/// Where the tokenizer comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenizerSource {
    /// A `tokenizer.json` file, or a directory holding one.
    File(PathBuf),
    /// A Hugging Face model id (`deepseek-ai/DeepSeek-R1`), looked up in the local cache only.
    Model(String),
    /// The server's `/tokenize` + `/detokenize` endpoints at this base URL, for this model.
    Server { base_url: String, model: String },
}

impl TokenizerSource {
    /// Interpret a `--tokenizer` argument: an existing path is a file, anything else a model id.
    pub fn from_arg(arg: &str) -> Self {
        let path = Path::new(arg);
        if path.exists() {
            TokenizerSource::File(path.to_path_buf())
        } else {
            TokenizerSource::Model(arg.to_string())
        }
    }

    /// A short name for results (`tokenizer_id`).
    pub fn name(&self) -> String {
        match self {
            TokenizerSource::File(p) => p.display().to_string(),
            TokenizerSource::Model(m) => m.clone(),
            TokenizerSource::Server { base_url, .. } => format!("{base_url}/tokenize"),
        }
    }
}

/// A loaded tokenizer.
#[derive(Debug)]
pub struct Tokenizer {
    backend: Backing,
    /// Token ids that decode to ordinary text (special and added tokens excluded).
    text_ids: TextIds,
    name: String,
    /// The directory of `tokenizer.json`, where the chat template is looked for.
    dir: Option<PathBuf>,
}

#[derive(Debug)]
enum Backing {
    Local(Box<tokenizers::Tokenizer>),
    Server(ServerTokenizer),
}

/// Ids random prompts may draw from: `start..end` minus the excluded (sorted) ids.
#[derive(Debug, Clone)]
struct TextIds {
    start: u32,
    end: u32,
    excluded: Vec<u32>,
}

impl Tokenizer {
    /// Load from a source. The server source needs the server running.
    pub fn load(source: &TokenizerSource) -> Result<Self, DatasetError> {
        match source {
            TokenizerSource::File(path) => {
                let file = if path.is_dir() {
                    path.join("tokenizer.json")
                } else {
                    path.clone()
                };
                Self::from_file(&file)
            }
            TokenizerSource::Model(id) => {
                let cache = hf_hub_cache();
                let file = find_in_hf_cache(&cache, id).ok_or(DatasetError::TokenizerNotFound {
                    model: id.clone(),
                    searched: cache,
                })?;
                let mut tokenizer = Self::from_file(&file)?;
                tokenizer.name = id.clone();
                Ok(tokenizer)
            }
            TokenizerSource::Server { base_url, model } => {
                let server = ServerTokenizer::connect(base_url, model)?;
                let end = server.vocab_end();
                Ok(Tokenizer {
                    backend: Backing::Server(server),
                    text_ids: TextIds {
                        start: ServerTokenizer::first_text_id(),
                        end,
                        excluded: Vec::new(),
                    },
                    name: source.name(),
                    dir: None,
                })
            }
        }
    }

    /// Load a `tokenizer.json` file.
    pub fn from_file(path: &Path) -> Result<Self, DatasetError> {
        let inner =
            tokenizers::Tokenizer::from_file(path).map_err(|e| DatasetError::TokenizerLoad {
                path: path.to_path_buf(),
                message: e.to_string(),
            })?;
        let mut excluded: Vec<u32> = inner.get_added_tokens_decoder().into_keys().collect();
        excluded.sort_unstable();
        let end = inner.get_vocab_size(false) as u32;
        Ok(Tokenizer {
            backend: Backing::Local(Box::new(inner)),
            text_ids: TextIds {
                start: 0,
                end,
                excluded,
            },
            name: path.display().to_string(),
            dir: path.parent().map(Path::to_path_buf),
        })
    }

    /// The server's tokenizer, when that is the source.
    pub(crate) fn server(&self) -> Option<&ServerTokenizer> {
        match &self.backend {
            Backing::Server(s) => Some(s),
            Backing::Local(_) => None,
        }
    }

    /// The model's chat template beside `tokenizer.json`, compiled; `None` when there is none
    /// (or the tokenizer is the server's).
    pub fn chat_template(&self) -> Result<Option<ChatTemplate>, DatasetError> {
        match &self.dir {
            Some(dir) => Ok(ChatTemplate::find_in(dir)?),
            None => Ok(None),
        }
    }

    /// The name for results.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The underlying HF tokenizer, when local (the client uses it to count output tokens).
    pub fn local(&self) -> Option<&tokenizers::Tokenizer> {
        match &self.backend {
            Backing::Local(t) => Some(t),
            Backing::Server(_) => None,
        }
    }

    /// Token ids of `text`, without special tokens.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, DatasetError> {
        match &self.backend {
            Backing::Local(t) => t
                .encode_fast(text, false)
                .map(|e| e.get_ids().to_vec())
                .map_err(|e| DatasetError::Tokenize(e.to_string())),
            Backing::Server(s) => s.encode(text),
        }
    }

    /// Whether the tokens of `a + " " + b` are always those of `a` followed by those of `b`:
    /// a local tokenizer without a normalizer whose pre-tokenizer splits at whitespace and
    /// drops it (`Whitespace`, `WhitespaceSplit`, `BertPreTokenizer`), no added token holding
    /// whitespace. The model then tokenizes each word alone, so counts of space-joined
    /// pieces add up; byte-level and SentencePiece tokenizers keep the space in the next
    /// token and are not.
    pub fn splits_at_spaces(&self) -> bool {
        use tokenizers::pre_tokenizers::PreTokenizerWrapper as P;
        let Backing::Local(t) = &self.backend else {
            return false;
        };
        let splits = matches!(
            t.get_pre_tokenizer(),
            Some(P::Whitespace(_) | P::WhitespaceSplit(_) | P::BertPreTokenizer(_))
        );
        splits
            && t.get_normalizer().is_none()
            && t.get_added_tokens_decoder()
                .values()
                .all(|a| !a.content.contains(char::is_whitespace))
    }

    /// A per-word cache of token ids, when counts add up across spaces (else `None`).
    pub(crate) fn word_cache(&self) -> Option<WordCache<'_>> {
        self.splits_at_spaces().then(|| WordCache {
            tok: self,
            words: std::collections::HashMap::new(),
        })
    }

    /// Number of tokens of `text`, without special tokens.
    pub fn count(&self, text: &str) -> Result<usize, DatasetError> {
        self.encode(text).map(|ids| ids.len())
    }

    /// Text of `ids`.
    pub fn decode(&self, ids: &[u32]) -> Result<String, DatasetError> {
        match &self.backend {
            Backing::Local(t) => t
                .decode(ids, false)
                .map_err(|e| DatasetError::Tokenize(e.to_string())),
            Backing::Server(s) => s.decode(ids),
        }
    }

    /// The `n`-th id of ordinary text, for `n` drawn uniformly in `0..self.text_id_count()`.
    pub fn text_id(&self, n: u32) -> u32 {
        // Skip over excluded ids below the candidate; excluded is sorted and small.
        let mut id = self.text_ids.start + n;
        for &x in &self.text_ids.excluded {
            if x <= id {
                id += 1;
            } else {
                break;
            }
        }
        id
    }

    /// How many ids decode to ordinary text.
    pub fn text_id_count(&self) -> u32 {
        let below = self
            .text_ids
            .excluded
            .iter()
            .filter(|&&x| x >= self.text_ids.start && x < self.text_ids.end)
            .count() as u32;
        self.text_ids
            .end
            .saturating_sub(below)
            .saturating_sub(self.text_ids.start)
    }
}

/// The hub cache directory: `HF_HUB_CACHE`, else `HF_HOME/hub`, else `~/.cache/huggingface/hub`.
pub fn hf_hub_cache() -> PathBuf {
    if let Some(dir) = std::env::var_os("HF_HUB_CACHE") {
        return PathBuf::from(dir);
    }
    if let Some(home) = std::env::var_os("HF_HOME") {
        return PathBuf::from(home).join("hub");
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".cache/huggingface/hub")
}

/// `models--ORG--NAME/snapshots/<rev>/tokenizer.json`, preferring the revision `refs/main` names.
fn find_in_hf_cache(cache: &Path, model: &str) -> Option<PathBuf> {
    let dir = cache.join(format!("models--{}", model.replace('/', "--")));
    if let Ok(rev) = std::fs::read_to_string(dir.join("refs/main")) {
        let file = dir
            .join("snapshots")
            .join(rev.trim())
            .join("tokenizer.json");
        if file.is_file() {
            return Some(file);
        }
    }
    let mut snapshots: Vec<PathBuf> = std::fs::read_dir(dir.join("snapshots"))
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("tokenizer.json")))
        .filter(|p| p.is_file())
        .collect();
    snapshots.sort();
    snapshots.pop()
}

/// Token ids of texts word by word, each distinct word tokenized once: exact for a
/// tokenizer whose pre-tokenizer splits at whitespace ([`Tokenizer::splits_at_spaces`]),
/// where the ids of a text are its whitespace-separated words' ids in order. Synthesized
/// prompts draw their words from the vocabulary, so nearly every word is a cache hit.
pub(crate) struct WordCache<'a> {
    tok: &'a Tokenizer,
    words: std::collections::HashMap<String, Vec<u32>>,
}

impl WordCache<'_> {
    /// The ids of `text`, appended to `out`.
    pub(crate) fn extend(&mut self, text: &str, out: &mut Vec<u32>) -> Result<(), DatasetError> {
        for word in text.split_whitespace() {
            if let Some(ids) = self.words.get(word) {
                out.extend_from_slice(ids);
                continue;
            }
            let ids = self.tok.encode(word)?;
            out.extend_from_slice(&ids);
            self.words.insert(word.to_string(), ids);
        }
        Ok(())
    }

    /// The number of tokens of `text`.
    pub(crate) fn count(&mut self, text: &str) -> Result<usize, DatasetError> {
        let mut n = 0;
        for word in text.split_whitespace() {
            n += match self.words.get(word) {
                Some(ids) => ids.len(),
                None => {
                    let ids = self.tok.encode(word)?;
                    let n = ids.len();
                    self.words.insert(word.to_string(), ids);
                    n
                }
            };
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_whitespace_splitting_tokenizers_add_up_across_spaces() {
        let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/tokenizer/tokenizer.json");
        let tok = Tokenizer::from_file(&shipped).unwrap();
        assert!(tok.splits_at_spaces());
        let (a, b) = ("babe kaku lo", "zi mumu");
        assert_eq!(
            tok.count(&format!("{a} {b}")).unwrap(),
            tok.count(a).unwrap() + tok.count(b).unwrap()
        );
        // The same vocabulary behind a byte-level pre-tokenizer does not qualify.
        let raw = std::fs::read_to_string(&shipped).unwrap();
        let byte_level = raw.replacen(
            r#""pre_tokenizer":{"type":"Whitespace"}"#,
            r#""pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}"#,
            1,
        );
        assert_ne!(raw, byte_level);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokenizer.json");
        std::fs::write(&path, byte_level).unwrap();
        assert!(!Tokenizer::from_file(&path).unwrap().splits_at_spaces());
        assert!(Tokenizer::from_file(&path).unwrap().word_cache().is_none());
        // Word by word, the same ids as the whole text.
        let mut cache = tok.word_cache().unwrap();
        let text = "babe kaku, lo  zi\nmumu babe";
        let mut ids = Vec::new();
        cache.extend(text, &mut ids).unwrap();
        assert_eq!(ids, tok.encode(text).unwrap());
        assert_eq!(cache.count(text).unwrap(), ids.len());
    }

    #[test]
    fn text_ids_skip_excluded() {
        let t = Tokenizer {
            backend: Backing::Server(ServerTokenizer::unconnected()),
            text_ids: TextIds {
                start: 0,
                end: 10,
                excluded: vec![0, 5],
            },
            name: String::new(),
            dir: None,
        };
        assert_eq!(t.text_id_count(), 8);
        let ids: Vec<u32> = (0..8).map(|n| t.text_id(n)).collect();
        assert_eq!(ids, vec![1, 2, 3, 4, 6, 7, 8, 9]);
    }

    #[test]
    fn model_id_resolves_in_hf_home() {
        let home = tempfile::tempdir().unwrap();
        let snap = home.path().join("hub/models--org--tiny/snapshots/abc123");
        std::fs::create_dir_all(&snap).unwrap();
        let shipped = concat!(env!("CARGO_MANIFEST_DIR"), "/data/tokenizer/tokenizer.json");
        std::fs::copy(shipped, snap.join("tokenizer.json")).unwrap();
        std::fs::create_dir_all(home.path().join("hub/models--org--tiny/refs")).unwrap();
        std::fs::write(
            home.path().join("hub/models--org--tiny/refs/main"),
            "abc123\n",
        )
        .unwrap();
        let found = find_in_hf_cache(&home.path().join("hub"), "org/tiny").unwrap();
        assert_eq!(found, snap.join("tokenizer.json"));
        assert!(find_in_hf_cache(&home.path().join("hub"), "org/other").is_none());
        let loaded = Tokenizer::from_file(&found).unwrap();
        assert_eq!(loaded.count("ba be bi").unwrap(), 3);
    }
}
