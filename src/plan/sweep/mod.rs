//! The sweep of a task: matrix axes checked against built-in names, expanded into points,
//! classified (an axis read by the deployment splits deployments; a load axis does not; an
//! axis read by nothing is an error) and grouped into deployments. Each point's load axes
//! are read to their types here, once (`load_axis`).

mod load_axis;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use serde_saphyr::{Location, Spanned};

pub(super) use self::load_axis::{
    Axis, BURSTINESS, CONCURRENCY, COOLDOWN, DURATION, GOODPUT, INPUT_LEN, LoadAxis, LoadValues,
    NUM_GROUPS, NUM_PROMPTS, OUTPUT_LEN, PREFIX_LEN, PROMPTS_PER_GROUP, Parsed, QUESTION_LEN,
    RANGE_RATIO, REQUEST_RATE, SEED, STALL_TIMEOUT, SYSTEM_PROMPT_LEN, WARMUP, Written, template,
};
use super::render::{Builder, DEPLOYMENT_FIELD_AXES, reserved_names};
use super::role::RoleDef;
use super::types::PlanError;
use crate::matrix::{self, Point};
use crate::spec::{Diagnostic, MatrixSpec, TASK_SOURCE};

/// The axis that picks named deployments (`deployments:`); its value is the name.
pub(super) const DEPLOYMENT_AXIS: &str = "deployment";

/// Points grouped by deployment, and where each axis is written.
pub(super) struct Sweep {
    /// Deployment-axis values -> the points of that deployment, in first-seen order.
    pub groups: Vec<(BTreeMap<String, Value>, Vec<SweptPoint>)>,
    pub axis_locs: BTreeMap<String, Location>,
}

/// A point of the sweep with its load axes read.
pub(super) struct SweptPoint {
    pub point: Point,
    pub load: LoadValues,
}

