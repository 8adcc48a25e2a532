//! `benchmark.search` read into a [`SearchSpec`]: each key checked where it is written
//! (file:line:col), and what a search needs of the rest of the task: the embedded client,
//! one load per deployment (the search moves the searched axis itself), the searched axis
//! not also fixed by `concurrency` or `request_rate`, and `goodput` bounds for attainment.

use serde_saphyr::{Location, Spanned};

use crate::load::search::Attainment;
use crate::load::search::{Axis, PercentileSlo, SearchSpec};
use crate::plan::render::Builder;
use crate::plan::types::{DeploymentPlan, PlanError};

/// `benchmark.search` checked and typed; `None` when the task has none.
pub(in crate::plan) fn search(b: &Builder<'_>) -> Result<Option<SearchSpec>, PlanError> {
    let Some(y) = &b.task.spec.benchmark.search else {
        return Ok(None);
    };
    let source = b.task.bench_source("search");
    let at = |loc: Location, msg: String, help: &str| -> PlanError {
        b.at(source, loc, msg).with_help(help.to_string()).into()
    };
    let s = &y.value;
    let axis = Axis::parse(&s.axis.value).ok_or_else(|| {
        at(
            s.axis.referenced,
            format!("`search.axis` `{}` is not a load axis", s.axis.value),
            "write `axis: concurrency` or `axis: request_rate`",
        )
    })?;
    let mut spec = SearchSpec::new(axis, s.min.as_ref().map_or(1.0, |m| m.value), None);
    spec.max = s.max.as_ref().map(|m| m.value);
    for slo in &s.slo {
        let p = PercentileSlo::parse(&slo.value).map_err(|e| {
            at(
                slo.referenced,
                format!("`search.slo` {e}"),
                "see docs/task-file.md (benchmark.search)",
            )
        })?;
        spec.percentiles.push(p);
    }
    if let Some(a) = &s.attainment {
        spec.attainment = Some(Attainment {
            bounds: super::settings::bench_goodput(b),
            fraction: a.value / 100.0,
        });
    }
    let set = |v: &Option<Spanned<f64>>, field: &mut f64| {
        if let Some(v) = v {
            *field = v.value;
        }
    };
    set(&s.width, &mut spec.width);
    set(&s.confidence, &mut spec.confidence);
    set(&s.growth, &mut spec.growth);
    let set_n = |v: &Option<Spanned<u32>>, field: &mut u32| {
        if let Some(v) = v {
            *field = v.value;
        }
    };
    set_n(&s.max_points, &mut spec.max_points);
    set_n(&s.repetitions, &mut spec.repetitions);
    set_n(&s.repeat_deployments, &mut spec.repeat_deployments);
    // The setting an error is about is the first the message names.
    let named = std::cell::RefCell::new(None::<String>);
    let field = |name: &str| {
        let key = name.replace('-', "_");
        named.borrow_mut().get_or_insert_with(|| key.clone());
        format!("`search.{key}`")
    };
    if let Err(e) = spec.validate(field) {
        let key = named.borrow().clone().unwrap_or_default();
        let loc = location(s, &key).unwrap_or(y.referenced);
        return Err(at(
            loc,
            e,
            "see docs/task-file.md (benchmark.search) for each key's range",
        ));
    }
    Ok(Some(spec))
}

/// Where key `key` of `search` is written, when it is.
fn location(s: &crate::spec::SearchYaml, key: &str) -> Option<Location> {
    let f = |v: &Option<Spanned<f64>>| v.as_ref().map(|v| v.referenced);
    let n = |v: &Option<Spanned<u32>>| v.as_ref().map(|v| v.referenced);
    match key {
        "min" => f(&s.min),
        "max" => f(&s.max),
        "slo" => s.slo.first().map(|v| v.referenced),
        "attainment" => f(&s.attainment),
        "width" => f(&s.width),
        "confidence" => f(&s.confidence),
        "growth" => f(&s.growth),
        "max_points" => n(&s.max_points),
        "repetitions" => n(&s.repetitions),
        "repeat_deployments" => n(&s.repeat_deployments),
        _ => None,
    }
}

/// What a search needs of the planned deployments: one load each, measured by the
/// embedded client, that does not fix the searched axis.
pub(in crate::plan) fn check_deployments(
    b: &Builder<'_>,
    spec: &SearchSpec,
    deployments: &[DeploymentPlan],
) -> Result<(), PlanError> {
    let Some(y) = &b.task.spec.benchmark.search else {
        return Ok(());
    };
    let wrong = |msg: String, help: &str| -> PlanError {
        b.at(b.task.bench_source("search"), y.referenced, msg)
            .with_help(help.to_string())
            .into()
    };
    for d in deployments {
        let [point] = &d.points[..] else {
            return Err(wrong(
                format!(
                    "a search moves `{}` itself, but deployment {} has {} loads to search from",
                    spec.axis.name(),
                    d.id,
                    d.points.len()
                ),
                "leave load axes (concurrency, request_rate, lengths...) out of `matrix`: a search runs once per deployment",
            ));
        };
        if point.external.is_some() {
            return Err(wrong(
                "a search needs the embedded client's per-request times, not an `external` command"
                    .into(),
                "remove `external`, or `search`",
            ));
        }
        let fixed = match spec.axis {
            Axis::Concurrency => point.load.shape.max_concurrency.is_some(),
            Axis::RequestRate => !matches!(point.load.shape.rate, crate::load::Rate::Unlimited),
        };
        if fixed {
            return Err(wrong(
                format!(
                    "`{}` is set, but the search sets it for every level",
                    spec.axis.name()
                ),
                "leave it out (a request-rate search may keep `concurrency` as a cap, and the reverse)",
            ));
        }
    }
    Ok(())
}
