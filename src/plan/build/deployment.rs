//! One deployment of the plan: its instances placed, every deployment string rendered per
//! instance with that instance's variables (model and image first), and its points with
//! their load and external command.
//!
//! Does not own: the variables themselves (vars), the sweep (sweep) or a point's load
//! (point).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use serde_saphyr::{Location, Spanned};

use super::vars::{Vars, VarsBuilder, roles_variable};
use crate::deploy::{ContainerOptions, GpuRequest, Resources};
use crate::load::Backend;
use crate::matrix;
use crate::plan::point;
use crate::plan::render::Builder;
use crate::plan::role::{self, RoleDef};
use crate::plan::sweep::SweptPoint;
use crate::plan::types::{
    DeploymentPlan, InstancePlan, PlanError, PointPlan, Probe, ProviderKind, ReadinessPlan,
    RolePlan,
};
use crate::spec::TASK_SOURCE;

/// What every deployment of a task shares.
pub(super) struct Shared<'a> {
    pub backend: Backend,
    pub roles: Vec<RoleDef<'a>>,
    /// One readiness plan per role, in `roles` order.
    pub readiness: Vec<ReadinessPlan>,
    pub entry: String,
    /// Where `model` is written (source index) and its template; none when the task names no
    /// model (read from the server after readiness).
    pub model: Option<(usize, &'a Spanned<String>)>,
    pub image: Option<&'a Spanned<String>>,
    pub volumes: &'a [Spanned<String>],
    pub resources: Resources,
    pub container: ContainerOptions,
    /// The port of a role that names none.
    pub default_port: u16,
    pub axis_locs: &'a BTreeMap<String, Location>,
}

/// A deployment and the model it serves.
pub(super) struct Deployed {
    pub plan: DeploymentPlan,
    pub model: String,
}

