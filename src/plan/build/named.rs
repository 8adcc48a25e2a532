//! Named deployments (`deployments:`): several topologies compared in one run under one
//! `benchmark`. Each is the task with the deployment's keys in place of the task's, planned
//! on its own with the matrix cut to its points (the `deployment` axis holds its name), and
//! the plans are joined into one: deployments in run order, numbered anew, each named.
//!
//! The axis `deployment` picks and orders them: absent, every named deployment runs in file
//! order; present, only the deployments it lists, in its order.

use serde_json::Value;
use serde_saphyr::{Location, Spanned};

use crate::plan::render::Builder;
use crate::plan::sweep::DEPLOYMENT_AXIS;
use crate::plan::types::{Plan, PlanError};
use crate::spec::{AxisSpec, DeploymentSpec, DeploymentsSpec, MatrixSpec, Task, TaskSpec};

impl Builder<'_> {
    /// The plan of a task with `deployments:`.
    pub(super) fn named_plan(&self, named: &DeploymentsSpec) -> Result<Plan, PlanError> {
        let order = self.run_order(named)?;
        let mut plan: Option<Plan> = None;
        let mut unused: Option<std::collections::BTreeSet<String>> = None;
        for (name, dep) in order {
            let task = derive(self.task, name, dep);
            let mut b = Builder::new(&task, self.ctx);
            b.named = Some(name.to_string());
            b.ports = self.ports.clone();
            let one = b.build()?;
            *self.ports.borrow_mut() = b.ports.borrow().clone();
            let here = b.unused_axes.borrow().clone();
            unused = Some(match unused {
                None => here,
                Some(u) => u.intersection(&here).cloned().collect(),
            });
            plan = Some(match plan {
                None => name_all(one, name, 0),
                Some(mut p) => {
                    let one = name_all(one, name, p.deployments.len());
                    p.port_auto |= one.port_auto;
                    p.deployments.extend(one.deployments);
                    p
                }
            });
        }
        let mut plan = plan.expect("run_order returns at least one deployment");
        if let Some(axis) = unused.unwrap_or_default().into_iter().next() {
            return Err(self.unused_everywhere(&axis).into());
        }
        let rendered: Vec<_> = plan
            .deployments
            .iter()
            .map(|d| (d, d.model.as_str()))
            .collect();
        plan.resolved = self.resolved(&rendered)?;
        plan.client =
            crate::plan::client::plan(self, self.task.spec.client.as_ref(), &plan.deployments)?;
        Ok(plan)
    }

    /// The named deployments to run, in order: the `deployment` axis' values, else all in
    /// file order. A value or an `include`/`exclude` entry naming no deployment is an error.
    fn run_order<'d>(
        &self,
        named: &'d DeploymentsSpec,
    ) -> Result<Vec<(&'d str, &'d DeploymentSpec)>, PlanError> {
        let names: Vec<&str> = named.0.iter().map(|(n, _)| n.value.as_str()).collect();
        let find = |v: &Value| {
            named
                .0
                .iter()
                .find(|(n, _)| v.as_str() == Some(n.value.as_str()))
        };
        let msrc = self.task.bench_source("matrix");
        let unknown = |v: &Value, loc: Location| {
            self.at(
                msrc,
                loc,
                format!("`deployment` value {v} is not one of the named `deployments`"),
            )
            .with_help(crate::spec::diagnostic::suggest(
                v.as_str().unwrap_or_default(),
                &names,
            ))
        };
        let matrix = self.task.spec.benchmark.matrix.clone().unwrap_or_default();
        let entries = matrix
            .include
            .iter()
            .zip(&matrix.include_locs)
            .chain(matrix.exclude.iter().zip(&matrix.exclude_locs));
        for (entry, loc) in entries {
            if let Some(v) = entry.get(DEPLOYMENT_AXIS).filter(|v| find(v).is_none()) {
                return Err(unknown(v, *loc).into());
            }
        }
        let Some(axis) = matrix.axes.iter().find(|a| a.name.value == DEPLOYMENT_AXIS) else {
            return Ok(named.0.iter().map(|(n, d)| (n.value.as_str(), d)).collect());
        };
        let mut out: Vec<(&str, &DeploymentSpec)> = Vec::new();
        for v in &axis.values {
            let Some((n, d)) = find(v) else {
                return Err(unknown(v, axis.name.referenced).into());
            };
            if !out.iter().any(|(o, _)| *o == n.value) {
                out.push((n.value.as_str(), d));
            }
        }
        Ok(out)
    }

    /// An axis that no named deployment reads.
    fn unused_everywhere(&self, axis: &str) -> crate::spec::Diagnostic {
        let msrc = self.task.bench_source("matrix");
        let msg = format!("axis `{axis}` is not used by any field of any deployment");
        let loc = self
            .task
            .spec
            .benchmark
            .matrix
            .as_ref()
            .and_then(|m| m.axes.iter().find(|a| a.name.value == axis))
            .map(|a| a.name.referenced);
        match loc {
            Some(loc) => self.at(msrc, loc, msg),
            None => crate::spec::Diagnostic::file(&self.task.sources[msrc].path, msg),
        }
        .with_help(format!(
            "use it in a template (`{{{{ {axis} }}}}`) of a deployment, or name it after a load key"
        ))
    }
}

