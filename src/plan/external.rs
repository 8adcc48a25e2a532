//! `benchmark.external` resolved for one point: the command rendered with the point's
//! variables, where it runs (checked against the role's image), the preset and metric
//! rules checked (known preset, one source per metric, regexes with a capture group, valid
//! JSON paths). Every error is located in the task file.

use std::collections::{BTreeMap, BTreeSet};

use minijinja::Value as JValue;
use serde_saphyr::Spanned;

use super::render::Builder;
use super::types::{HostPlan, PlanError, RolePlan};
use crate::external::{self, ExternalPlan, JsonPath, MetricRule, Place, Preset, Source};
use crate::spec::{ExternalSpec, MetricSourceSpec};

/// Template variables `external` reads (axes used only there are load axes).
pub(super) fn vars(b: &Builder<'_>) -> Result<BTreeSet<String>, PlanError> {
    let mut out = BTreeSet::new();
    if let Some(e) = &b.task.spec.benchmark.external {
        let src = b.task.bench_source("external");
        out.extend(b.vars(src, &e.command)?);
        if let Some(f) = &e.result_file {
            out.extend(b.vars(src, f)?);
        }
    }
    Ok(out)
}

/// The external command of a point, or `None` when the task has none.
pub(super) fn plan(
    b: &Builder<'_>,
    roles: &[RolePlan],
    entry_role: &str,
    vars: &JValue,
) -> Result<Option<ExternalPlan>, PlanError> {
    let Some(spec) = &b.task.spec.benchmark.external else {
        return Ok(None);
    };
    let ExternalSpec {
        command,
        place,
        role,
        preset,
        result_file,
        metrics,
        timeout,
    } = spec;
    let src = b.task.bench_source("external");
    let (role_name, place) = role_and_place(b, roles, entry_role, role.as_ref(), place.as_ref())?;
    let preset = match preset {
        None => None,
        Some(p) => Some(Preset::from_name(&p.value).ok_or_else(|| {
            let names: Vec<&str> = Preset::ALL.iter().map(|p| p.name()).collect();
            b.at(src, p.referenced, format!("unknown preset `{}`", p.value))
                .with_help(crate::spec::diagnostic::suggest(&p.value, &names))
        })?),
    };
    if preset.is_none() && metrics.is_empty() {
        return Err(b
            .at(src, command.referenced, "`external` needs a `preset` or `metrics`")
            .with_help(format!(
                "name the tool's output format (preset: {}) or say where each metric is, e.g. `metrics: {{output_throughput: {{regex: '([0-9.]+) output tokens/s'}}}}`",
                Preset::ALL.iter().map(|p| p.name()).collect::<Vec<_>>().join(", ")
            ))
            .into());
    }
    let custom = metric_rules(b, metrics)?;
    let result_file = match result_file {
        Some(f) => Some(b.render(src, "external.result_file", f, vars)?),
        None => None,
    };
    Ok(Some(ExternalPlan {
        command: b.render(src, "external.command", command, vars)?,
        place,
        role: role_name,
        preset,
        result_file,
        metrics: external::merge_rules(preset, custom),
        timeout: timeout
            .as_ref()
            .map_or(external::DEFAULT_TIMEOUT, |t| t.value.0),
    }))
}

/// The role the command runs next to (default: the entry role) and where: `where`, else in
/// the container when the role has an image.
fn role_and_place(
    b: &Builder<'_>,
    roles: &[RolePlan],
    entry_role: &str,
    role: Option<&Spanned<String>>,
    place: Option<&Spanned<String>>,
) -> Result<(String, Place), PlanError> {
    let src = b.task.bench_source("external");
    let role_name = match role {
        None => entry_role.to_string(),
        Some(r) => {
            if !roles.iter().any(|p| p.name == r.value) {
                let names: Vec<&str> = roles.iter().map(|p| p.name.as_str()).collect();
                return Err(b
                    .at(
                        src,
                        r.referenced,
                        format!("`external.role` names unknown role `{}`", r.value),
                    )
                    .with_help(crate::spec::diagnostic::suggest(&r.value, &names))
                    .into());
            }
            r.value.clone()
        }
    };
    let role_plan = roles.iter().find(|p| p.name == role_name);
    let has_image = role_plan.is_some_and(|p| p.image.is_some());
    // The command runs next to the role's first instance; with an image on a remote host
    // that is a remote Docker engine, whose host this machine cannot run commands on.
    let remote_engine = role_plan
        .filter(|p| p.image.is_some())
        .and_then(|p| p.instances.first())
        .and_then(|i| match &i.host {
            HostPlan::Remote { name, .. } => Some(name.clone()),
            HostPlan::Slurm(slurm) => Some(slurm.name.clone()),
            HostPlan::Kubernetes(place) => Some(place.cluster.name.clone()),
            HostPlan::Local => None,
        });
    let place = match place {
        None if has_image => Place::Container,
        None => Place::Host,
        Some(p) => match p.value.as_str() {
            "host" => match remote_engine {
                None => Place::Host,
                Some(host) => {
                    return Err(b
                        .at(
                            src,
                            p.referenced,
                            format!(
                                "`where: host` but role `{role_name}` runs in Docker on remote host `{host}`"
                            ),
                        )
                        .with_help(
                            "write `where: container` (the command runs inside the server's container), or run the role without `image`",
                        )
                        .into());
                }
            },
            "container" if has_image => Place::Container,
            "container" => {
                return Err(b
                    .at(
                        src,
                        p.referenced,
                        format!("`where: container` but role `{role_name}` has no image"),
                    )
                    .with_help("add `image:` to run in a container, or write `where: host`")
                    .into());
            }
            other => {
                return Err(b
                    .at(
                        src,
                        p.referenced,
                        format!("`where: {other}` is not a place"),
                    )
                    .with_help("write `where: container` or `where: host`")
                    .into());
            }
        },
    };
    Ok((role_name, place))
}

/// The custom metric rules: one source each, regexes with a capture group, valid JSON paths.
fn metric_rules(
    b: &Builder<'_>,
    metrics: &BTreeMap<String, Spanned<MetricSourceSpec>>,
) -> Result<Vec<MetricRule>, PlanError> {
    let src = b.task.bench_source("external");
    let mut custom = Vec::new();
    for (metric, source) in metrics {
        let at = |msg: String| b.at(src, source.referenced, msg);
        let s = match (&source.value.json, &source.value.regex) {
            (Some(path), None) => Source::Json(
                JsonPath::parse(path).map_err(|e| at(format!("metric `{metric}`: {e}")))?,
            ),
            (None, Some(pattern)) => {
                let re = regex::Regex::new(pattern)
                    .map_err(|e| at(format!("metric `{metric}`: bad regex: {e}")))?;
                if re.captures_len() < 2 {
                    return Err(at(format!(
                        "metric `{metric}`: regex `{pattern}` has no capture group"
                    ))
                    .with_help("put the number in parentheses, e.g. `Throughput: ([0-9.]+)`")
                    .into());
                }
                Source::Regex(re)
            }
            _ => {
                return Err(at(format!(
                    "metric `{metric}` needs exactly one of `json` and `regex`"
                ))
                .with_help("write `{json: \"a.b[0]\"}` or `{regex: \"value: ([0-9.]+)\"}`")
                .into());
            }
        };
        custom.push(MetricRule {
            metric: metric.clone(),
            sources: vec![s],
            required: true,
        });
    }
    Ok(custom)
}