impl Builder<'_> {
    /// Deployment number `i` (from 0) with deployment axes `axes` and its points. Point ids
    /// are unique across the plan (`point_ids` holds those taken).
    pub(super) fn deployment(
        &self,
        shared: &Shared<'_>,
        i: usize,
        axes: BTreeMap<String, Value>,
        points: &[SweptPoint],
        point_ids: &mut BTreeSet<String>,
    ) -> Result<Deployed, PlanError> {
        // Place every instance first, so any role can name any other's address.
        let mut placements = Vec::new();
        for r in &shared.roles {
            placements.push(role::place(self, r, shared.default_port)?);
        }
        number_slurm_nodes(&mut placements);
        let vars = self.vars_builder(shared, &placements, &axes);
        // Deployment-level fields, rendered with the first instance's variables.
        let mut vars0 = vars.instance(&shared.roles[0].name, 0, &placements[0]);
        let image = match (axes.get("image"), shared.image) {
            (Some(v), _) => Some(matrix::scalar_text(v)),
            (None, Some(img)) => Some(self.non_empty_image(img, &vars0)?),
            (None, None) => None,
        };
        if let Some(img) = &image {
            vars0.set("image", img.clone());
        }
        let model = match (axes.get("model"), shared.model) {
            (Some(v), _) => Some(matrix::scalar_text(v)),
            (None, Some((source, m))) => Some(self.render(source, "model", m, &vars0.value())?),
            (None, None) => None,
        };

        let mut roles = Vec::new();
        for ((r, places), readiness) in shared.roles.iter().zip(&placements).zip(&shared.readiness)
        {
            roles.push(self.role_plan(
                shared,
                &vars,
                r,
                places,
                readiness,
                model.as_deref(),
                &image,
            )?);
        }

        let entry_index = shared
            .roles
            .iter()
            .position(|r| r.name == shared.entry)
            .unwrap_or(0);
        let mut entry_vars = vars.instance(&shared.entry, 0, &placements[entry_index]);
        if let Some(model) = &model {
            entry_vars.set("model", model.clone());
        }
        if let Some(img) = &image {
            entry_vars.set("image", img.clone());
        }
        let mut point_plans = Vec::new();
        for p in points {
            point_plans.push(self.point_plan(shared, &roles, &entry_vars, p, point_ids)?);
        }
        Ok(Deployed {
            plan: DeploymentPlan {
                id: format!("d{}", i + 1),
                axes,
                roles,
                entry_role: shared.entry.clone(),
                points: point_plans,
                name: None,
                backend: shared.backend,
                model: model.clone().unwrap_or_default(),
            },
            model: model.unwrap_or_default(),
        })
    }

    fn vars_builder<'s>(
        &'s self,
        shared: &Shared<'_>,
        placements: &[Vec<role::Placement>],
        axes: &'s BTreeMap<String, Value>,
    ) -> VarsBuilder<'s> {
        let spec = &self.task.spec;
        let gpu = spec.resources.as_ref().and_then(|r| r.gpu.as_ref());
        VarsBuilder {
            name: &spec.name.value,
            description: spec.description.as_deref().unwrap_or_default(),
            backend: shared.backend,
            gpus: shared.resources.gpu.as_ref().map_or(0, |g| g.count),
            gpu_name: gpu.and_then(|g| g.value.names.first().map(String::as_str)),
            role_gpus: shared
                .roles
                .iter()
                .filter_map(|r| {
                    let gpu = r.resources?.gpu.as_ref();
                    Some((
                        r.name.clone(),
                        (
                            gpu.map_or(0, |g| g.value.count),
                            gpu.and_then(|g| g.value.names.first().cloned()),
                        ),
                    ))
                })
                .collect(),
            hosts: self.hosts(),
            executable: self.ctx.executable.display().to_string(),
            roles: roles_variable(&shared.roles, placements),
            axes,
        }
    }

    /// One role of a deployment: its image, and each instance's commands and env rendered
    /// with that instance's variables; volumes with the first instance's.
    #[expect(
        clippy::too_many_arguments,
        reason = "the parts of one role, each used once"
    )]
    fn role_plan(
        &self,
        shared: &Shared<'_>,
        vars: &VarsBuilder<'_>,
        r: &RoleDef<'_>,
        places: &[role::Placement],
        readiness: &ReadinessPlan,
        model: Option<&str>,
        image: &Option<String>,
    ) -> Result<RolePlan, PlanError> {
        let t = TASK_SOURCE;
        let role_image = match r.image {
            Some(img) => {
                let mut v = vars.instance(&r.name, 0, places);
                if let Some(model) = model {
                    v.set("model", model.to_string());
                }
                Some(self.non_empty_image(img, &v)?)
            }
            None => image.clone(),
        };
        self.check_container_keys(&self.task.spec, &r.name, role_image.as_deref(), places)?;
        let gpus = vars.role_gpus.get(&r.name).map_or(vars.gpus, |g| g.0);
        let resources = match r.resources {
            Some(own) => resources_of(Some(own), None),
            None => shared.resources.clone(),
        };
        let own = self.node_resources(r, places, &resources);
        self.slurm_node_gpus(r, places)?;
        // On a Slurm node with no GPU count of its own, the process has the node's GPUs.
        let node_gpus: Vec<u32> = places
            .iter()
            .zip(&own)
            .map(|(place, own)| {
                // The node's own count, else the role's (`None`: the role has no
                // `resources` of its own).
                let count = match own {
                    Some(o) => Some(o.gpu.as_ref().map_or(0, |g| g.count)),
                    None => vars.role_gpus.get(&r.name).map(|g| g.0),
                };
                match &place.host {
                    crate::plan::types::HostPlan::Slurm(slurm)
                        if count.unwrap_or(gpus) == 0 && (own.is_some() || count.is_none()) =>
                    {
                        slurm.cluster.gpus_per_node
                    }
                    _ => count.unwrap_or(gpus),
                }
            })
            .collect();
        let (node_gpus, gpu_ids) = self.process_gpus(r, places, node_gpus, &shared.container)?;
        // dstack's GPUs in all are those of the process's gang (its replica).
        let mut gang_gpus: BTreeMap<usize, u32> = BTreeMap::new();
        for (place, n) in places.iter().zip(&node_gpus) {
            *gang_gpus.entry(place.replica).or_default() += n;
        }
        let mut instances = Vec::new();
        let mut volume_plans = Vec::new();
        for (index, place) in places.iter().enumerate() {
            let mut v = vars.instance(&r.name, index, places);
            if let Some(model) = model {
                v.set("model", model.to_string());
            }
            if let Some(img) = &role_image {
                v.set("image", img.clone());
            }
            if own[index].is_some() || place.proc_rank.is_some() {
                v.set("gpus", node_gpus[index]);
            }
            let jv = v.value();
            let mut commands = Vec::new();
            for c in r.commands {
                commands.push(self.render(t, "commands", c, &jv)?);
            }
            // dstack's per-node count is the node's, whatever share a process of it has.
            let per_node = r.procs.map_or(1, |p| p.value.max(1));
            let gpus_here = (node_gpus[index] * per_node, gang_gpus[&place.replica]);
            let env = self.instance_env(&r.env, &jv, gpus_here, index, places)?;
            if index == 0 {
                for v in shared.volumes.iter().chain(r.volumes) {
                    let text = self.render(t, "volumes", v, &jv)?;
                    volume_plans.push(self.volume(v, &text)?);
                }
            }
            let resources = match place.proc_rank {
                // One of several processes of a node: its share of the node's GPUs.
                Some(_) => Some(with_gpu_count(
                    own[index].as_ref().unwrap_or(&resources),
                    node_gpus[index],
                )),
                None => own[index].clone(),
            };
            instances.push(InstancePlan {
                index,
                replica: place.replica,
                node_rank: place.node_rank,
                proc_rank: place.proc_rank,
                gpu_ids: gpu_ids[index].clone(),
                probe: if place.serves() {
                    Probe::Role
                } else {
                    Probe::Alive
                },
                host: place.host.clone(),
                port: place.port,
                commands,
                env,
                resources,
            });
        }
        Ok(RolePlan {
            name: r.name.clone(),
            provider: if role_image.is_some() {
                ProviderKind::Docker
            } else {
                ProviderKind::Local
            },
            image: role_image,
            instances,
            readiness: with_ray_nodes(readiness, places),
            volumes: volume_plans,
            resources,
            container: shared.container.clone(),
            startup_order: r.startup_order.map(|o| o.value).unwrap_or_default(),
        })
    }

    /// With `procs`, each process's share of its node's GPUs (`node_gpus`: per process, the
    /// node's count) and the GPU ids it is pinned to: the role's `container.gpu_ids`, else
    /// 0..count, cut in equal slices (none on Slurm and Kubernetes, whose schedulers pick
    /// each process's GPUs). A count that does not divide is an error at `procs`.
    fn process_gpus(
        &self,
        r: &RoleDef<'_>,
        places: &[role::Placement],
        mut node_gpus: Vec<u32>,
        container: &ContainerOptions,
    ) -> Result<(Vec<u32>, Vec<Vec<String>>), PlanError> {
        let mut ids = vec![Vec::new(); places.len()];
        let Some(procs) = r.procs.filter(|p| p.value > 1) else {
            return Ok((node_gpus, ids));
        };
        let per_node = procs.value;
        for (index, place) in places.iter().enumerate() {
            let Some(proc) = place.proc_rank else {
                continue;
            };
            let count = node_gpus[index];
            if !count.is_multiple_of(per_node) {
                return Err(self
                    .at(
                        TASK_SOURCE,
                        procs.referenced,
                        format!(
                            "role `{}` runs {per_node} processes per node, but its nodes have {count} GPU(s): each process needs an equal share",
                            r.name
                        ),
                    )
                    .with_help(format!(
                        "make `resources.gpu` a multiple of {per_node}, or change `procs`"
                    ))
                    .into());
            }
            let share = count / per_node;
            node_gpus[index] = share;
            if share == 0
                || matches!(
                    place.host,
                    crate::plan::types::HostPlan::Slurm(_)
                        | crate::plan::types::HostPlan::Kubernetes(_)
                )
            {
                continue;
            }
            let all: Vec<String> = if container.gpu_ids.is_empty() {
                (0..count).map(|i| i.to_string()).collect()
            } else {
                container.gpu_ids.clone()
            };
            let (from, to) = (proc * share as usize, (proc + 1) * share as usize);
            let Some(slice) = all.get(from..to) else {
                return Err(self
                    .at(
                        TASK_SOURCE,
                        procs.referenced,
                        format!(
                            "role `{}`'s process {proc} on a node needs GPUs {from}..{} of `container.gpu_ids`, which lists {}",
                            r.name,
                            to - 1,
                            all.len()
                        ),
                    )
                    .with_help("list every GPU of the node in `container.gpu_ids`, or leave it out")
                    .into());
            };
            ids[index] = slice.to_vec();
        }
        Ok((node_gpus, ids))
    }

    /// Each process's own resources where its node's (`RoleDef::node_resources`) differ
    /// from the role's `resources`; a GPU count range takes what the node's host has.
    fn node_resources(
        &self,
        r: &RoleDef<'_>,
        places: &[role::Placement],
        resources: &Resources,
    ) -> Vec<Option<Resources>> {
        places
            .iter()
            .map(|place| {
                let spec = r.node_resources.get(place.node_rank)?;
                let host_gpus = match &place.host {
                    crate::plan::types::HostPlan::Remote { name, .. } => {
                        self.hosts().get(name).and_then(|f| f.gpus)
                    }
                    crate::plan::types::HostPlan::Slurm(s) => Some(s.cluster.gpus_per_node),
                    _ => None,
                };
                Some(resources_of(spec.as_ref(), host_gpus)).filter(|own| own != resources)
            })
            .collect()
    }

    /// A node group's own GPU count on a Slurm node: every step there gets the cluster's
    /// `gpus_per_node`, so a group that asks another count cannot be honored (an error at
    /// the group's `gpu`, naming the cluster).
    fn slurm_node_gpus(
        &self,
        r: &RoleDef<'_>,
        places: &[role::Placement],
    ) -> Result<(), PlanError> {
        for place in places {
            let crate::plan::types::HostPlan::Slurm(slurm) = &place.host else {
                continue;
            };
            let Some(Some(spec)) = r.node_resources.get(place.node_rank) else {
                continue;
            };
            let Some(gpu) = &spec.gpu else {
                continue;
            };
            let per_node = slurm.cluster.gpus_per_node;
            let asked = resources_of(Some(spec), Some(per_node))
                .gpu
                .map_or(0, |g| g.count);
            if asked != 0 && asked != per_node {
                return Err(self
                    .at(
                        TASK_SOURCE,
                        gpu.referenced,
                        format!(
                            "node {} asks {asked} GPU(s) through its group's `resources.gpu`, but on the Slurm cluster `{}` every step of a node gets its `gpus_per_node` ({per_node})",
                            place.node_rank, slurm.cluster.name
                        ),
                    )
                    .with_help(format!(
                        "ask `gpu: {per_node}` in that group, or leave `resources` out to take the node's GPUs; per-group GPU counts are honored on SSH hosts, Docker and Kubernetes"
                    ))
                    .into());
            }
        }
        Ok(())
    }

    /// One point: its load and external command rendered with the entry instance's
    /// variables and the point's axes, and an id unique in the plan.
    fn point_plan(
        &self,
        shared: &Shared<'_>,
        roles: &[RolePlan],
        entry_vars: &Vars,
        p: &SweptPoint,
        point_ids: &mut BTreeSet<String>,
    ) -> Result<PointPlan, PlanError> {
        let mut vars = entry_vars.clone();
        vars.axes(p.point.values.iter().map(|(k, v)| (k, v)));
        let vars = vars.value();
        let load = point::load_plan(self, &p.point, &p.load, &vars, shared.axis_locs)?;
        let external = crate::plan::external::plan(self, roles, &shared.entry, &vars)?;
        let mut id = sanitize(&p.point.label());
        if id.is_empty() {
            id = "default".into();
        }
        let mut unique = id.clone();
        let mut n = 2;
        while !point_ids.insert(unique.clone()) {
            unique = format!("{id}-{n}");
            n += 1;
        }
        Ok(PointPlan {
            id: unique,
            axes: p.point.values.iter().cloned().collect(),
            load,
            repetitions: point::repetitions(self)?,
            external,
        })
    }

    fn non_empty_image(&self, img: &Spanned<String>, vars: &Vars) -> Result<String, PlanError> {
        let r = self.render(TASK_SOURCE, "image", img, &vars.value())?;
        if r.trim().is_empty() {
            return Err(self
                .at(TASK_SOURCE, img.referenced, "`image` is empty")
                .with_help("name the image, or remove `image` to run local processes")
                .into());
        }
        Ok(r)
    }
}

