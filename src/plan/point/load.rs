//! A point's load: limit, concurrency, rate and ramp-up, dataset, tokenizer and seed from
//! the benchmark section and the point's load axes (read in the sweep).

use std::collections::BTreeMap;
use std::time::Duration;

use minijinja::Value as JValue;
use serde_saphyr::Location;

use super::resolver::{Resolver, Site};
use crate::dataset::DatasetSpec;
use crate::load::{Endpoint, Limit, LoadShape, RampUp, Rate};
use crate::matrix::Point;
use crate::plan::render::Builder;
use crate::plan::sweep::{
    BURSTINESS, CONCURRENCY, COOLDOWN, DURATION, INPUT_LEN, LoadValues, NUM_PROMPTS, OUTPUT_LEN,
    REQUEST_RATE, SEED, STALL_TIMEOUT, WARMUP,
};
use crate::plan::types::{LoadPlan, PlanError};
use crate::spec::{Diagnostic, RampUpSpec};
use crate::units;

/// The load of `point`, whose load axes the sweep has read (`load`).
pub(in crate::plan) fn load_plan(
    b: &Builder<'_>,
    point: &Point,
    load: &LoadValues,
    vars: &JValue,
    axis_locs: &BTreeMap<String, Location>,
) -> Result<LoadPlan, PlanError> {
    let bench = &b.task.spec.benchmark;
    let r = Resolver {
        b,
        point,
        load,
        vars,
        axis_locs,
    };
    let path = b.task.path();
    if bench.external.is_some() && bench.dataset.is_none() {
        super::settings::no_goodput(&r)?;
        return external_load(&r);
    }
    let Some(dataset) = &bench.dataset else {
        return Err(Diagnostic::file(path, "missing `benchmark.dataset`")
            .with_help("add e.g. `dataset: {kind: random, input_len: 1024, output_len: 128}` under benchmark")
            .into());
    };
    let dataset_loc = dataset.referenced;
    let dataset = r.dataset(dataset)?;
    let endpoint = bench.endpoint.unwrap_or(Endpoint::Completions);
    if matches!(dataset, DatasetSpec::Conversation(_)) && endpoint != Endpoint::Chat {
        let site = Site {
            source: b.task.bench_source("dataset"),
            loc: dataset_loc,
        };
        return Err(r.err(
            site,
            "the conversation dataset sends each turn's history as chat messages: add `endpoint: chat` to the benchmark section".to_string(),
        ));
    }
    let limit = limit(&r)?;
    let max_concurrency = r.number(&CONCURRENCY, "a whole number")?;
    if max_concurrency == Some(0)
        && let Some(got) = r.get(&CONCURRENCY)?
    {
        return Err(r.err(
            got.site,
            "`concurrency` must be at least 1; leave it out for no limit".to_string(),
        ));
    }
    let warmup_d = r.duration(&WARMUP)?.unwrap_or_default();
    let cooldown_d = r.duration(&COOLDOWN)?.unwrap_or_default();
    if let Limit::Duration(d) = limit
        && warmup_d + cooldown_d >= d
        && let Some(got) = r.get(&DURATION)?
    {
        return Err(r.err(
            got.site,
            format!(
                "`warmup` + `cooldown` ({}) leave nothing of `duration` ({}); make the duration longer or them shorter",
                units::format_duration(warmup_d + cooldown_d),
                units::format_duration(d)
            ),
        ));
    }
    let (rate, ramp_up) = rate(&r, bench.ramp_up.as_ref())?;
    let seed: u64 = r.number(&SEED, "a whole number")?.unwrap_or(0);
    let tokenizer = match &bench.tokenizer {
        Some(t) => {
            let source = b.task.bench_source("tokenizer");
            let text = b.render(source, "tokenizer", t, vars)?;
            missing_tokenizer(b, &text).map_or(Ok(()), |e| {
                Err(r.err(
                    Site {
                        source,
                        loc: t.referenced,
                    },
                    e,
                ))
            })?;
            Some(text)
        }
        None => None,
    };
    Ok(LoadPlan {
        endpoint,
        dataset,
        tokenizer,
        ignore_eos: bench.ignore_eos.unwrap_or(false),
        shape: LoadShape {
            max_concurrency,
            rate,
            ramp_up,
            limit,
            warmup: warmup_d,
            cooldown: cooldown_d,
        },
        seed,
        extra_body: bench.extra_body.clone().unwrap_or_default(),
        request_timeout: bench.request_timeout.as_ref().map(|t| t.value.0),
        goodput: super::settings::goodput(&r)?,
        stall_timeout: stall(&r)?,
        prefix_block_size: super::settings::prefix_block_size(b)?,
        timeseries_interval: super::settings::timeseries_interval(b)?,
        percentiles: super::settings::percentiles(b)?,
    })
}

