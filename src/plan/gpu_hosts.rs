//! Hosts chosen by their GPUs, before the plan is built: `resources.gpu` (any dstack form)
//! against the GPUs the hosts file gives. A task without `hosts:` goes to the first host that
//! satisfies it; a gang (`nodes` above 1) to one host per node, each node's host satisfying
//! that node's own request (dstack's node groups each ask their own); named hosts must
//! satisfy the request of the node they run. When none does, the error names the request
//! and the nearest miss.

use serde_saphyr::Spanned;

use super::preflight::gpu_shortfall;
use super::{HostFacts, PlanContext, PlanError};
use crate::spec::dstack::Note;
use crate::spec::values::GpuValue;
use crate::spec::{Diagnostic, TASK_SOURCE, Task};

/// `resources.gpu` against the hosts file: with no `hosts:`, the hosts whose GPUs satisfy
/// each node's request are chosen (returned as a copy of the task with `hosts` set and a
/// note); named hosts with known GPUs must satisfy the request of the node they run.
/// `None`: nothing to choose or check.
pub(super) fn place_by_gpu(task: &Task, ctx: &PlanContext) -> Result<Option<Task>, PlanError> {
    let spec = &task.spec;
    if ctx.hosts.is_empty() || spec.roles.is_some() || spec.deployments.is_some() {
        return Ok(None);
    }
    let wants = node_wants(task);
    if wants.iter().all(Option::is_none) {
        return Ok(None);
    }
    if !spec.hosts.is_empty() {
        // With as many hosts as processes, process i runs on host i: node i % nodes.
        for (i, h) in spec.hosts.iter().enumerate() {
            let (Some(want), Some(facts)) = (wants[i % wants.len()], ctx.hosts.get(&h.value))
            else {
                continue;
            };
            if let Some(problems) = gpu_shortfall(&want.value, facts)
                && !problems.is_empty()
            {
                return Err(no_host(task, want, &h.value, &problems, h).into());
            }
        }
        return Ok(None);
    }
    if ctx
        .hosts
        .values()
        .all(|f| f.gpus.is_none() || f.gpu_name.is_none())
    {
        // The hosts file says no host's GPUs: nothing to choose by.
        return Ok(None);
    }
    let replicas = spec
        .replicas
        .as_ref()
        .and_then(|r| r.value.count())
        .map_or(1, |c| c.count().max(1) as usize);
    let processes = if wants.len() == 1 {
        1
    } else {
        replicas * wants.len()
    };
    let chosen = choose(task, ctx, &wants, processes)?;
    let mut placed = task.clone();
    placed.spec.hosts = chosen
        .iter()
        .zip((0..processes).map(|p| wants[p % wants.len()]))
        .map(|(name, want)| {
            let at = want.or(wants.iter().flatten().next().copied());
            let at = at.expect("some node asks for GPUs");
            Spanned {
                value: name.clone(),
                referenced: at.referenced,
                defined: at.defined,
            }
        })
        .collect();
    for (p, name) in chosen.iter().enumerate() {
        let want = wants[p % wants.len()];
        let facts = &ctx.hosts[name];
        let node = if processes == 1 {
            String::new()
        } else {
            format!("node {}: ", p % wants.len())
        };
        let text = match want {
            Some(want) => format!(
                "{node}gpu {}: host {name} ({} x {}) satisfies it and is chosen",
                want.value.describe(),
                facts.gpus.unwrap_or(0),
                facts.gpu_name.as_deref().unwrap_or("?")
            ),
            None => format!("{node}no GPUs asked: host {name} is chosen"),
        };
        placed.dstack.push(Note {
            key: "resources".into(),
            line: want.map_or(0, |w| w.referenced.line()),
            honored: true,
            text,
        });
    }
    Ok(Some(placed))
}

/// The GPUs `r` asks for; `None` when none (or `gpu: 0`).
fn gpu(r: Option<&crate::spec::ResourcesSpec>) -> Option<&Spanned<GpuValue>> {
    r.and_then(|r| r.gpu.as_ref())
        .filter(|g| g.value.count_max != Some(0))
}

