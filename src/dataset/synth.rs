//! Random text of an exact token length: draw ids, decode, re-encode, and repair the tail until
//! the text re-tokenizes to exactly the target (decode/encode does not round-trip for BPE
//! tokenizers). Shared by the random and shared-prefix datasets.

use rand::Rng;

use super::{DatasetError, Tokenizer};

/// Attempts at repairing the tail before giving up with the closest length.
const REPAIRS: usize = 16;

/// Random ids of ordinary text.
pub(crate) fn random_ids(tok: &Tokenizer, rng: &mut impl Rng, n: usize) -> Vec<u32> {
    let count = tok.text_id_count().max(1);
    (0..n)
        .map(|_| tok.text_id(rng.random_range(0..count)))
        .collect()
}

/// Text that starts with the decoded `prefix` ids and re-tokenizes to exactly `total` tokens
/// (or as close as repairs got: the returned count is the verified one).
pub(crate) fn exact_text(
    tok: &Tokenizer,
    rng: &mut impl Rng,
    prefix: &[u32],
    total: usize,
) -> Result<(String, usize), DatasetError> {
    let mut ids: Vec<u32> = prefix.iter().copied().take(total).collect();
    ids.extend(random_ids(tok, rng, total - ids.len()));
    let keep = prefix.len().min(total);
    let mut best: Option<(String, usize)> = None;
    for _ in 0..REPAIRS {
        let text = tok.decode(&ids)?;
        let got = tok.encode(&text)?;
        if got.len() == total {
            return Ok((text, total));
        }
        let closer = best
            .as_ref()
            .is_none_or(|(_, n)| n.abs_diff(total) > got.len().abs_diff(total));
        if closer {
            best = Some((text, got.len()));
        }
        ids = got;
        if ids.len() > total {
            ids.truncate(total);
        } else {
            let missing = total - ids.len();
            ids.extend(random_ids(tok, rng, missing));
        }
        // Never let repairs eat into the shared prefix when it re-tokenized unchanged.
        if ids.len() < keep {
            ids.extend(random_ids(tok, rng, keep - ids.len()));
        }
    }
    Ok(best.unwrap_or_default())
}

/// The longest text cut from the start of `source` ids that re-tokenizes to exactly `len`
/// tokens: decode a window, re-count, widen or narrow the window by the difference.
/// Returns the verified count (equal to `len` unless the source was too short or never fit).
pub(crate) fn cut_exact(
    tok: &Tokenizer,
    source: &[u32],
    len: usize,
) -> Result<(String, usize), DatasetError> {
    let mut window = len.min(source.len());
    let mut best: Option<(String, usize)> = None;
    for _ in 0..REPAIRS {
        let text = tok.decode(&source[..window])?;
        let n = tok.count(&text)?;
        if n == len {
            return Ok((text, n));
        }
        let closer = best
            .as_ref()
            .is_none_or(|(_, b)| b.abs_diff(len) > n.abs_diff(len));
        if closer {
            best = Some((text, n));
        }
        let next = if n > len {
            window.saturating_sub(n - len)
        } else {
            (window + (len - n)).min(source.len())
        };
        if next == window {
            break;
        }
        window = next;
    }
    Ok(best.unwrap_or_default())
}
