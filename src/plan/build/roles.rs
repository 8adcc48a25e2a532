//! The roles of a task before placement: `roles:` or the one `server` of a plain task, in
//! start order, with their env's secrets resolved; the entry role; and the rule that
//! secrets appear only in env values.
//!
//! Does not own: placement, readiness and volumes (plan/role) or rendering (deployment).

use serde_saphyr::{Location, Spanned};

use crate::plan::render::Builder;
use crate::plan::role::{self, RoleDef};
use crate::plan::secrets;
use crate::plan::types::PlanError;
use crate::spec::{RoleSpec, RolesSpec, TASK_SOURCE, TaskSpec};

impl Builder<'_> {
    /// The roles in start order: `roles:` or the one `server` of a plain task.
    pub(super) fn role_defs(&self) -> Result<Vec<RoleDef<'_>>, PlanError> {
        let spec: &TaskSpec = &self.task.spec;
        let t = TASK_SOURCE;
        let Some(RolesSpec(list)) = &spec.roles else {
            if let Some(e) = &spec.entry_role {
                return Err(self
                    .at(t, e.referenced, "`entry_role` needs `roles`")
                    .into());
            }
            return Ok(vec![RoleDef {
                name: "server".into(),
                loc: spec.name.referenced,
                commands: &spec.commands,
                env: self.resolve_secrets(&spec.env.0)?,
                hosts: &spec.hosts,
                replicas: spec.replicas.as_ref().and_then(|r| {
                    r.value.count().map(|c| Spanned {
                        value: c.count(),
                        referenced: r.referenced,
                        defined: r.defined,
                    })
                }),
                port: spec.port.as_ref(),
                readiness: spec.readiness.as_ref(),
                image: None,
                depends_on: &[],
                nodes: spec.nodes.as_ref(),
                procs: spec.procs.as_ref(),
                startup_order: spec.startup_order.as_ref(),
                resources: None,
                node_resources: &spec.node_resources,
                volumes: &[],
            }]);
        };
        role::reject_top_level(
            self,
            "commands",
            spec.commands.first().map(|c| c.referenced),
        )?;
        role::reject_top_level(self, "hosts", spec.hosts.first().map(|h| h.referenced))?;
        role::reject_top_level(self, "port", spec.port.as_ref().map(|p| p.referenced))?;
        role::reject_top_level(
            self,
            "readiness",
            spec.readiness.as_ref().map(|_| Location::UNKNOWN),
        )?;
        role::reject_top_level(self, "nodes", spec.nodes.as_ref().map(|n| n.referenced))?;
        role::reject_top_level(self, "procs", spec.procs.as_ref().map(|n| n.referenced))?;
        role::reject_top_level(
            self,
            "startup_order",
            spec.startup_order.as_ref().map(|o| o.referenced),
        )?;
        role::reject_top_level(
            self,
            "replicas",
            spec.replicas.as_ref().map(|r| r.referenced),
        )?;
        let mut defs = Vec::new();
        for (rname, r) in list {
            let RoleSpec {
                commands,
                replicas,
                hosts,
                port,
                readiness,
                env: role_env,
                depends_on,
                image,
                nodes,
                procs,
                startup_order,
                resources,
                volumes,
            } = r;
            let mut env = self.resolve_secrets(&spec.env.0)?;
            env.extend(self.resolve_secrets(&role_env.0)?);
            defs.push(RoleDef {
                name: rname.value.clone(),
                loc: rname.referenced,
                commands,
                env,
                hosts,
                replicas: replicas.clone(),
                port: Some(port),
                readiness: readiness.as_ref(),
                image: image.as_ref(),
                depends_on,
                nodes: nodes.as_ref(),
                procs: procs.as_ref(),
                startup_order: startup_order.as_ref(),
                resources: resources.as_ref(),
                node_resources: &[],
                volumes,
            });
        }
        role::start_order(self, defs)
    }

    /// The entry role: `entry_role`, else the last role to start.
    pub(super) fn entry_role(&self, role_defs: &[RoleDef<'_>]) -> Result<String, PlanError> {
        let Some(e) = &self.task.spec.entry_role else {
            return Ok(role_defs.last().map(|r| r.name.clone()).unwrap_or_default());
        };
        if !role_defs.iter().any(|r| r.name == e.value) {
            let names: Vec<&str> = role_defs.iter().map(|r| r.name.as_str()).collect();
            return Err(self
                .at(
                    TASK_SOURCE,
                    e.referenced,
                    format!("`entry_role` names unknown role `{}`", e.value),
                )
                .with_help(crate::spec::diagnostic::suggest(&e.value, &names))
                .into());
        }
        Ok(e.value.clone())
    }
}

/// Secrets are only allowed in env values; every other deployment string must not name one.
pub(super) fn reject_secrets(
    b: &Builder<'_>,
    deploy_strings: &[&Spanned<String>],
) -> Result<(), PlanError> {
    for s in deploy_strings {
        if s.value.contains(secrets::SECRET_OPEN) {
            return Err(b
                .at(
                    TASK_SOURCE,
                    s.referenced,
                    "secrets are only allowed in `env` values",
                )
                .with_help("put `NAME: ${{ secrets.NAME }}` under env: and use $NAME here")
                .into());
        }
    }
    Ok(())
}
