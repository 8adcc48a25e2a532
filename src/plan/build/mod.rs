//! The resolver: task x matrix x hosts -> [`Plan`]. Normalizes the roles, takes the sweep
//! grouped into deployments (sweep), places instances (role), renders every deployment
//! string per instance with its variables, and builds each point's load (point). Every
//! check reports the field's location.
//!
//! `builder` holds what every step shares (the task, the context, the renderer, the ports
//! handed out) and renders with located errors; `env` builds an instance's environment;
//! `vars` names the built-in template variables. The assembly itself, one deployment after another, is here.

mod builder;
mod env;
mod vars;

pub(super) use builder::Builder;
pub use vars::BUILTIN_VARS;

use std::collections::{BTreeMap, BTreeSet};

use minijinja::Value as JValue;
use serde_json::Value;
use serde_saphyr::{Location, Spanned};

use super::context::PlanContext;
use super::point;
use super::role::{self, RoleDef};
use super::secrets;
use super::sweep::{self, Sweep};
use super::*;
use crate::deploy::{GpuRequest, Resources};
use crate::load::Backend;
use crate::matrix;
use crate::spec::values::PortValue;
use crate::spec::{Diagnostic, RoleSpec, RolesSpec, TASK_SOURCE, Task, TaskSpec};
use vars::roles_variable;

/// Axes that set a task field of the same name (and so change the deployment).
pub(super) const DEPLOYMENT_FIELD_AXES: &[&str] = &["image", "model"];

/// Resolve `task` into the plan of everything a run will do. Starts nothing; only picks
/// free ports for `port: auto`.
pub fn build(task: &Task, ctx: &PlanContext) -> Result<Plan, PlanError> {
    Builder::new(task, ctx).build()
}