/// A `tokenizer:` that is written as a file path (ends in `.json`, or starts with `/`, `./`,
/// `../` or `~`) but names no file, relative to the task file or as given (the run looks in
/// both places): what is wrong and what to do. A model id is looked up in the HF cache when
/// the point runs.
fn missing_tokenizer(b: &Builder<'_>, text: &str) -> Option<String> {
    let path = std::path::Path::new(text);
    let path_like =
        text.ends_with(".json") || ["/", "./", "../", "~"].iter().any(|p| text.starts_with(p));
    let beside_task = b.task.path().parent().map(|d| d.join(path));
    let found = path.exists() || beside_task.as_ref().is_some_and(|p| p.exists());
    (path_like && !found).then(|| {
        format!(
            "`tokenizer`: no file {} (a relative path is read from the task file's directory); fix the path, or name a model id cached by Hugging Face",
            beside_task.map_or_else(|| text.to_string(), |p| p.display().to_string())
        )
    })
}

/// `stall_timeout`: a duration longer than zero, or `off` (`None`, also `false`); the default
/// when unset.
fn stall(r: &Resolver<'_, '_>) -> Result<Option<Duration>, PlanError> {
    let Some(got) = r.get(&STALL_TIMEOUT)? else {
        return Ok(Some(crate::load::DEFAULT_STALL_TIMEOUT));
    };
    match got.value {
        Ok(Some(d)) if !d.is_zero() => Ok(Some(d)),
        Ok(Some(_)) => Err(r.err(
            got.site,
            "`stall_timeout` must be longer than 0s; write `off` to wait for a silent server for ever"
                .to_string(),
        )),
        Ok(None) => Ok(None),
        Err(e) => Err(r.err(
            got.site,
            format!("`stall_timeout`: {e}; write a duration such as `2m`, or `off`"),
        )),
    }
}

/// How a point ends: `num_prompts` or `duration` (exactly one).
fn limit(r: &Resolver<'_, '_>) -> Result<Limit, PlanError> {
    let (b, path) = (r.b, r.b.task.path());
    let n = r.get(&NUM_PROMPTS)?;
    let d = r.get(&DURATION)?;
    Ok(match (n, d) {
        (Some(n), None) => match n.value {
            Ok(count) if count > 0 => Limit::Requests(count),
            _ => {
                return Err(r.err(
                    n.site,
                    format!(
                        "`num_prompts`: `{}` is not a positive whole number",
                        n.text()
                    ),
                ));
            }
        },
        (None, Some(d)) => Limit::Duration(
            d.value
                .map_err(|e| r.err(d.site, format!("`duration`: {e}")))?,
        ),
        (Some(_), Some(d)) => {
            return Err(b
                .at(
                    d.site.source,
                    d.site.loc,
                    "set either `num_prompts` or `duration`, not both",
                )
                .with_help("num_prompts stops after N requests; duration stops after a time")
                .into());
        }
        (None, None) => {
            return Err(
                Diagnostic::file(path, "the benchmark needs `num_prompts` or `duration`")
                    .with_help("add e.g. `num_prompts: 500` or `duration: 10m` under benchmark")
                    .into(),
            );
        }
    })
}

