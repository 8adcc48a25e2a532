//! The load of one point: the benchmark section (merged with its profile), overridden by
//! load axes of the same name, templates rendered, parsed into the client's types.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use minijinja::Value as JValue;
use serde_saphyr::{Location, Spanned};

use super::build::Builder;
use super::{LoadPlan, PlanError, Validity};
use crate::client::{Endpoint, Limit, LoadShape, RampUp, Rate};
use crate::dataset::DatasetSpec;
use crate::matrix::{Point, scalar_text};
use crate::spec::values::Scalar;
use crate::spec::{BenchmarkSpec, DatasetKind, DatasetSpecYaml, Diagnostic};
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
    "input_len",
    "output_len",
    "range_ratio",
    "prefix_len",
    "num_groups",
    "prompts_per_group",
    "system_prompt_len",
    "question_len",
];

/// Where a value came from, for errors.
#[derive(Clone, Copy)]
struct Site {
    source: usize,
    loc: Location,
}

struct Resolver<'a, 'b> {
    b: &'a Builder<'b>,
    point: &'a Point,
    vars: &'a JValue,
    axis_locs: &'a BTreeMap<String, Location>,
}

impl Resolver<'_, '_> {
    /// The text of load key `key`: the point's axis value, else the field rendered.
    fn text(
        &self,
        key: &str,
        bench_key: &str,
        field: Option<&Spanned<Scalar>>,
    ) -> Result<Option<(String, Site)>, PlanError> {
        if let Some(v) = self.point.get(key) {
            let site = Site {
                source: self.b.task.bench_source("matrix"),
                loc: self
                    .axis_locs
                    .get(key)
                    .copied()
                    .unwrap_or(Location::UNKNOWN),
            };
            return Ok(Some((scalar_text(v), site)));
        }
        let Some(f) = field else { return Ok(None) };
        let source = self.b.task.bench_source(bench_key);
        let s = Spanned {
            value: f.value.0.clone(),
            referenced: f.referenced,
            defined: f.defined,
        };
        let text = self.b.render(source, key, &s, self.vars)?;
        Ok(Some((
            text.trim().to_string(),
            Site {
                source,
                loc: f.referenced,
            },
        )))
    }

    /// An error about a value of this point (names the point when there is a sweep).
    fn err(&self, site: Site, msg: String) -> PlanError {
        let msg = if self.point.values.is_empty() {
            msg
        } else {
            format!("{msg} (at point {})", self.point.label())
        };
        self.b.at(site.source, site.loc, msg).into()
    }

    fn parse<T: std::str::FromStr>(
        &self,
        key: &str,
        bench_key: &str,
        field: Option<&Spanned<Scalar>>,
        what: &str,
    ) -> Result<Option<T>, PlanError> {
        match self.text(key, bench_key, field)? {
            None => Ok(None),
            Some((text, site)) => text
                .parse::<T>()
                .map(Some)
                .map_err(|_| self.err(site, format!("`{key}`: `{text}` is not {what}"))),
        }
    }

    fn u32(
        &self,
        key: &str,
        bench_key: &str,
        f: Option<&Spanned<Scalar>>,
    ) -> Result<Option<u32>, PlanError> {
        self.parse(key, bench_key, f, "a whole number")
    }

    fn f64(
        &self,
        key: &str,
        bench_key: &str,
        f: Option<&Spanned<Scalar>>,
    ) -> Result<Option<f64>, PlanError> {
        let v: Option<f64> = self.parse(key, bench_key, f, "a number")?;
        Ok(v)
    }

    fn duration(
        &self,
        key: &str,
        f: Option<&Spanned<Scalar>>,
    ) -> Result<Option<Duration>, PlanError> {
        match self.text(key, key, f)? {
            None => Ok(None),
            Some((text, site)) => units::parse_duration(&text)
                .map(Some)
                .map_err(|e| self.err(site, format!("`{key}`: {e}"))),
        }
    }

    fn required(
        &self,
        v: Option<u32>,
        key: &str,
        kind: &str,
        ds_loc: Site,
    ) -> Result<u32, PlanError> {
        v.ok_or_else(|| {
            self.b
                .at(
                    ds_loc.source,
                    ds_loc.loc,
                    format!("the {kind} dataset needs `{key}`"),
                )
                .with_help(format!(
                    "add `{key}:` under dataset, or a matrix axis `{key}`"
                ))
                .into()
        })
    }

