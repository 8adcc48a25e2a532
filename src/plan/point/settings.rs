//! Benchmark settings that are the same for every point (repetitions, regression
//! thresholds and validity bounds), and the goodput SLOs of a point (`benchmark.goodput`,
//! or a matrix axis `goodput`).

use std::collections::BTreeMap;

use super::resolver::{Resolver, Site};
use crate::load::Slo;
use crate::plan::render::Builder;
use crate::plan::sweep::GOODPUT;
use crate::plan::types::{PlanError, Validity};

/// `benchmark.repetitions` (default 1, at least 1).
pub(in crate::plan) fn repetitions(b: &Builder<'_>) -> Result<u32, PlanError> {
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

/// `benchmark.prefix_block_size` (default 16, at least 1).
pub(in crate::plan) fn prefix_block_size(b: &Builder<'_>) -> Result<u32, PlanError> {
    match &b.task.spec.benchmark.prefix_block_size {
        None => Ok(crate::load::DEFAULT_PREFIX_BLOCK_TOKENS),
        Some(n) if n.value >= 1 => Ok(n.value),
        Some(n) => Err(b
            .at(
                b.task.bench_source("prefix_block_size"),
                n.referenced,
                "`prefix_block_size` must be at least 1 token; write the server's `--block-size` (vLLM's default is 16)",
            )
            .into()),
    }
}

/// `benchmark.percentiles`: each above 0 and at most 100, at least one (default `[99]`,
/// vLLM's `--metric-percentiles`), plus the percentiles of `search.slo`, so that every
/// summary holds what the search's SLOs read (the report's Pareto view judges points by them).
pub(in crate::plan) fn percentiles(b: &Builder<'_>) -> Result<Vec<f64>, PlanError> {
    let mut out = match &b.task.spec.benchmark.percentiles {
        None => crate::load::default_percentiles(),
        Some(list) => {
            let bad = list.value.iter().find(|p| !(**p > 0.0 && **p <= 100.0));
            if list.value.is_empty() || bad.is_some() {
                let what = bad.map_or("an empty list".to_string(), |p| format!("`{p}`"));
                return Err(b
                    .at(
                        b.task.bench_source("percentiles"),
                        list.referenced,
                        format!("`percentiles` has {what}: each must be above 0 and at most 100"),
                    )
                    .with_help("write percentiles like [50, 90, 99] (vLLM's --metric-percentiles)")
                    .into());
            }
            list.value.clone()
        }
    };
    // A `search.slo` that does not read is `search`'s error to tell.
    let searched = b
        .task
        .spec
        .benchmark
        .search
        .iter()
        .flat_map(|s| &s.value.slo);
    for slo in searched.filter_map(|s| crate::load::search::PercentileSlo::parse(&s.value).ok()) {
        if !out.contains(&slo.percentile) {
            out.push(slo.percentile);
        }
    }
    Ok(out)
}

/// `benchmark.timeseries_interval`: a duration of at least 100ms (default 1s), or `off`
/// (`None`; also `false`).
pub(in crate::plan) fn timeseries_interval(
    b: &Builder<'_>,
) -> Result<Option<std::time::Duration>, PlanError> {
    use crate::load::{DEFAULT_TIMESERIES_INTERVAL, MIN_TIMESERIES_INTERVAL};
    let Some(v) = &b.task.spec.benchmark.timeseries_interval else {
        return Ok(Some(DEFAULT_TIMESERIES_INTERVAL));
    };
    let text = v.value.trim();
    if text.eq_ignore_ascii_case("off") || text.eq_ignore_ascii_case("false") {
        return Ok(None);
    }
    let wrong = |why: String| -> PlanError {
        b.at(
            b.task.bench_source("timeseries_interval"),
            v.referenced,
            format!("`timeseries_interval`: {why}; write a duration such as `1s` or `500ms`, or `off` to keep no time series"),
        )
        .into()
    };
    match crate::units::parse_duration(text) {
        Ok(d) if d >= MIN_TIMESERIES_INTERVAL => Ok(Some(d)),
        Ok(d) => Err(wrong(format!(
            "{} is shorter than the {} the servers' /metrics can be scraped at",
            crate::units::format_duration(d),
            crate::units::format_duration(MIN_TIMESERIES_INTERVAL)
        ))),
        Err(e) => Err(wrong(e.to_string())),
    }
}

/// `benchmark.check.thresholds`, each `+N%` or `-N%`.
pub(in crate::plan) fn thresholds(b: &Builder<'_>) -> Result<BTreeMap<String, String>, PlanError> {
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
pub(in crate::plan) fn validity(b: &Builder<'_>) -> Validity {
    let d = Validity::default();
    match &b.task.spec.benchmark.validity {
        None => d,
        Some(v) => Validity {
            max_error_rate: v.max_error_rate.map_or(d.max_error_rate, |f| f.0),
            length_tolerance: v.length_tolerance.unwrap_or(d.length_tolerance),
            max_dispatch_lag_ms: v.max_dispatch_lag_ms.map_or(d.max_dispatch_lag_ms, |x| x.0),
            min_delivered_concurrency: v
                .min_delivered_concurrency
                .map_or(d.min_delivered_concurrency, |f| f.0),
            max_event_loop_lag_ms: v
                .max_event_loop_lag_ms
                .map_or(d.max_event_loop_lag_ms, |x| x.0),
            over_saturation: v.over_saturation.unwrap_or(d.over_saturation),
        },
    }
}

/// The goodput SLOs of a point: its `goodput` axis (vLLM's string `"ttft:200 tpot:50"`),
/// else `benchmark.goodput` (validated when the file was read); empty
/// when neither is given.
pub(super) fn goodput(r: &Resolver<'_, '_>) -> Result<Vec<Slo>, PlanError> {
    match &r.load.goodput {
        None => Ok(bench_goodput(r.b)),
        Some(Ok(slos)) => Ok(slos.clone()),
        Some(Err(e)) => Err(r.err(r.axis_site(GOODPUT.axis.name()), format!("`goodput`: {e}"))),
    }
}

/// `benchmark.goodput` as written (empty without it).
pub(super) fn bench_goodput(b: &Builder<'_>) -> Vec<Slo> {
    b.task
        .spec
        .benchmark
        .goodput
        .as_ref()
        .map(|g| g.value.0.clone())
        .unwrap_or_default()
}

/// An `external` command's points get no goodput (its output has no per-request times):
/// `benchmark.goodput` or a `goodput` axis there is an error rather than silently ignored.
pub(super) fn no_goodput(r: &Resolver<'_, '_>) -> Result<(), PlanError> {
    let site = match (&r.b.task.spec.benchmark.goodput, &r.load.goodput) {
        (_, Some(_)) => r.axis_site(GOODPUT.axis.name()),
        (Some(g), None) => Site {
            source: r.b.task.bench_source("goodput"),
            loc: g.referenced,
        },
        (None, None) => return Ok(()),
    };
    Err(r
        .b
        .at(
            site.source,
            site.loc,
            "`goodput` needs the embedded client: an `external` command's points have no per-request times to judge",
        )
        .with_help("remove `goodput`, or give the benchmark a `dataset` instead of `external`")
        .into())
}