/// Name every deployment of `plan` (planned for named deployment `name`) and number them
/// after the `before` deployments already planned.
fn name_all(mut plan: Plan, name: &str, before: usize) -> Plan {
    for (i, d) in plan.deployments.iter_mut().enumerate() {
        d.id = format!("d{}", before + i + 1);
        d.name = Some(name.to_string());
    }
    plan
}

/// The task as named deployment `name` runs it: the deployment's keys in place of the
/// task's (its `env` added to the task's), no `deployments`, and the matrix cut to this
/// deployment's points.
fn derive(task: &Task, name: &str, dep: &DeploymentSpec) -> Task {
    let mut task = task.clone();
    let spec: &mut TaskSpec = &mut task.spec;
    let DeploymentSpec {
        backend,
        image,
        model,
        env,
        commands,
        port,
        readiness,
        resources,
        hosts,
        volumes,
        nodes,
        procs,
        startup_order,
        replicas,
        roles,
        entry_role,
    } = dep.clone();
    let anchor = spec
        .deployments
        .as_ref()
        .and_then(|d| d.0.iter().find(|(n, _)| n.value == name))
        .map_or(Location::UNKNOWN, |(n, _)| n.referenced);
    spec.deployments = None;
    spec.backend = backend.or(spec.backend.take());
    spec.image = image.or(spec.image.take());
    spec.model = model.or(spec.model.take());
    spec.env.0.extend(env.0);
    if !commands.is_empty() {
        spec.commands = commands;
    }
    spec.port = port.or(spec.port.take());
    spec.readiness = readiness.or(spec.readiness.take());
    spec.resources = resources.or(spec.resources.take());
    if !hosts.is_empty() {
        spec.hosts = hosts;
    }
    if !volumes.is_empty() {
        spec.volumes = volumes;
    }
    spec.nodes = nodes.or(spec.nodes.take());
    spec.procs = procs.or(spec.procs.take());
    spec.startup_order = startup_order.or(spec.startup_order.take());
    spec.replicas = replicas
        .map(|r| Spanned {
            value: crate::spec::dstack::ReplicasSpec::Count(crate::spec::dstack::Replicas::fixed(
                r.value,
            )),
            referenced: r.referenced,
            defined: r.defined,
        })
        .or(spec.replicas.take());
    spec.roles = roles.or(spec.roles.take());
    spec.entry_role = entry_role.or(spec.entry_role.take());
    let matrix = spec
        .benchmark
        .matrix
        .get_or_insert_with(MatrixSpec::default);
    cut(matrix, name, anchor);
    task
}

/// Keep `matrix`'s points of deployment `name`: the `deployment` axis (added first when
/// absent) holds only `name`, and `include`/`exclude` entries for other deployments go.
fn cut(matrix: &mut MatrixSpec, name: &str, anchor: Location) {
    let value = Value::String(name.to_string());
    match matrix
        .axes
        .iter_mut()
        .find(|a| a.name.value == DEPLOYMENT_AXIS)
    {
        Some(axis) => axis.values = vec![value],
        None => matrix.axes.insert(
            0,
            AxisSpec {
                name: Spanned {
                    value: DEPLOYMENT_AXIS.to_string(),
                    referenced: anchor,
                    defined: anchor,
                },
                values: vec![value],
            },
        ),
    }
    let mine = |e: &serde_json::Map<String, Value>| {
        e.get(DEPLOYMENT_AXIS)
            .is_none_or(|v| v.as_str() == Some(name))
    };
    let keep = |entries: &mut Vec<serde_json::Map<String, Value>>, locs: &mut Vec<Location>| {
        let kept: Vec<_> = entries
            .drain(..)
            .zip(locs.drain(..))
            .filter(|(e, _)| mine(e))
            .collect();
        let (kept_entries, kept_locs): (Vec<_>, Vec<_>) = kept.into_iter().unzip();
        *entries = kept_entries;
        *locs = kept_locs;
    };
    keep(&mut matrix.include, &mut matrix.include_locs);
    keep(&mut matrix.exclude, &mut matrix.exclude_locs);
}
