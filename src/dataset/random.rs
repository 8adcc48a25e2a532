//! Synthetic prompts from random token ids: vLLM's `random` dataset (optional shared prefix and
//! length range) and SGLang's `generated-shared-prefix` dataset (groups of questions behind one
//! system prompt each).

use rand::Rng;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;

use super::synth::{exact_text, random_ids};
use super::{DatasetError, Prompt, Tokenizer};

pub(crate) struct RandomParams {
    pub input_len: u32,
    pub output_len: u32,
    pub range_ratio: f64,
    pub prefix_len: u32,
}

pub(crate) struct SharedPrefixParams {
    pub num_groups: u32,
    pub prompts_per_group: u32,
    pub system_prompt_len: u32,
    pub question_len: u32,
    pub output_len: u32,
}

/// Bounds of vLLM's `--random-range-ratio r`: `[L(1-r), L(1+r)]`, at least 1.
pub(crate) fn len_range(len: u32, ratio: f64) -> (u32, u32) {
    let lo = (f64::from(len) * (1.0 - ratio)).floor().max(1.0) as u32;
    let hi = (f64::from(len) * (1.0 + ratio)).ceil().max(f64::from(lo)) as u32;
    (lo, hi)
}

pub(crate) fn random(
    tok: &Tokenizer,
    p: &RandomParams,
    num_prompts: usize,
    seed: u64,
) -> Result<Vec<Prompt>, DatasetError> {
    if !(0.0..1.0).contains(&p.range_ratio) {
        return Err(DatasetError::Invalid(format!(
            "--random-range-ratio must be in [0, 1), got {}",
            p.range_ratio
        )));
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let prefix = random_ids(tok, &mut rng, p.prefix_len as usize);
    let (in_lo, in_hi) = len_range(p.input_len, p.range_ratio);
    let (out_lo, out_hi) = len_range(p.output_len, p.range_ratio);
    (0..num_prompts)
        .map(|_| {
            let input = rng.random_range(in_lo..=in_hi);
            let output = rng.random_range(out_lo..=out_hi);
            let total = p.prefix_len as usize + input as usize;
            let (text, len) = exact_text(tok, &mut rng, &prefix, total)?;
            Ok(Prompt {
                text,
                prompt_len: len as u32,
                output_len: output,
                at_us: None,
                session: None,
                messages: None,
            })
        })
        .collect()
}

pub(crate) fn shared_prefix(
    tok: &Tokenizer,
    p: &SharedPrefixParams,
    num_prompts: usize,
    seed: u64,
) -> Result<Vec<Prompt>, DatasetError> {
    if p.num_groups == 0 || p.prompts_per_group == 0 {
        return Err(DatasetError::Invalid(
            "--gsp-num-groups and --gsp-prompts-per-group must be at least 1".into(),
        ));
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let mut all = Vec::with_capacity((p.num_groups * p.prompts_per_group) as usize);
    for _ in 0..p.num_groups {
        let (system, _) = exact_text(tok, &mut rng, &[], p.system_prompt_len as usize)?;
        for _ in 0..p.prompts_per_group {
            let (question, _) = exact_text(tok, &mut rng, &[], p.question_len as usize)?;
            let text = format!("{system}\n\n{question}");
            let prompt_len = tok.count(&text)? as u32;
            all.push(Prompt {
                text,
                prompt_len,
                output_len: p.output_len,
                at_us: None,
                session: None,
                messages: None,
            });
        }
    }
    all.shuffle(&mut rng);
    Ok(all.iter().cycle().take(num_prompts).cloned().collect())
}
