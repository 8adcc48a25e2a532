//! The state every step of building a plan shares: the task, the planning context, the
//! template renderer and the ports handed out for `port: auto`; with located errors and
//! rendering that names the variables one could have meant.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

use minijinja::Value as JValue;
use serde_saphyr::{Location, Spanned};

use crate::plan::context::{HostFacts, PlanContext};
use crate::plan::types::PlanError;
use crate::spec::{Diagnostic, Task};
use crate::template::{Renderer, TemplateError};

pub(in crate::plan) struct Builder<'a> {
    pub task: &'a Task,
    pub(in crate::plan) ctx: &'a PlanContext,
    pub renderer: Renderer,
    /// Ports handed out for `port: auto` in this plan (never twice).
    pub(in crate::plan) ports: RefCell<BTreeSet<u16>>,
    /// Set while planning one named deployment of `deployments:` (its name): the matrix then
    /// has the `deployment` axis, and an axis no field of this deployment reads is noted in
    /// `unused_axes` (another deployment may read it) instead of being an error.
    pub(in crate::plan) named: Option<String>,
    pub(in crate::plan) unused_axes: RefCell<BTreeSet<String>>,
}

impl<'a> Builder<'a> {
    /// A builder for `task` in `ctx`, no port handed out yet.
    pub(in crate::plan) fn new(task: &'a Task, ctx: &'a PlanContext) -> Self {
        Self {
            task,
            ctx,
            renderer: Renderer::new(),
            ports: RefCell::new(BTreeSet::new()),
            named: None,
            unused_axes: RefCell::new(BTreeSet::new()),
        }
    }
}

impl Builder<'_> {
    pub(in crate::plan) fn at(
        &self,
        source: usize,
        loc: Location,
        msg: impl Into<String>,
    ) -> Diagnostic {
        self.task.diag(source, loc, msg)
    }

    /// Render a string of the task file, turning template errors into located ones.
    pub(in crate::plan) fn render(
        &self,
        source: usize,
        field: &str,
        s: &Spanned<String>,
        ctx: &JValue,
    ) -> Result<String, PlanError> {
        self.renderer.render(&s.value, ctx).map_err(|e| {
            let d = self.at(source, s.referenced, format!("in `{field}`: {e}"));
            match e {
                TemplateError::Undefined { name } if name == "model" => d.with_help(
                    "the task names no model (the server's /v1/models gives it, but only once it \
                     runs): add `model: <id the server serves>` at the top level or under benchmark",
                ),
                TemplateError::Undefined { name } => {
                    let known = known_vars(ctx);
                    let refs: Vec<&str> = known.iter().map(String::as_str).collect();
                    d.with_help(
                        match crate::spec::diagnostic::did_you_mean(&name, refs.iter().copied()) {
                            Some(near) => format!("did you mean `{near}`?"),
                            None => format!(
                                "add a matrix axis `{name}`, or use one of: {}",
                                refs.join(", ")
                            ),
                        },
                    )
                }
                TemplateError::Invalid { .. } => d,
            }
            .into()
        })
    }

    pub(in crate::plan) fn hosts(&self) -> &BTreeMap<String, HostFacts> {
        &self.ctx.hosts
    }

    /// Clusters of the hosts file: name -> member host names.
    pub(in crate::plan) fn clusters(&self) -> &BTreeMap<String, Vec<String>> {
        &self.ctx.clusters
    }

    /// Slurm clusters of the hosts file, by name.
    pub(in crate::plan) fn slurm(&self) -> &BTreeMap<String, crate::hosts::SlurmCluster> {
        &self.ctx.slurm
    }

    /// Kubernetes clusters of the hosts file, by name.
    pub(in crate::plan) fn kubernetes(&self) -> &BTreeMap<String, crate::hosts::KubernetesCluster> {
        &self.ctx.kubernetes
    }

    /// A free port not yet handed out in this plan.
    pub(in crate::plan) fn free_port(&self) -> Result<u16, PlanError> {
        for _ in 0..64 {
            let port = self.ctx.free_port()?;
            if self.ports.borrow_mut().insert(port) {
                return Ok(port);
            }
        }
        Err(PlanError::Port(std::io::Error::other(
            "the system keeps handing out ports already planned",
        )))
    }

    /// Template variables a string reads, with a located error on bad syntax.
    pub(in crate::plan) fn vars(
        &self,
        source: usize,
        s: &Spanned<String>,
    ) -> Result<BTreeSet<String>, PlanError> {
        self.renderer
            .variables(&s.value)
            .map_err(|e| self.at(source, s.referenced, e.to_string()).into())
    }
}

fn known_vars(ctx: &JValue) -> Vec<String> {
    ctx.try_iter()
        .map(|it| it.map(|k| k.to_string()).collect())
        .unwrap_or_default()
}
