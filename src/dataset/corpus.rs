//! Plain-text corpora (Project Gutenberg style): every `.txt` file of a directory (or one file),
//! tokenized, and cut at seeded random offsets into prompts of exactly `input_len` tokens.

use std::path::{Path, PathBuf};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::synth::cut_exact;
use super::{DatasetError, Prompt, Tokenizer};

/// Stop reading files once this many tokens per prompt are loaded (bounds time and memory on
/// large corpora; files are read in a seeded random order).
const TOKENS_PER_PROMPT_LOADED: usize = 64;

pub(crate) fn text(
    tok: &Tokenizer,
    path: &Path,
    input_len: u32,
    output_len: u32,
    num_prompts: usize,
    seed: u64,
) -> Result<Vec<Prompt>, DatasetError> {
    let read_err = |path: &Path, source| DatasetError::Read {
        path: path.to_path_buf(),
        source,
    };
    let mut files: Vec<PathBuf> = if path.is_dir() {
        std::fs::read_dir(path)
            .map_err(|e| read_err(path, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "txt"))
            .collect()
    } else {
        vec![path.to_path_buf()]
    };
    files.sort();
    let mut rng = StdRng::seed_from_u64(seed);
    files.shuffle(&mut rng);
    let len = input_len as usize;
    // Extra room after each cut so the window can widen when decode/encode drifts.
    let span = len + len / 8 + 8;
    let want = (num_prompts * TOKENS_PER_PROMPT_LOADED).max(span * 4);
    let mut ids: Vec<u32> = Vec::new();
    for file in &files {
        let raw = std::fs::read_to_string(file).map_err(|e| read_err(file, e))?;
        let words: Vec<&str> = raw.split_whitespace().collect();
        ids.extend(tok.encode(&words.join(" "))?);
        ids.extend(tok.encode(" ")?);
        if ids.len() >= want {
            break;
        }
    }
    if ids.len() < span {
        return Err(DatasetError::Format {
            path: path.to_path_buf(),
            message: format!(
                "the corpus has {} tokens, fewer than one prompt of {input_len} tokens needs; add .txt files or lower --text-input-len",
                ids.len()
            ),
        });
    }
    (0..num_prompts)
        .map(|_| {
            let start = rng.random_range(0..=ids.len() - span);
            let (text, n) = cut_exact(tok, &ids[start..start + span], len)?;
            Ok(Prompt {
                text,
                prompt_len: n as u32,
                output_len,
                at_us: None,
                session: None,
                messages: None,
            })
        })
        .collect()
}