/// Keep ids filesystem-safe: letters, digits and `. _ - = ,`; anything else becomes `_`.
/// One node per Slurm node of a role across the deployment: slots numbered per cluster in
/// role order (each role's are numbered from 0 when placed); the processes of one node
/// (`procs`, placed one after the other) share its slot.
fn number_slurm_nodes(placements: &mut [Vec<role::Placement>]) {
    let mut next: BTreeMap<String, usize> = BTreeMap::new();
    for place in placements.iter_mut().flatten() {
        let beside = place.proc_rank.is_some_and(|p| p > 0);
        if let crate::plan::types::HostPlan::Slurm(slurm) = &mut place.host {
            let slot = next.entry(slurm.cluster.name.clone()).or_default();
            let this = if beside { *slot - 1 } else { *slot };
            **slurm = crate::plan::types::SlurmPlace::planned(slurm.cluster.clone(), this);
            if !beside {
                *slot += 1;
            }
        }
    }
}

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

/// `readiness` with `ray.nodes` defaulted to the processes per replica (the role's `nodes`).
fn with_ray_nodes(readiness: &ReadinessPlan, places: &[role::Placement]) -> ReadinessPlan {
    let mut out = readiness.clone();
    if let Some(ray) = &mut out.ray {
        let per_replica = places.iter().filter(|p| p.replica == 0).count().max(1);
        ray.nodes
            .get_or_insert(u32::try_from(per_replica).unwrap_or(u32::MAX));
    }
    out
}

