//! A point's load: limit, concurrency, rate and ramp-up, dataset, tokenizer and seed from
//! the benchmark section and the point's load axes; and the variables that section reads.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use minijinja::Value as JValue;
use serde_saphyr::{Location, Spanned};

use super::resolver::{Resolver, Site};
use crate::dataset::DatasetSpec;
use crate::load::{Endpoint, Limit, LoadShape, RampUp, Rate};
use crate::matrix::Point;
use crate::plan::build::Builder;
use crate::plan::{LoadPlan, PlanError};
use crate::spec::values::Scalar;
use crate::spec::{BenchmarkSpec, Diagnostic, RampUpSpec};
use crate::units;

/// Axis names that set the load field of the same name (dataset fields included).
pub const LOAD_AXES: &[&str] = &[
    "concurrency",
    "request_rate",
    "burstiness",
    "num_prompts",
    "duration",
    "warmup",
    "cooldown",
    "seed",
    "stall_timeout",
    "input_len",
    "output_len",
    "range_ratio",
    "prefix_len",
    "num_groups",
    "prompts_per_group",
    "system_prompt_len",
    "question_len",
    "goodput",
];
/// Template variables read by the benchmark section (so an axis used only there is a load
/// axis, not an unused one).
pub fn load_vars(b: &Builder<'_>) -> Result<BTreeSet<String>, PlanError> {
    let bench = &b.task.spec.benchmark;
    let mut out = BTreeSet::new();
    let mut add = |key: &str, f: &Option<Spanned<Scalar>>| -> Result<(), PlanError> {
        if let Some(f) = f {
            let s = Spanned {
                value: f.value.0.clone(),
                referenced: f.referenced,
                defined: f.defined,
            };
            out.extend(b.vars(b.task.bench_source(key), &s)?);
        }
        Ok(())
    };
    add("num_prompts", &bench.num_prompts)?;
    add("duration", &bench.duration)?;
    add("warmup", &bench.warmup)?;
    add("cooldown", &bench.cooldown)?;
    add("concurrency", &bench.concurrency)?;
    add("request_rate", &bench.request_rate)?;
    add("burstiness", &bench.burstiness)?;
    add("seed", &bench.seed)?;
    add("stall_timeout", &bench.stall_timeout)?;
    if let Some(d) = &bench.dataset {
        let d = &d.value;
        for f in [
            &d.input_len,
            &d.output_len,
            &d.range_ratio,
            &d.prefix_len,
            &d.num_groups,
            &d.prompts_per_group,
            &d.system_prompt_len,
            &d.question_len,
        ] {
            add("dataset", f)?;
        }
        if let Some(p) = &d.path {
            out.extend(b.vars(b.task.bench_source("dataset"), p)?);
        }
    }
    if let Some(t) = &bench.tokenizer {
        out.extend(b.vars(b.task.bench_source("tokenizer"), t)?);
    }
    Ok(out)
}