    fn dataset(&self, d: &Spanned<DatasetSpecYaml>) -> Result<DatasetSpec, PlanError> {
        let ds_loc = d.referenced;
        let DatasetSpecYaml {
            kind,
            path,
            input_len,
            output_len,
            range_ratio,
            prefix_len,
            num_groups,
            prompts_per_group,
            system_prompt_len,
            question_len,
        } = &d.value;
        let src = self.b.task.bench_source("dataset");
        let site = Site {
            source: src,
            loc: ds_loc,
        };
        let kind_name = match kind {
            DatasetKind::Random => "random",
            DatasetKind::Sharegpt => "sharegpt",
            DatasetKind::Text => "text",
            DatasetKind::SharedPrefix => "shared_prefix",
            DatasetKind::Jsonl => "jsonl",
        };
        // Reject keys that do not apply to this kind instead of ignoring them.
        let allowed: &[&str] = match kind {
            DatasetKind::Random => &["input_len", "output_len", "range_ratio", "prefix_len"],
            DatasetKind::Sharegpt => &["path", "input_len", "output_len"],
            DatasetKind::Text => &["path", "input_len", "output_len"],
            DatasetKind::SharedPrefix => &[
                "num_groups",
                "prompts_per_group",
                "system_prompt_len",
                "question_len",
                "output_len",
            ],
            DatasetKind::Jsonl => &["path", "output_len"],
        };
        let scalar_fields = [
            ("input_len", input_len),
            ("output_len", output_len),
            ("range_ratio", range_ratio),
            ("prefix_len", prefix_len),
            ("num_groups", num_groups),
            ("prompts_per_group", prompts_per_group),
            ("system_prompt_len", system_prompt_len),
            ("question_len", question_len),
        ];
        for (key, f) in scalar_fields {
            if let Some(f) = f
                && !allowed.contains(&key)
            {
                return Err(self
                    .b
                    .at(
                        src,
                        f.referenced,
                        format!("`{key}` does not apply to the {kind_name} dataset"),
                    )
                    .with_help(format!("{kind_name} takes: {}", allowed.join(", ")))
                    .into());
            }
        }
        if let Some(p) = path
            && !allowed.contains(&"path")
        {
            return Err(self
                .b
                .at(
                    src,
                    p.referenced,
                    format!("`path` does not apply to the {kind_name} dataset"),
                )
                .into());
        }
        let file = |required: bool| -> Result<Option<PathBuf>, PlanError> {
            match path {
                Some(p) => {
                    let text = self.b.render(src, "dataset.path", p, self.vars)?;
                    let base = self.b.task.sources[src]
                        .path
                        .parent()
                        .unwrap_or(Path::new("."));
                    Ok(Some(base.join(text)))
                }
                None if required => Err(Diagnostic::file(
                    &self.b.task.sources[src].path,
                    format!("the {kind_name} dataset needs `path`"),
                )
                .into()),
                None => Ok(None),
            }
        };
        let u = |key: &str, f: &Option<Spanned<Scalar>>| self.u32(key, "dataset", f.as_ref());
        Ok(match kind {
            DatasetKind::Random => {
                let ratio = self
                    .f64("range_ratio", "dataset", range_ratio.as_ref())?
                    .unwrap_or(0.0);
                if !(0.0..1.0).contains(&ratio) {
                    return Err(self.err(site, format!("`range_ratio` {ratio} must be in [0, 1)")));
                }
                DatasetSpec::Random {
                    input_len: self.required(
                        u("input_len", input_len)?,
                        "input_len",
                        kind_name,
                        site,
                    )?,
                    output_len: self.required(
                        u("output_len", output_len)?,
                        "output_len",
                        kind_name,
                        site,
                    )?,
                    range_ratio: ratio,
                    prefix_len: u("prefix_len", prefix_len)?.unwrap_or(0),
                }
            }
            DatasetKind::Sharegpt => DatasetSpec::ShareGpt {
                path: file(true)?.unwrap_or_default(),
                input_len: u("input_len", input_len)?,
                output_len: u("output_len", output_len)?,
            },
            DatasetKind::Text => DatasetSpec::Text {
                path: file(true)?.unwrap_or_default(),
                input_len: self.required(
                    u("input_len", input_len)?,
                    "input_len",
                    kind_name,
                    site,
                )?,
                output_len: self.required(
                    u("output_len", output_len)?,
                    "output_len",
                    kind_name,
                    site,
                )?,
            },
            DatasetKind::SharedPrefix => DatasetSpec::SharedPrefix {
                num_groups: self.required(
                    u("num_groups", num_groups)?,
                    "num_groups",
                    kind_name,
                    site,
                )?,
                prompts_per_group: self.required(
                    u("prompts_per_group", prompts_per_group)?,
                    "prompts_per_group",
                    kind_name,
                    site,
                )?,
                system_prompt_len: self.required(
                    u("system_prompt_len", system_prompt_len)?,
                    "system_prompt_len",
                    kind_name,
                    site,
                )?,
                question_len: self.required(
                    u("question_len", question_len)?,
                    "question_len",
                    kind_name,
                    site,
                )?,
                output_len: self.required(
                    u("output_len", output_len)?,
                    "output_len",
                    kind_name,
                    site,
                )?,
            },
            DatasetKind::Jsonl => DatasetSpec::Jsonl {
                path: file(true)?.unwrap_or_default(),
                output_len: u("output_len", output_len)?,
            },
        })
    }
}

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
        return external_load(&r, num_prompts.as_ref(), duration.as_ref(), seed.as_ref());
    }
    let Some(dataset) = dataset else {
        return Err(Diagnostic::file(path, "missing `benchmark.dataset`")
            .with_help("add e.g. `dataset: {kind: random, input_len: 1024, output_len: 128}` under benchmark")
            .into());
    };
    let dataset = r.dataset(dataset)?;
    let n = r.text("num_prompts", "num_prompts", num_prompts.as_ref())?;
    let d = r.text("duration", "duration", duration.as_ref())?;
    let limit = match (n, d) {
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
    };
    let max_concurrency = r.u32("concurrency", "concurrency", concurrency.as_ref())?;
    if max_concurrency == Some(0) {
        return Err(Diagnostic::file(path, "`concurrency` must be at least 1").into());
    }
    let rate_text = r.text("request_rate", "request_rate", request_rate.as_ref())?;
    let burst_text = r.text("burstiness", "burstiness", burstiness.as_ref())?;
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
    let ramp_up = ramp_up.as_ref().map(|ru| RampUp {
        strategy: ru.strategy,
        start_rps: ru.start_rps,
        end_rps: ru.end_rps,
    });
    let seed: u64 = r
        .parse("seed", "seed", seed.as_ref(), "a whole number")?
        .unwrap_or(0);
    let tokenizer = match tokenizer {
        Some(t) => Some(b.render(b.task.bench_source("tokenizer"), "tokenizer", t, vars)?),
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
            warmup: r.duration("warmup", warmup.as_ref())?.unwrap_or_default(),
            cooldown: r
                .duration("cooldown", cooldown.as_ref())?
                .unwrap_or_default(),
        },
        seed,
        extra_body: extra_body.clone().unwrap_or_default(),
        request_timeout: request_timeout.as_ref().map(|t| t.value.0),
    })
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
    })
}

