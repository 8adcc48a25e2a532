//! The whole task -> [`Plan`]: the task's name and model checked, its roles and sweep taken,
//! then one deployment after another, and the plan's task-level parts.

use std::collections::BTreeSet;

use serde_saphyr::Spanned;

use super::deployment::{Deployed, Shared, resources_of};
use super::roles::reject_secrets;
use crate::deploy::Resources;
use crate::load::Backend;
use crate::plan::context::PlanContext;
use crate::plan::point;
use crate::plan::render::Builder;
use crate::plan::sweep::{self, Sweep};
use crate::plan::types::{Plan, PlanError, TelemetryPlan};
use crate::spec::values::PortValue;
use crate::spec::{GpuTool, TASK_SOURCE, Task, TaskSpec};

/// Resolve `task` into the plan of everything a run will do. Starts nothing; only picks
/// free ports for `port: auto`.
pub fn build(task: &Task, ctx: &PlanContext) -> Result<Plan, PlanError> {
    // `resources.gpu` may choose the host (or refuse the named ones) first.
    let placed = crate::plan::gpu_hosts::place_by_gpu(task, ctx)?;
    Builder::new(placed.as_ref().unwrap_or(task), ctx).build()
}

impl Builder<'_> {
    pub(super) fn build(&self) -> Result<Plan, PlanError> {
        let spec = &self.task.spec;
        // Every field, so a new one is not forgotten; those not named here are read by the
        // step in the comment.
        let TaskSpec {
            kind: _,
            name: _,        // check_name, vars
            description: _, // vars
            backend: _,
            image: _,
            model: _,    // model_source
            env: _,      // role_defs
            commands: _, // role_defs
            port: _,     // role_defs
            readiness: _,
            resources: _, // resources, vars
            hosts: _,     // role_defs
            volumes: _,
            container: _,
            client: _,
            roles: _,      // role_defs
            entry_role: _, // entry_role
            tag: _,
            stop_on_failure: _,
            telemetry: _, // telemetry
            benchmark: _, // sweep, point, external
            nodes: _,     // role_defs
            procs: _,     // role_defs
            replicas: _,  // role_defs
            deployments,  // named
            // dstack keys: spec::dstack turned them into the fields above (port, readiness,
            // commands) or into the notes of `task.dstack`; resources.* are read below.
            ports: _,
            working_dir: _,
            probes: _,
            startup_order: _,
            stop_criteria: _,
            ..
        } = spec;
        if let Some(named) = deployments {
            return self.named_plan(named);
        }
        self.check_name()?;
        let backend = spec.backend.unwrap_or(Backend::Openai);
        let model = self.model_source();
        let roles = self.role_defs()?;
        let entry = self.entry_role(&roles)?;
        let deploy_strings: Vec<&Spanned<String>> = roles
            .iter()
            .flat_map(|r| r.commands.iter().chain(r.image).chain(r.volumes))
            .chain(spec.image.iter())
            .chain(spec.volumes.iter())
            .chain(model.map(|m| m.1))
            .collect();
        reject_secrets(self, &deploy_strings)?;
        let Sweep { groups, axis_locs } = sweep::sweep(self, &deploy_strings, &roles)?;
        let port_auto = roles
            .iter()
            .any(|r| r.port.is_some_and(|p| p.value == PortValue::Auto));
        let mut readiness = Vec::new();
        for r in &roles {
            readiness.push(self.readiness(r.readiness)?);
        }
        let shared = Shared {
            backend,
            roles,
            readiness,
            entry,
            model,
            image: spec.image.as_ref(),
            volumes: &spec.volumes,
            resources: self.resources(),
            container: self.container_options(spec)?,
            default_port: if backend == Backend::Sglang {
                30000
            } else {
                8000
            },
            axis_locs: &axis_locs,
        };

        let mut deployments = Vec::new();
        let mut models = Vec::new();
        let mut point_ids = BTreeSet::new();
        for (i, (axes, points)) in groups.into_iter().enumerate() {
            let Deployed { plan, model } =
                self.deployment(&shared, i, axes, &points, &mut point_ids)?;
            deployments.push(plan);
            models.push(model);
        }

        let rendered: Vec<_> = deployments
            .iter()
            .zip(models.iter().map(String::as_str))
            .collect();
        let resolved = self.resolved(&rendered)?;
        let client = crate::plan::client::plan(self, spec.client.as_ref(), &deployments)?;
        let search = point::search(self)?;
        if let Some(s) = &search {
            point::check_deployments(self, s, &deployments)?;
        }
        Ok(Plan {
            task: spec.name.value.clone(),
            source: self.task.path().to_path_buf(),
            description: spec.description.clone(),
            backend,
            model: models.first().cloned().unwrap_or_default(),
            spec_hash: self.task.hash.clone(),
            resolved,
            deployments,
            stop_on_failure: spec.stop_on_failure,
            port_auto,
            thresholds: point::thresholds(self)?,
            validity: point::validity(self),
            search,
            tag: spec.tag.clone(),
            client,
            dstack: self.task.dstack.clone(),
            telemetry: self.telemetry()?,
        })
    }

    /// `telemetry:` checked: `dcgm_url` only with `tool: dcgm`, and an http(s) URL.
    fn telemetry(&self) -> Result<Option<TelemetryPlan>, PlanError> {
        let Some(t) = &self.task.spec.telemetry else {
            return Ok(None);
        };
        let tool = t.tool.as_ref().map(|s| s.value);
        if let Some(url) = &t.dcgm_url {
            if tool != Some(GpuTool::Dcgm) {
                return Err(self
                    .at(
                        TASK_SOURCE,
                        url.referenced,
                        "`telemetry.dcgm_url` is set but `telemetry.tool` is not `dcgm`",
                    )
                    .with_help("add `tool: dcgm`, or remove `dcgm_url`")
                    .into());
            }
            if !(url.value.starts_with("http://") || url.value.starts_with("https://")) {
                return Err(self
                    .at(
                        TASK_SOURCE,
                        url.referenced,
                        format!("`telemetry.dcgm_url` `{}` is not an http(s) URL", url.value),
                    )
                    .with_help("write the exporter's page, like http://localhost:9400/metrics")
                    .into());
            }
        }
        Ok(Some(TelemetryPlan {
            enabled: t.enabled.unwrap_or(true),
            tool,
            interval_ms: t
                .interval
                .as_ref()
                .map(|i| (i.value.0.as_millis() as u64).max(1)),
            dcgm_url: t.dcgm_url.as_ref().map(|u| u.value.clone()),
            command: t.command.as_ref().map(|c| c.value.clone()),
        }))
    }

    /// The task's name names a directory: letters, digits, `-`, `_`, `.`.
    fn check_name(&self) -> Result<(), PlanError> {
        let name = &self.task.spec.name;
        if name.value.is_empty()
            || !name
                .value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            return Err(self
                .at(
                    TASK_SOURCE,
                    name.referenced,
                    format!("`{}` is not a valid task name", name.value),
                )
                .with_help("use letters, digits, `-`, `_` and `.` (it names a directory)")
                .into());
        }
        Ok(())
    }

    /// Where `model` is written: the top level, else `benchmark.model`; none when the task
    /// names no model (the runner then reads it from the server's `/v1/models`).
    fn model_source(&self) -> Option<(usize, &Spanned<String>)> {
        match (&self.task.spec.model, &self.task.spec.benchmark.model) {
            (Some(m), _) => Some((TASK_SOURCE, m)),
            (None, Some(m)) => Some((self.task.bench_source("model"), m)),
            (None, None) => None,
        }
    }

    /// The task's `resources:` as the providers take it; a GPU count range takes what the
    /// task's first host has within the range.
    fn resources(&self) -> Resources {
        let host_gpus = self
            .task
            .spec
            .hosts
            .first()
            .and_then(|h| self.ctx.hosts.get(&h.value))
            .and_then(|f| f.gpus);
        resources_of(self.task.spec.resources.as_ref(), host_gpus)
    }
}