/// `resources` asking `count` GPUs (of the same names and vendor; a role that named no GPU
/// but runs on a node's, a Slurm node's or a host's, asks them as NVIDIA's).
fn with_gpu_count(resources: &Resources, count: u32) -> Resources {
    let mut out = resources.clone();
    match &mut out.gpu {
        Some(gpu) => gpu.count = count,
        None if count > 0 => {
            out.gpu = Some(GpuRequest {
                count,
                names: Vec::new(),
                vendor: crate::deploy::GpuVendor::Nvidia,
            });
        }
        None => {}
    }
    out
}

/// `resources:` (the task's or a role's) as the providers take it. `gpu: 0` asks for none
/// (the providers take a count of 0 as no GPUs) but keeps its vendor, which names the
/// visibility variables of pinned `container.gpu_ids`. A count range takes what `host_gpus`
/// (the first host's GPU count) has within the range.
pub(super) fn resources_of(
    resources: Option<&crate::spec::ResourcesSpec>,
    host_gpus: Option<u32>,
) -> Resources {
    let gpu = resources.and_then(|r| r.gpu.as_ref());
    Resources {
        gpu: gpu.map(|g| GpuRequest {
            count: crate::plan::preflight::allocated(&g.value, host_gpus),
            names: g.value.names.clone(),
            vendor: g.value.vendor,
        }),
        shm_size: resources
            .and_then(|r| r.shm_size.as_ref())
            .map(|s| s.value.0),
        disk: resources
            .and_then(|r| r.disk.as_ref())
            .and_then(|d| d.value.size.min),
        cpus: resources
            .and_then(|r| r.cpu.as_ref())
            .map(|c| c.value.count.min)
            .filter(|n| *n > 0),
        memory: resources
            .and_then(|r| r.memory.as_ref())
            .and_then(|m| m.value.min),
    }
}