/// `benchmark.repetitions` (default 1, at least 1).
pub fn repetitions(b: &Builder<'_>) -> Result<u32, PlanError> {
    match &b.task.spec.benchmark.repetitions {
        None => Ok(1),
        Some(r) if r.value >= 1 => Ok(r.value),
        Some(r) => Err(b
            .at(
                b.task.bench_source("repetitions"),
                r.referenced,
                "`repetitions` must be at least 1",
            )
            .into()),
    }
}

/// `benchmark.check.thresholds`, each `+N%` or `-N%`.
pub fn thresholds(b: &Builder<'_>) -> Result<BTreeMap<String, String>, PlanError> {
    let mut out = BTreeMap::new();
    let Some(check) = &b.task.spec.benchmark.check else {
        return Ok(out);
    };
    for (metric, t) in &check.thresholds {
        let v = t.value.trim();
        let ok = (v.starts_with('+') || v.starts_with('-'))
            && v.ends_with('%')
            && v[1..v.len() - 1]
                .parse::<f64>()
                .is_ok_and(|x| x.is_finite() && x >= 0.0);
        if !ok {
            return Err(b
                .at(
                    b.task.bench_source("check"),
                    t.referenced,
                    format!("threshold `{v}` of `{metric}` is not a signed percentage"),
                )
                .with_help("write \"-5%\" (may drop by 5%) or \"+10%\" (may rise by 10%)")
                .into());
        }
        out.insert(metric.clone(), v.to_string());
    }
    Ok(out)
}

/// `benchmark.validity` with defaults.
pub fn validity(b: &Builder<'_>) -> Validity {
    let d = Validity::default();
    match &b.task.spec.benchmark.validity {
        None => d,
        Some(v) => Validity {
            max_error_rate: v.max_error_rate.unwrap_or(d.max_error_rate),
            length_tolerance: v.length_tolerance.unwrap_or(d.length_tolerance),
        },
    }
}