impl Builder<'_> {
    fn build(&self) -> Result<Plan, PlanError> {
        let TaskSpec {
            kind: _,
            name,
            description,
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
            container,
            client,
            roles,
            entry_role,
            tag,
            stop_on_failure,
            benchmark,
        } = &self.task.spec;
        let t = TASK_SOURCE;
        if name.value.is_empty()
            || !name
                .value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            return Err(self
                .at(
                    t,
                    name.referenced,
                    format!("`{}` is not a valid task name", name.value),
                )
                .with_help("use letters, digits, `-`, `_` and `.` (it names a directory)")
                .into());
        }
        let backend = backend.unwrap_or(Backend::Openai);
        let model_src = match (model, &benchmark.model) {
            (Some(m), _) => (t, m),
            (None, Some(m)) => (self.task.bench_source("model"), m),
            (None, None) => {
                return Err(Diagnostic::file(self.task.path(), "missing `model`")
                    .with_help(
                        "add `model: <id the server serves>` at the top level or under benchmark",
                    )
                    .into());
            }
        };

        // The roles: `roles:` or the one `server` of a plain task.
        let role_defs: Vec<RoleDef<'_>> = match roles {
            None => {
                if let Some(e) = entry_role {
                    return Err(self
                        .at(t, e.referenced, "`entry_role` needs `roles`")
                        .into());
                }
                vec![RoleDef {
                    name: "server".into(),
                    loc: name.referenced,
                    commands,
                    env: self.resolve_secrets(&env.0)?,
                    hosts,
                    replicas: None,
                    port: port.as_ref(),
                    readiness: readiness.as_ref(),
                    image: None,
                    depends_on: &[],
                }]
            }
            Some(RolesSpec(list)) => {
                role::reject_top_level(self, "commands", commands.first().map(|c| c.referenced))?;
                role::reject_top_level(self, "hosts", hosts.first().map(|h| h.referenced))?;
                role::reject_top_level(self, "port", port.as_ref().map(|p| p.referenced))?;
                role::reject_top_level(
                    self,
                    "readiness",
                    readiness.as_ref().map(|_| Location::UNKNOWN),
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
                    } = r;
                    let mut env = self.resolve_secrets(&env.0)?;
                    env.extend(self.resolve_secrets(&role_env.0)?);
                    defs.push(RoleDef {
                        name: rname.value.clone(),
                        loc: rname.referenced,
                        commands,
                        env,
                        hosts,
                        replicas: replicas.as_ref(),
                        port: Some(port),
                        readiness: readiness.as_ref(),
                        image: image.as_ref(),
                        depends_on,
                    });
                }
                role::start_order(self, defs)?
            }
        };
        let entry = match entry_role {
            None => role_defs.last().map(|r| r.name.clone()).unwrap_or_default(),
            Some(e) => {
                if !role_defs.iter().any(|r| r.name == e.value) {
                    let names: Vec<&str> = role_defs.iter().map(|r| r.name.as_str()).collect();
                    return Err(self
                        .at(
                            t,
                            e.referenced,
                            format!("`entry_role` names unknown role `{}`", e.value),
                        )
                        .with_help(crate::spec::diagnostic::suggest(&e.value, &names))
                        .into());
                }
                e.value.clone()
            }
        };

        // Secrets are only allowed in env values; everything else must not mention them.
        let deploy_strings: Vec<&Spanned<String>> = role_defs
            .iter()
            .flat_map(|r| r.commands.iter().chain(r.image))
            .chain(image.iter())
            .chain(volumes.iter())
            .chain(std::iter::once(model_src.1))
            .collect();
        for s in &deploy_strings {
            if s.value.contains(secrets::SECRET_OPEN) {
                return Err(self
                    .at(t, s.referenced, "secrets are only allowed in `env` values")
                    .with_help("put `NAME: ${{ secrets.NAME }}` under env: and use $NAME here")
                    .into());
            }
        }
        let gpu = resources.as_ref().and_then(|r| r.gpu.as_ref());
        let gpus = gpu.map_or(0, |g| g.value.count);

        // The sweep, and which points share a deployment.
        let Sweep { groups, axis_locs } = sweep::sweep(self, &deploy_strings, &role_defs)?;

        let resources_plan = Resources {
            gpu: gpu.map(|g| GpuRequest {
                count: g.value.count,
                names: g.value.names.clone(),
                vendor: g.value.vendor,
            }),
            shm_size: resources
                .as_ref()
                .and_then(|r| r.shm_size.as_ref())
                .map(|s| s.value.0),
        };
        let port_auto = role_defs
            .iter()
            .any(|r| r.port.is_some_and(|p| p.value == PortValue::Auto));
        let default_port = if backend == Backend::Sglang {
            30000
        } else {
            8000
        };
        let mut readiness_plans = Vec::new();
        for r in &role_defs {
            readiness_plans.push(self.readiness(r.readiness)?);
        }

        let mut deployments = Vec::new();
        let mut point_ids = BTreeSet::new();
        let mut model_name = None;
        for (i, (daxes, group_points)) in groups.into_iter().enumerate() {
            // Place every instance first, so any role can name any other's address.
            let mut placements = Vec::new();
            for r in &role_defs {
                placements.push(role::place(self, r, default_port)?);
            }
            let roles_var = roles_variable(&role_defs, &placements);
            let base = |role: &str,
                        index: usize,
                        places: &[role::Placement]|
             -> BTreeMap<String, JValue> {
                let place = &places[index];
                let host = &place.host;
                let mut m = BTreeMap::new();
                m.insert("name".into(), JValue::from(name.value.clone()));
                m.insert(
                    "description".into(),
                    JValue::from(description.clone().unwrap_or_default()),
                );
                m.insert("backend".into(), JValue::from_serialize(backend));
                m.insert("port".into(), JValue::from(place.port));
                let facts = match host {
                    HostPlan::Remote { name, .. } => self.ctx.hosts.get(name),
                    HostPlan::Local => None,
                };
                let g = if gpus == 0 {
                    facts.and_then(|f| f.gpus).unwrap_or(0)
                } else {
                    gpus
                };
                m.insert("gpus".into(), JValue::from(g));
                let gpu_name = facts
                    .and_then(|f| f.gpu_name.clone())
                    .or_else(|| gpu.and_then(|g| g.value.names.first().cloned()))
                    .unwrap_or_default();
                m.insert("gpu_name".into(), JValue::from(gpu_name));
                let host_name = match host {
                    HostPlan::Local => "local".to_string(),
                    HostPlan::Remote { name, .. } => name.clone(),
                };
                m.insert("host".into(), JValue::from(host_name));
                m.insert("host_address".into(), JValue::from(host.address()));
                m.insert("node_rank".into(), JValue::from(index));
                m.insert("nnodes".into(), JValue::from(places.len()));
                m.insert("master_addr".into(), JValue::from(places[0].host.address()));
                m.insert("role".into(), JValue::from(role));
                m.insert("role_index".into(), JValue::from(index));
                m.insert("roles".into(), roles_var.clone());
                m.insert(
                    "orchestrate".into(),
                    JValue::from(self.ctx.executable.display().to_string()),
                );
                for (k, v) in &daxes {
                    m.insert(k.clone(), JValue::from_serialize(v));
                }
                m
            };
            // Deployment-level fields, rendered with the first instance's variables.
            let mut vars0 = base(&role_defs[0].name, 0, &placements[0]);
            let image_value = match (daxes.get("image"), image) {
                (Some(v), _) => Some(matrix::scalar_text(v)),
                (None, Some(img)) => Some(self.non_empty_image(img, &JValue::from(vars0.clone()))?),
                (None, None) => None,
            };
            if let Some(img) = &image_value {
                vars0.insert("image".into(), JValue::from(img.clone()));
            }
            let model_value = match daxes.get("model") {
                Some(v) => matrix::scalar_text(v),
                None => self.render(
                    model_src.0,
                    "model",
                    model_src.1,
                    &JValue::from(vars0.clone()),
                )?,
            };
            vars0.insert("model".into(), JValue::from(model_value.clone()));
            model_name.get_or_insert_with(|| model_value.clone());

            let mut role_plans = Vec::new();
            for ((r, places), readiness) in role_defs.iter().zip(&placements).zip(&readiness_plans)
            {
                let role_image = match r.image {
                    Some(img) => {
                        let mut v = base(&r.name, 0, places);
                        v.insert("model".into(), JValue::from(model_value.clone()));
                        Some(self.non_empty_image(img, &JValue::from(v))?)
                    }
                    None => image_value.clone(),
                };
                let mut instances = Vec::new();
                let mut volume_plans = Vec::new();
                for (index, place) in places.iter().enumerate() {
                    let mut vars = base(&r.name, index, places);
                    vars.insert("model".into(), JValue::from(model_value.clone()));
                    if let Some(img) = &role_image {
                        vars.insert("image".into(), JValue::from(img.clone()));
                    }
                    let jv = JValue::from(vars);
                    let mut rendered_commands = Vec::new();
                    for c in r.commands {
                        rendered_commands.push(self.render(t, "commands", c, &jv)?);
                    }
                    let env_out = self.instance_env(&r.env, &jv, gpus, index, places)?;
                    if index == 0 {
                        for v in volumes {
                            let text = self.render(t, "volumes", v, &jv)?;
                            volume_plans.push(self.volume(v, &text)?);
                        }
                    }
                    instances.push(InstancePlan {
                        index,
                        host: place.host.clone(),
                        port: place.port,
                        commands: rendered_commands,
                        env: env_out,
                    });
                }
                role_plans.push(RolePlan {
                    name: r.name.clone(),
                    provider: if role_image.is_some() {
                        ProviderKind::Docker
                    } else {
                        ProviderKind::Local
                    },
                    image: role_image,
                    instances,
                    readiness: readiness.clone(),
                    volumes: volume_plans,
                    resources: resources_plan.clone(),
                    container: container_options(container.as_ref()),
                });
            }

            let entry_index = role_defs.iter().position(|r| r.name == entry).unwrap_or(0);
            let mut entry_vars = base(&entry, 0, &placements[entry_index]);
            entry_vars.insert("model".into(), JValue::from(model_value.clone()));
            if let Some(img) = &image_value {
                entry_vars.insert("image".into(), JValue::from(img.clone()));
            }
            let mut point_plans = Vec::new();
            for p in &group_points {
                let mut vars = entry_vars.clone();
                for (k, v) in &p.values {
                    vars.insert(k.clone(), JValue::from_serialize(v));
                }
                let vars = JValue::from(vars);
                let load = point::load_plan(self, p, &vars, &axis_locs)?;
                let external = super::external::plan(self, &role_plans, &entry, &vars)?;
                let mut id = sanitize(&p.label());
                if id.is_empty() {
                    id = "default".into();
                }
                let mut unique = id.clone();
                let mut n = 2;
                while !point_ids.insert(unique.clone()) {
                    unique = format!("{id}-{n}");
                    n += 1;
                }
                point_plans.push(PointPlan {
                    id: unique,
                    axes: p.values.iter().cloned().collect(),
                    load,
                    repetitions: point::repetitions(self)?,
                    external,
                });
            }
            deployments.push(DeploymentPlan {
                id: format!("d{}", i + 1),
                axes: daxes,
                roles: role_plans,
                entry_role: entry.clone(),
                points: point_plans,
            });
        }

        let mut resolved = serde_json::to_value(&self.task.spec)
            .map_err(|e| PlanError::Invalid(format!("cannot serialize the task: {e}")))?;
        drop_unset(&mut resolved);
        let client = super::client::plan(self, client.as_ref(), &deployments)?;
        Ok(Plan {
            task: name.value.clone(),
            source: self.task.path().to_path_buf(),
            description: description.clone(),
            backend,
            model: model_name.unwrap_or_default(),
            spec_hash: self.task.hash.clone(),
            resolved,
            deployments,
            stop_on_failure: *stop_on_failure,
            port_auto,
            thresholds: point::thresholds(self)?,
            validity: point::validity(self),
            tag: tag.clone(),
            client,
        })
    }

    fn non_empty_image(&self, img: &Spanned<String>, vars: &JValue) -> Result<String, PlanError> {
        let r = self.render(TASK_SOURCE, "image", img, vars)?;
        if r.trim().is_empty() {
            return Err(self
                .at(TASK_SOURCE, img.referenced, "`image` is empty")
                .with_help("name the image, or remove `image` to run local processes")
                .into());
        }
        Ok(r)
    }
}

/// Remove keys the user did not set (null, empty lists/maps, false defaults stay).
fn drop_unset(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, x| {
                !(x.is_null()
                    || x.as_array().is_some_and(|a| a.is_empty())
                    || x.as_object().is_some_and(|o| o.is_empty()))
            });
            m.values_mut().for_each(drop_unset);
        }
        Value::Array(a) => a.iter_mut().for_each(drop_unset),
        _ => {}
    }
}

/// Keep ids filesystem-safe: letters, digits and `. _ - = ,`; anything else becomes `_`.
fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '=' | ',') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `container:` as the providers take it (defaults where the task says nothing).
fn container_options(spec: Option<&crate::spec::ContainerSpec>) -> crate::deploy::ContainerOptions {
    match spec {
        None => crate::deploy::ContainerOptions::default(),
        Some(crate::spec::ContainerSpec {
            network,
            ipc,
            gpu_ids,
        }) => crate::deploy::ContainerOptions {
            network: network.unwrap_or_default(),
            ipc: ipc.unwrap_or_default(),
            gpu_ids: gpu_ids.clone(),
        },
    }
}