/// Expand and group the task's matrix. `deploy_strings` are the deployment's templates
/// (besides the roles' env values).
pub(super) fn sweep(
    b: &Builder<'_>,
    deploy_strings: &[&Spanned<String>],
    role_defs: &[RoleDef<'_>],
) -> Result<Sweep, PlanError> {
    let t = TASK_SOURCE;
    let benchmark = &b.task.spec.benchmark;
    // The sweep.
    let matrix_spec = benchmark.matrix.clone().unwrap_or_default();
    let msrc = b.task.bench_source("matrix");
    let mut axis_locs: BTreeMap<String, Location> = BTreeMap::new();
    for a in &matrix_spec.axes {
        let n = &a.name.value;
        if n == DEPLOYMENT_AXIS && b.named.is_none() {
            return Err(b
                .at(
                    msrc,
                    a.name.referenced,
                    "axis `deployment` picks named deployments, but the task has no `deployments`",
                )
                .with_help("add a `deployments:` map, or rename the axis")
                .into());
        }
        let reserved = reserved_names();
        if reserved.contains(&n.as_str()) {
            return Err(b
                .at(
                    msrc,
                    a.name.referenced,
                    format!("axis `{n}` reuses the name of a built-in variable"),
                )
                .with_help(format!("rename it; built-ins are: {}", reserved.join(", ")))
                .into());
        }
        axis_locs.insert(n.clone(), a.name.referenced);
    }
    let axes: Vec<(String, Vec<Value>)> = matrix_spec
        .axes
        .iter()
        .map(|a| (a.name.value.clone(), a.values.clone()))
        .collect();
    check_excludes(b, msrc, &matrix_spec, &axis_locs)?;
    check_size(b, msrc, &matrix_spec)?;
    let points = matrix::expand(&axes, &matrix_spec.include, &matrix_spec.exclude);
    let mut keys: Vec<String> = Vec::new();
    for p in &points {
        for (k, _) in &p.values {
            if !keys.contains(k) {
                keys.push(k.clone());
            }
        }
    }

    // Which axes change the deployment: those its strings read (or image/model).
    let mut deploy_vars = BTreeSet::new();
    for s in deploy_strings.iter().copied().chain(
        role_defs
            .iter()
            .flat_map(|r| r.env.iter().map(|e| &e.value)),
    ) {
        deploy_vars.extend(b.vars(t, s)?);
    }
    let mut load_vars = load_vars(b)?;
    load_vars.extend(super::external::vars(b)?);
    let mut deploy_axes = Vec::new();
    for k in &keys {
        let is_deploy = DEPLOYMENT_FIELD_AXES.contains(&k.as_str())
            || deploy_vars.contains(k)
            || k == DEPLOYMENT_AXIS;
        let is_load = LoadAxis::named(k).is_some() || load_vars.contains(k);
        if is_deploy {
            deploy_axes.push(k.clone());
        } else if !is_load && b.named.is_some() {
            // Another named deployment may read it; the caller checks that one does.
            b.unused_axes.borrow_mut().insert(k.clone());
        } else if !is_load {
            let msg = format!("axis `{k}` is not used by any field");
            let help = format!(
                "use it in a template (`{{{{ {k} }}}}` in commands, env or image), or name it after a load key: {}",
                LoadAxis::ALL
                    .iter()
                    .map(|a| a.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            let include_loc = matrix_spec
                .include
                .iter()
                .zip(&matrix_spec.include_locs)
                .find(|(inc, _)| inc.contains_key(k))
                .map(|(_, loc)| *loc);
            let d = match (axis_locs.get(k), include_loc) {
                (Some(loc), _) => b.at(msrc, *loc, msg),
                (None, Some(loc)) => b.at(msrc, loc, format!("{msg} (it comes from `include`)")),
                (None, None) => Diagnostic::file(
                    &b.task.sources[msrc].path,
                    format!("{msg} (it comes from `include`)"),
                ),
            };
            return Err(d.with_help(help).into());
        }
    }

    // Group points by their deployment-axis values, in first-seen order.
    let mut groups: Vec<(BTreeMap<String, Value>, Vec<SweptPoint>)> = Vec::new();
    for point in points {
        let p = SweptPoint {
            load: LoadValues::of(&point),
            point,
        };
        let key: BTreeMap<String, Value> = deploy_axes
            .iter()
            .filter_map(|k| p.point.get(k).map(|v| (k.clone(), v.clone())))
            .collect();
        match groups.iter_mut().find(|(g, _)| *g == key) {
            Some((_, ps)) => ps.push(p),
            None => groups.push((key, vec![p])),
        }
    }

    Ok(Sweep { groups, axis_locs })
}

/// Template variables read by the benchmark section (so an axis used only there is a load
/// axis, not an unused one): the fields load axes override, the dataset's path and the
/// tokenizer.
fn load_vars(b: &Builder<'_>) -> Result<BTreeSet<String>, PlanError> {
    let bench = &b.task.spec.benchmark;
    let mut out = BTreeSet::new();
    for (key, field) in LoadAxis::ALL.iter().filter_map(|a| a.field(bench)) {
        out.extend(b.vars(b.task.bench_source(key), &template(field))?);
    }
    if let Some(p) = bench.dataset.as_ref().and_then(|d| d.value.path.as_ref()) {
        out.extend(b.vars(b.task.bench_source("dataset"), p)?);
    }
    if let Some(t) = &bench.tokenizer {
        out.extend(b.vars(b.task.bench_source("tokenizer"), t)?);
    }
    Ok(out)
}

/// The most points a matrix may expand to: more is a mistake, and would take the memory of
/// the machine before anything runs.
const MAX_POINTS: u128 = 100_000;

/// Every `exclude` key names an axis: a misspelled one would silently match nothing.
fn check_excludes(
    b: &Builder<'_>,
    msrc: usize,
    m: &MatrixSpec,
    axis_locs: &BTreeMap<String, Location>,
) -> Result<(), PlanError> {
    for (ex, loc) in m.exclude.iter().zip(&m.exclude_locs) {
        if let Some(k) = ex.keys().find(|k| !axis_locs.contains_key(*k)) {
            let axes: Vec<&str> = axis_locs.keys().map(String::as_str).collect();
            return Err(b
                .at(
                    msrc,
                    *loc,
                    format!("`exclude` names `{k}`, which is not an axis of the matrix"),
                )
                .with_help(format!(
                    "an exclude entry matches axis values; the axes are: {}",
                    axes.join(", ")
                ))
                .into());
        }
    }
    Ok(())
}

/// The number of points, computed before expanding, is at most [`MAX_POINTS`].
fn check_size(b: &Builder<'_>, msrc: usize, m: &MatrixSpec) -> Result<(), PlanError> {
    let product = m.axes.iter().try_fold(1u128, |acc, a| {
        acc.checked_mul(a.values.len() as u128)
            .filter(|n| *n <= MAX_POINTS)
    });
    let total = product.map(|p| p + m.include.len() as u128);
    if total.is_some_and(|n| n <= MAX_POINTS) {
        return Ok(());
    }
    let sizes: Vec<String> = m
        .axes
        .iter()
        .map(|a| format!("{} ({})", a.name.value, a.values.len()))
        .collect();
    let count = m
        .axes
        .iter()
        .try_fold(1u128, |acc, a| acc.checked_mul(a.values.len() as u128))
        .map_or_else(|| "more than 10^38".to_string(), |n| n.to_string());
    let loc = m
        .axes
        .first()
        .map_or(Location::UNKNOWN, |a| a.name.referenced);
    Err(b
        .at(
            msrc,
            loc,
            format!("the matrix has {count} points, more than {MAX_POINTS}; sweep fewer values"),
        )
        .with_help(format!("the axes and their sizes: {}", sizes.join(", ")))
        .into())
}