/// The load of `point`.
pub fn load_plan(
    b: &Builder<'_>,
    point: &Point,
    vars: &JValue,
    axis_locs: &BTreeMap<String, Location>,
) -> Result<LoadPlan, PlanError> {
    let BenchmarkSpec {
        profile: _,
        model: _,
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
        goodput: _,
        stall_timeout,
        repetitions: _,
        matrix: _,
        check: _,
        validity: _,
        external,
    } = &b.task.spec.benchmark;
    let r = Resolver {
        b,
        point,
        vars,
        axis_locs,
    };
    let path = b.task.path();
    if external.is_some() && dataset.is_none() {
        super::settings::no_goodput(&r)?;
        return external_load(&r, num_prompts.as_ref(), duration.as_ref(), seed.as_ref());
    }
    let Some(dataset) = dataset else {
        return Err(Diagnostic::file(path, "missing `benchmark.dataset`")
            .with_help("add e.g. `dataset: {kind: random, input_len: 1024, output_len: 128}` under benchmark")
            .into());
    };
    let dataset = r.dataset(dataset)?;
    let limit = limit(&r, num_prompts.as_ref(), duration.as_ref())?;
    let max_concurrency = r.u32("concurrency", "concurrency", concurrency.as_ref())?;
    if max_concurrency == Some(0)
        && let Some((_, site)) = r.text("concurrency", "concurrency", concurrency.as_ref())?
    {
        return Err(r.err(
            site,
            "`concurrency` must be at least 1; leave it out for no limit".to_string(),
        ));
    }
    let warmup_d = r.duration("warmup", warmup.as_ref())?.unwrap_or_default();
    let cooldown_d = r
        .duration("cooldown", cooldown.as_ref())?
        .unwrap_or_default();
    if let Limit::Duration(d) = limit
        && warmup_d + cooldown_d >= d
        && let Some((_, site)) = r.text("duration", "duration", duration.as_ref())?
    {
        return Err(r.err(
            site,
            format!(
                "`warmup` + `cooldown` ({}) leave nothing of `duration` ({}); make the duration longer or them shorter",
                units::format_duration(warmup_d + cooldown_d),
                units::format_duration(d)
            ),
        ));
    }
    let (rate, ramp_up) = rate(
        &r,
        request_rate.as_ref(),
        burstiness.as_ref(),
        ramp_up.as_ref(),
    )?;
    let seed: u64 = r
        .parse("seed", "seed", seed.as_ref(), "a whole number")?
        .unwrap_or(0);
    let tokenizer = match tokenizer {
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
        endpoint: endpoint.unwrap_or(Endpoint::Completions),
        dataset,
        tokenizer,
        ignore_eos: ignore_eos.unwrap_or(false),
        shape: LoadShape {
            max_concurrency,
            rate,
            ramp_up,
            limit,
            warmup: warmup_d,
            cooldown: cooldown_d,
        },
        seed,
        extra_body: extra_body.clone().unwrap_or_default(),
        request_timeout: request_timeout.as_ref().map(|t| t.value.0),
        goodput: super::settings::goodput(&r)?,
        stall_timeout: stall(&r, stall_timeout.as_ref())?,
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
fn stall(
    r: &Resolver<'_, '_>,
    field: Option<&Spanned<Scalar>>,
) -> Result<Option<Duration>, PlanError> {
    let Some((text, site)) = r.text("stall_timeout", "stall_timeout", field)? else {
        return Ok(Some(crate::load::DEFAULT_STALL_TIMEOUT));
    };
    // `off` reads as a bool in YAML 1.1 parsers: `false` means the same.
    if text.eq_ignore_ascii_case("off") || text == "false" {
        return Ok(None);
    }
    match units::parse_duration(&text) {
        Ok(d) if !d.is_zero() => Ok(Some(d)),
        Ok(_) => Err(r.err(
            site,
            "`stall_timeout` must be longer than 0s; write `off` to wait for a silent server for ever"
                .to_string(),
        )),
        Err(e) => Err(r.err(
            site,
            format!("`stall_timeout`: {e}; write a duration such as `2m`, or `off`"),
        )),
    }
}

/// How a point ends: `num_prompts` or `duration` (exactly one).
fn limit(
    r: &Resolver<'_, '_>,
    num_prompts: Option<&Spanned<Scalar>>,
    duration: Option<&Spanned<Scalar>>,
) -> Result<Limit, PlanError> {
    let (b, path) = (r.b, r.b.task.path());
    let n = r.text("num_prompts", "num_prompts", num_prompts)?;
    let d = r.text("duration", "duration", duration)?;
    Ok(match (n, d) {
        (Some((text, site)), None) => match text.parse::<u64>() {
            Ok(n) if n > 0 => Limit::Requests(n),
            _ => {
                return Err(r.err(
                    site,
                    format!("`num_prompts`: `{text}` is not a positive whole number"),
                ));
            }
        },
        (None, Some((text, site))) => Limit::Duration(
            units::parse_duration(&text).map_err(|e| r.err(site, format!("`duration`: {e}")))?,
        ),
        (Some(_), Some((_, site))) => {
            return Err(b
                .at(
                    site.source,
                    site.loc,
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
    request_rate: Option<&Spanned<Scalar>>,
    burstiness: Option<&Spanned<Scalar>>,
    ramp_up: Option<&RampUpSpec>,
) -> Result<(Rate, Option<RampUp>), PlanError> {
    let b = r.b;
    let rate_text = r.text("request_rate", "request_rate", request_rate)?;
    let burst_text = r.text("burstiness", "burstiness", burstiness)?;
    let rps = match &rate_text {
        None => None,
        Some((text, _)) if text == "inf" || text == ".inf" => None,
        Some((text, site)) => Some(
            text.parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v > 0.0)
                .ok_or_else(|| {
                    r.err(
                        *site,
                        format!("`request_rate`: `{text}` is not a positive number or `inf`"),
                    )
                })?,
        ),
    };
    let burst = match &burst_text {
        None => None,
        Some((text, site)) => Some(
            text.parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v > 0.0)
                .ok_or_else(|| {
                    r.err(
                        *site,
                        format!("`burstiness`: `{text}` is not a positive number"),
                    )
                })?,
        ),
    };
    let rate = match (rps, burst) {
        (None, None) => Rate::Unlimited,
        (None, Some(_)) => {
            let site = burst_text
                .as_ref()
                .map(|(_, s)| *s)
                .expect("burstiness was given");
            return Err(b
                .at(site.source, site.loc, "`burstiness` needs a finite `request_rate`")
                .with_help("burstiness shapes the gaps between arrivals; with `request_rate: inf` there are none")
                .into());
        }
        (Some(rps), None) | (Some(rps), Some(1.0)) => Rate::Poisson { rps },
        (Some(rps), Some(burstiness)) => Rate::Gamma { rps, burstiness },
    };
    if ramp_up.is_some()
        && let Some((_, site)) = &rate_text
    {
        return Err(b
            .at(
                site.source,
                site.loc,
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
    Ok((rate, ramp_up))
}

/// The load recorded for a point of an external command without a `dataset`: what the
/// matrix and the benchmark section say about lengths and counts (reports group by them);
/// the command itself decides what it sends.
fn external_load(
    r: &Resolver<'_, '_>,
    num_prompts: Option<&Spanned<Scalar>>,
    duration: Option<&Spanned<Scalar>>,
    seed: Option<&Spanned<Scalar>>,
) -> Result<LoadPlan, PlanError> {
    let none: Option<&Spanned<Scalar>> = None;
    let limit = match r.parse::<u64>("num_prompts", "num_prompts", num_prompts, "a whole number")? {
        Some(n) => Limit::Requests(n),
        None => match r.duration("duration", duration)? {
            Some(d) => Limit::Duration(d),
            None => Limit::Requests(0),
        },
    };
    Ok(LoadPlan {
        endpoint: Endpoint::Completions,
        dataset: DatasetSpec::Random {
            input_len: r.u32("input_len", "dataset", none)?.unwrap_or(0),
            output_len: r.u32("output_len", "dataset", none)?.unwrap_or(0),
            range_ratio: 0.0,
            prefix_len: 0,
        },
        tokenizer: None,
        ignore_eos: false,
        shape: LoadShape {
            max_concurrency: r.u32(
                "concurrency",
                "concurrency",
                r.b.task.spec.benchmark.concurrency.as_ref(),
            )?,
            rate: Rate::Unlimited,
            ramp_up: None,
            limit,
            warmup: Duration::ZERO,
            cooldown: Duration::ZERO,
        },
        seed: r
            .parse("seed", "seed", seed, "a whole number")?
            .unwrap_or(0),
        extra_body: Default::default(),
        request_timeout: None,
        goodput: Vec::new(),
        stall_timeout: Some(crate::load::DEFAULT_STALL_TIMEOUT),
    })
}
