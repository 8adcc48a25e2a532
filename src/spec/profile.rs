//! `benchmark.profile`: a shared benchmark section whose keys are defaults a task overrides
//! key by key (a task's `matrix` replaces the profile's whole matrix).
//!
//! Owns: the merge and the record of where each key came from. Does not own: reading files.

use std::collections::BTreeMap;

use super::types::BenchmarkSpec;

/// Merge `task` over `profile`; returns the merged section and, per key, the source index
/// (`task_src` or `profile_src`) it came from.
pub fn merge(
    task: BenchmarkSpec,
    profile: BenchmarkSpec,
    task_src: usize,
    profile_src: usize,
) -> (BenchmarkSpec, BTreeMap<&'static str, usize>) {
    let mut origin = BTreeMap::new();
    let BenchmarkSpec {
        profile: t_profile,
        model,
        endpoint,
        dataset,
        tokenizer,
        ignore_eos,
        num_prompts,
        duration,
        warmup,
        cooldown,
        concurrency,
        request_rate,
        burstiness,
        ramp_up,
        seed,
        extra_body,
        request_timeout,
        goodput,
        stall_timeout,
        repetitions,
        prefix_block_size,
        percentiles,
        timeseries_interval,
        matrix,
        check,
        validity,
        external,
        search,
    } = task;
    let p = profile;
    macro_rules! pick {
        ($key:ident, $t:expr, $p:expr) => {{
            let (v, src) = match $t {
                Some(v) => (Some(v), task_src),
                None => ($p, profile_src),
            };
            if v.is_some() {
                origin.insert(stringify!($key), src);
            }
            v
        }};
    }
    // `num_prompts` and `duration` are one choice: a task that sets either replaces both.
    let task_sets_limit = num_prompts.is_some() || duration.is_some();
    let (num_prompts, duration) = if task_sets_limit {
        (
            pick!(num_prompts, num_prompts, None),
            pick!(duration, duration, None),
        )
    } else {
        (
            pick!(num_prompts, None, p.num_prompts),
            pick!(duration, None, p.duration),
        )
    };
    let merged = BenchmarkSpec {
        profile: t_profile,
        model: pick!(model, model, p.model),
        endpoint: pick!(endpoint, endpoint, p.endpoint),
        dataset: pick!(dataset, dataset, p.dataset),
        tokenizer: pick!(tokenizer, tokenizer, p.tokenizer),
        ignore_eos: pick!(ignore_eos, ignore_eos, p.ignore_eos),
        num_prompts,
        duration,
        warmup: pick!(warmup, warmup, p.warmup),
        cooldown: pick!(cooldown, cooldown, p.cooldown),
        concurrency: pick!(concurrency, concurrency, p.concurrency),
        request_rate: pick!(request_rate, request_rate, p.request_rate),
        burstiness: pick!(burstiness, burstiness, p.burstiness),
        ramp_up: pick!(ramp_up, ramp_up, p.ramp_up),
        seed: pick!(seed, seed, p.seed),
        extra_body: pick!(extra_body, extra_body, p.extra_body),
        request_timeout: pick!(request_timeout, request_timeout, p.request_timeout),
        goodput: pick!(goodput, goodput, p.goodput),
        stall_timeout: pick!(stall_timeout, stall_timeout, p.stall_timeout),
        repetitions: pick!(repetitions, repetitions, p.repetitions),
        prefix_block_size: pick!(prefix_block_size, prefix_block_size, p.prefix_block_size),
        percentiles: pick!(percentiles, percentiles, p.percentiles),
        timeseries_interval: pick!(
            timeseries_interval,
            timeseries_interval,
            p.timeseries_interval
        ),
        matrix: pick!(matrix, matrix, p.matrix),
        check: pick!(check, check, p.check),
        validity: pick!(validity, validity, p.validity),
        external: pick!(external, external, p.external),
        search: pick!(search, search, p.search),
    };
    (merged, origin)
}