/// Each node's GPU request, by node rank: its own `resources` (dstack's node groups), else
/// the task's; `None` when it asks for no GPUs.
fn node_wants(task: &Task) -> Vec<Option<&Spanned<GpuValue>>> {
    let spec = &task.spec;
    if spec.node_resources.is_empty() {
        let nodes = spec.nodes.as_ref().map_or(1, |n| n.value.max(1)) as usize;
        return vec![gpu(spec.resources.as_ref()); nodes];
    }
    spec.node_resources
        .iter()
        .map(|r| gpu(r.as_ref()))
        .collect()
}

/// One host per process (`processes` of them, process p running node p % nodes): those
/// asking for GPUs first, each the first unused host (by name) that satisfies it; then the
/// others, preferring hosts without GPUs.
fn choose(
    task: &Task,
    ctx: &PlanContext,
    wants: &[Option<&Spanned<GpuValue>>],
    processes: usize,
) -> Result<Vec<String>, PlanError> {
    let mut chosen: Vec<Option<&String>> = vec![None; processes];
    let free = |chosen: &[Option<&String>], name: &String| !chosen.contains(&Some(name));
    for p in 0..processes {
        let Some(want) = wants[p % wants.len()] else {
            continue;
        };
        let shortfalls: Vec<(&String, Vec<String>)> = ctx
            .hosts
            .iter()
            .filter(|(name, _)| free(&chosen, name))
            .filter_map(|(name, facts)| gpu_shortfall(&want.value, facts).map(|s| (name, s)))
            .collect();
        match shortfalls.iter().find(|(_, s)| s.is_empty()) {
            Some((name, _)) => chosen[p] = Some(*name),
            None => {
                let Some((name, problems)) = shortfalls.iter().min_by_key(|(_, s)| s.len()) else {
                    return Err(too_few(task, want, processes, ctx).into());
                };
                return Err(no_host(task, want, name, problems, want).into());
            }
        }
    }
    for p in 0..processes {
        if chosen[p].is_some() {
            continue;
        }
        let unused = |f: &dyn Fn(&HostFacts) -> bool| {
            ctx.hosts
                .iter()
                .find(|(name, facts)| free(&chosen, name) && f(facts))
                .map(|(name, _)| name)
        };
        let Some(name) = unused(&|f| f.gpus.unwrap_or(0) == 0).or_else(|| unused(&|_| true)) else {
            let want = wants
                .iter()
                .flatten()
                .next()
                .expect("some node asks for GPUs");
            return Err(too_few(task, want, processes, ctx).into());
        };
        chosen[p] = Some(name);
    }
    Ok(chosen.into_iter().flatten().cloned().collect())
}

/// "no host satisfies `gpu: ...`", naming the nearest miss and what it lacks.
fn no_host<T>(
    task: &Task,
    want: &Spanned<GpuValue>,
    host: &str,
    problems: &[String],
    at: &Spanned<T>,
) -> Diagnostic {
    task.diag(
        TASK_SOURCE,
        at.referenced,
        format!(
            "no host satisfies `gpu: {}`; the nearest is `{host}`: {}",
            want.value.describe(),
            problems.join(", ")
        ),
    )
    .with_help("name a host with such GPUs in `hosts:`, add one to the hosts file (`gpus: 8:H200`), or ask for what the hosts have")
}

/// The gang needs more hosts than the hosts file has.
fn too_few(
    task: &Task,
    want: &Spanned<GpuValue>,
    processes: usize,
    ctx: &PlanContext,
) -> Diagnostic {
    task.diag(
        TASK_SOURCE,
        want.referenced,
        format!(
            "the gang needs {processes} hosts (one per node), each with the GPUs its node asks for; the hosts file has {}",
            ctx.hosts.len()
        ),
    )
    .with_help("add hosts to the hosts file, or lower `nodes`")
}
