//! The sweep of a task: matrix axes checked against built-in names, expanded into points,
//! classified (an axis read by the deployment splits deployments; a load axis does not; an
//! axis read by nothing is an error) and grouped into deployments.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use serde_saphyr::{Location, Spanned};

use super::PlanError;
use super::build::{Builder, DEPLOYMENT_FIELD_AXES, reserved_names};
use super::point::{self, LOAD_AXES};
use super::role::RoleDef;
use crate::matrix::{self, Point};
use crate::spec::{Diagnostic, TASK_SOURCE};

/// Points grouped by deployment, and where each axis is written.
pub(super) struct Sweep {
    /// Deployment-axis values -> the points of that deployment, in first-seen order.
    pub groups: Vec<(BTreeMap<String, Value>, Vec<Point>)>,
    pub axis_locs: BTreeMap<String, Location>,
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
    let mut load_vars = point::load_vars(b)?;
    load_vars.extend(super::external::vars(b)?);
    let mut deploy_axes = Vec::new();
    for k in &keys {
        let is_deploy = DEPLOYMENT_FIELD_AXES.contains(&k.as_str()) || deploy_vars.contains(k);
        let is_load = LOAD_AXES.contains(&k.as_str()) || load_vars.contains(k);
        if is_deploy {
            deploy_axes.push(k.clone());
        } else if !is_load {
            let msg = format!("axis `{k}` is not used by any field");
            let help = format!(
                "use it in a template (`{{{{ {k} }}}}` in commands, env or image), or name it after a load key: {}",
                LOAD_AXES.join(", ")
            );
            let d = match axis_locs.get(k) {
                Some(loc) => b.at(msrc, *loc, msg),
                None => Diagnostic::file(
                    &b.task.sources[msrc].path,
                    format!("{msg} (it comes from `include`)"),
                ),
            };
            return Err(d.with_help(help).into());
        }
    }

    // Group points by their deployment-axis values, in first-seen order.
    let mut groups: Vec<(BTreeMap<String, Value>, Vec<Point>)> = Vec::new();
    for p in points {
        let key: BTreeMap<String, Value> = deploy_axes
            .iter()
            .filter_map(|k| p.get(k).map(|v| (k.clone(), v.clone())))
            .collect();
        match groups.iter_mut().find(|(g, _)| *g == key) {
            Some((_, ps)) => ps.push(p),
            None => groups.push((key, vec![p])),
        }
    }

    Ok(Sweep { groups, axis_locs })
}