/// The arrival rate (`request_rate`, `burstiness`) or the ramp-up that replaces it.
fn rate(
    r: &Resolver<'_, '_>,
    ramp_up: Option<&RampUpSpec>,
) -> Result<(Rate, Option<RampUp>), PlanError> {
    let b = r.b;
    let rate = r.get(&REQUEST_RATE)?;
    let burst = r.get(&BURSTINESS)?;
    let rps = match &rate {
        None => None,
        Some(got) => got.value.clone().map_err(|_| {
            r.err(
                got.site,
                format!(
                    "`request_rate`: `{}` is not a positive number or `inf`",
                    got.text()
                ),
            )
        })?,
    };
    let burstiness = match &burst {
        None => None,
        Some(got) => Some((
            got.value.clone().map_err(|_| {
                r.err(
                    got.site,
                    format!("`burstiness`: `{}` is not a positive number", got.text()),
                )
            })?,
            got.site,
        )),
    };
    let shape = match (rps, burstiness) {
        (None, None) => Rate::Unlimited,
        (None, Some((_, site))) => {
            return Err(b
                .at(site.source, site.loc, "`burstiness` needs a finite `request_rate`")
                .with_help("burstiness shapes the gaps between arrivals; with `request_rate: inf` there are none")
                .into());
        }
        (Some(rps), None) | (Some(rps), Some((1.0, _))) => Rate::Poisson { rps },
        (Some(rps), Some((burstiness, _))) => Rate::Gamma { rps, burstiness },
    };
    if ramp_up.is_some()
        && let Some(got) = &rate
    {
        return Err(b
            .at(
                got.site.source,
                got.site.loc,
                "set either `request_rate` or `ramp_up`, not both",
            )
            .with_help("ramp_up replaces the request rate with one that grows over the point")
            .into());
    }
    let ramp_up = ramp_up.map(|ru| RampUp {
        strategy: ru.strategy,
        start_rps: ru.start_rps.0,
        end_rps: ru.end_rps.0,
    });
    Ok((shape, ramp_up))
}

/// The load recorded for a point of an external command without a `dataset`: what the
/// matrix and the benchmark section say about lengths and counts (reports group by them);
/// the command itself decides what it sends.
fn external_load(r: &Resolver<'_, '_>) -> Result<LoadPlan, PlanError> {
    let limit = match r.number(&NUM_PROMPTS, "a whole number")? {
        Some(n) => Limit::Requests(n),
        None => match r.duration(&DURATION)? {
            Some(d) => Limit::Duration(d),
            None => Limit::Requests(0),
        },
    };
    Ok(LoadPlan {
        endpoint: Endpoint::Completions,
        dataset: DatasetSpec::Random {
            input_len: r.number(&INPUT_LEN, "a whole number")?.unwrap_or(0),
            output_len: r.number(&OUTPUT_LEN, "a whole number")?.unwrap_or(0),
            range_ratio: 0.0,
            prefix_len: 0,
        },
        tokenizer: None,
        ignore_eos: false,
        shape: LoadShape {
            max_concurrency: r.number(&CONCURRENCY, "a whole number")?,
            rate: Rate::Unlimited,
            ramp_up: None,
            limit,
            warmup: Duration::ZERO,
            cooldown: Duration::ZERO,
        },
        seed: r.number(&SEED, "a whole number")?.unwrap_or(0),
        extra_body: Default::default(),
        request_timeout: None,
        goodput: Vec::new(),
        stall_timeout: Some(crate::load::DEFAULT_STALL_TIMEOUT),
        prefix_block_size: crate::load::DEFAULT_PREFIX_BLOCK_TOKENS,
        timeseries_interval: Some(crate::load::DEFAULT_TIMESERIES_INTERVAL),
        percentiles: crate::load::default_percentiles(),
    })
}
