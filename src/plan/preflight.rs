//! Plan-side pre-flight: what the hosts must offer before anything starts, read off a plan.
//! For every remote host the plan places instances on, the ports it must have free, the GPUs
//! it must have (the most any one deployment puts on it, summed over that deployment's
//! instances there) and whether Docker must answer; for a Docker role on this machine, its
//! image, GPUs and ports. Checking them is the providers' and ssh's work; this only says what.
//!
//! Also whether a host's GPUs (as the hosts file gives them) satisfy `resources.gpu`, which
//! `gpu_hosts` uses to choose the hosts.

use std::collections::BTreeMap;

use super::{DeploymentPlan, HostFacts, HostPlan, ProviderKind, RolePlan};
use crate::deploy::GpuRequest;
use crate::hosts::gpu;
use crate::spec::values::GpuValue;

/// What one remote host must offer: read off the plan by host name ([`remote_host_needs`]),
/// and checked over SSH with the host's entry in the hosts file (`ssh::HostCheck`, the same
/// needs for a `hosts::Host`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostNeeds<H = String> {
    /// The host: its name in the hosts file, or its entry there.
    pub host: H,
    /// Some role runs in Docker there, so its engine must answer (through an SSH tunnel to
    /// its socket).
    pub docker: bool,
    /// The most GPUs any one deployment puts there.
    pub gpus: Option<GpuRequest>,
    /// Ports that must be free (not listened on), in first-use order.
    pub ports: Vec<u16>,
    /// Free disk in bytes (`resources.disk`'s minimum; the most any deployment asks), where
    /// the host keeps data: the Docker root (`/var/lib/docker`) when a role runs in Docker
    /// there, else the login user's home.
    pub disk: Option<u64>,
    /// CPU cores and RAM bytes (`resources.cpu`, `resources.memory`; their minimums).
    pub cpus: Option<u32>,
    pub memory: Option<u64>,
}

impl<H> HostNeeds<H> {
    /// The same needs for the host as `to` names it.
    pub fn on<T>(self, to: T) -> HostNeeds<T> {
        HostNeeds {
            host: to,
            docker: self.docker,
            gpus: self.gpus,
            ports: self.ports,
            disk: self.disk,
            cpus: self.cpus,
            memory: self.memory,
        }
    }
}

/// One [`HostNeeds`] per remote host of `deployments`, in host-name order.
pub fn remote_host_needs(deployments: &[DeploymentPlan]) -> Vec<HostNeeds> {
    let mut needs: BTreeMap<String, HostNeeds> = BTreeMap::new();
    for deployment in deployments {
        let mut gpus_here: BTreeMap<String, GpuRequest> = BTreeMap::new();
        for role in &deployment.roles {
            for instance in &role.instances {
                let HostPlan::Remote { name, .. } = &instance.host else {
                    continue;
                };
                let need = needs.entry(name.clone()).or_insert_with(|| HostNeeds {
                    host: name.clone(),
                    docker: false,
                    gpus: None,
                    ports: Vec::new(),
                    disk: None,
                    cpus: None,
                    memory: None,
                });
                let resources = role.resources_of(instance);
                need.docker |= role.provider == ProviderKind::Docker;
                need.disk = need.disk.max(resources.disk);
                need.cpus = need.cpus.max(resources.cpus);
                need.memory = need.memory.max(resources.memory);
                if !need.ports.contains(&instance.port) {
                    need.ports.push(instance.port);
                }
                if let Some(want) = &resources.gpu {
                    gpus_here
                        .entry(name.clone())
                        .and_modify(|sum| add_gpus(sum, want))
                        .or_insert_with(|| want.clone());
                }
            }
        }
        for (name, want) in gpus_here {
            let need = needs.get_mut(&name).expect("inserted above");
            match &need.gpus {
                Some(have) if have.count >= want.count => {}
                _ => need.gpus = Some(want),
            }
        }
    }
    needs.into_values().collect()
}

/// `want` added to `sum`: the counts summed, the accepted models of both.
fn add_gpus(sum: &mut GpuRequest, want: &GpuRequest) {
    sum.count = sum.count.saturating_add(want.count);
    for n in &want.names {
        if !sum.names.contains(n) {
            sum.names.push(n.clone());
        }
    }
}

/// What a Docker role needs from the engine on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalDockerNeeds {
    pub image: Option<String>,
    /// GPUs for every instance on this machine together; `None` when none are asked for.
    pub gpus: Option<GpuRequest>,
    /// Each local instance's port.
    pub ports: Vec<u16>,
}

/// What a Docker role of a plan needs from the local engine: its image, its GPUs (each
/// instance's on this host, summed) and each local instance's port.
pub fn local_docker_needs(role: &RolePlan) -> LocalDockerNeeds {
    let local: Vec<_> = role
        .instances
        .iter()
        .filter(|i| matches!(i.host, HostPlan::Local))
        .collect();
    let mut gpus: Option<GpuRequest> = None;
    for want in local
        .iter()
        .filter_map(|i| role.resources_of(i).gpu.as_ref())
        .filter(|g| g.count > 0)
    {
        match &mut gpus {
            None => gpus = Some(want.clone()),
            Some(sum) => add_gpus(sum, want),
        }
    }
    LocalDockerNeeds {
        image: role.image.clone(),
        gpus,
        ports: local.iter().map(|i| i.port).collect(),
    }
}

/// Why a host with `facts` does not satisfy `want`: one phrase per shortfall, none when it
/// does. `None` when the hosts file does not say which GPUs the host has.
pub fn gpu_shortfall(want: &GpuValue, facts: &HostFacts) -> Option<Vec<String>> {
    let (count, model) = (facts.gpus?, facts.gpu_name.as_deref()?);
    let mut out = Vec::new();
    if !want.names.is_empty() && !want.names.iter().any(|n| gpu::is_model(model, n)) {
        out.push(format!("{model} is not {}", want.names.join(" or ")));
    } else if want.names.is_empty()
        && want.vendor_given
        && crate::spec::values::vendor_of(&[model.to_string()]) != want.vendor
    {
        out.push(format!("{model} is another vendor's GPU"));
    }
    if count < want.count {
        out.push(format!("{count} GPUs, not {}", want.count_range()));
    }
    let each = gpu::memory_bytes(model);
    if let Some(range) = &want.memory {
        match each {
            Some(m) if range.contains(m) => {}
            Some(m) => out.push(format!("{} per GPU, not {range}", gb(m))),
            None => out.push(format!("the memory of a {model} is unknown")),
        }
    }
    if let Some(range) = &want.total_memory {
        let n = u64::from(allocated(want, Some(count)));
        match each {
            Some(m) if range.contains(m * n) => {}
            Some(m) => out.push(format!("{} in {n} GPUs, not {range}", gb(m * n))),
            None => out.push(format!("the memory of a {model} is unknown")),
        }
    }
    if let Some(cc) = &want.compute_capability {
        match gpu::compute_capability(model) {
            Some(have) if version(have) >= version(cc) => {}
            Some(have) => out.push(format!("compute capability {have}, not {cc}+")),
            None => out.push(format!("{model} has no CUDA compute capability")),
        }
    }
    Some(out)
}

/// How many GPUs a request takes on a host with `host_count` GPUs (when known): as many as
/// the host has within the request's range, else the range's minimum.
pub fn allocated(want: &GpuValue, host_count: Option<u32>) -> u32 {
    match host_count {
        Some(n) if n >= want.count => want.count_max.map_or(n, |max| n.min(max)),
        _ => want.count,
    }
}

fn version(v: &str) -> (u32, u32) {
    let (a, b) = v.split_once('.').unwrap_or((v, "0"));
    (a.parse().unwrap_or(0), b.parse().unwrap_or(0))
}

fn gb(bytes: u64) -> String {
    crate::units::number(bytes as f64 / 1e9) + "GB"
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::deploy::{GpuVendor, Resources};
    use crate::plan::{InstancePlan, Probe, ReadinessPlan};

    fn role(name: &str, provider: ProviderKind, gpus: u32, on: &[(&str, u16)]) -> RolePlan {
        RolePlan {
            name: name.to_string(),
            provider,
            image: None,
            instances: on
                .iter()
                .enumerate()
                .map(|(index, (host, port))| InstancePlan {
                    index,
                    replica: index,
                    node_rank: 0,
                    proc_rank: None,
                    gpu_ids: Vec::new(),
                    probe: Probe::Role,
                    host: HostPlan::Remote {
                        name: host.to_string(),
                        address: "x".to_string(),
                    },
                    port: *port,
                    commands: Vec::new(),
                    env: Vec::new(),
                    resources: None,
                })
                .collect(),
            readiness: ReadinessPlan {
                http: None,
                generate: false,
                interval: Duration::from_secs(1),
                timeout: Duration::from_secs(1),
                alive_only: false,
                workers: None,
                ray: None,
            },
            volumes: Vec::new(),
            container: Default::default(),
            startup_order: Default::default(),
            resources: Resources {
                gpu: Some(GpuRequest {
                    count: gpus,
                    names: vec!["H20".to_string()],
                    vendor: GpuVendor::Nvidia,
                }),
                shm_size: None,
                disk: None,
                cpus: None,
                memory: None,
            },
        }
    }

    fn deployment(roles: Vec<RolePlan>) -> DeploymentPlan {
        DeploymentPlan {
            id: "d".to_string(),
            axes: BTreeMap::new(),
            roles,
            entry_role: "router".to_string(),
            points: Vec::new(),
            name: None,
            backend: crate::load::Backend::Openai,
            model: "m".to_string(),
        }
    }

    #[test]
    fn sums_gpus_per_deployment_and_keeps_the_largest() {
        let plan = [
            deployment(vec![
                role("prefill", ProviderKind::Docker, 4, &[("a", 30000)]),
                role(
                    "decode",
                    ProviderKind::Local,
                    4,
                    &[("a", 30001), ("b", 30000)],
                ),
            ]),
            deployment(vec![role("server", ProviderKind::Local, 2, &[("b", 8000)])]),
        ];
        let mut plan = plan;
        plan[0].roles[0].resources.disk = Some(200);
        plan[0].roles[1].resources.cpus = Some(16);
        plan[1].roles[0].resources.disk = Some(100);
        let needs = remote_host_needs(&plan);
        assert_eq!(needs.len(), 2);
        assert_eq!(needs[0].disk, Some(200), "host a: the largest request");
        assert_eq!(needs[1].disk, Some(100));
        assert_eq!((needs[0].cpus, needs[1].cpus), (Some(16), Some(16)));
        let (a, b) = (&needs[0], &needs[1]);
        assert_eq!(a.host, "a");
        assert!(a.docker && !b.docker);
        assert_eq!(a.ports, [30000, 30001]);
        assert_eq!(b.ports, [30000, 8000]);
        assert_eq!(a.gpus.as_ref().unwrap().count, 8);
        assert_eq!(b.gpus.as_ref().unwrap().count, 4);
    }

    #[test]
    fn a_local_docker_role_needs_its_image_gpus_for_every_local_instance_and_ports() {
        let mut r = role("server", ProviderKind::Docker, 2, &[("a", 9000)]);
        r.image = Some("img".to_string());
        r.instances[0].host = HostPlan::Local;
        r.instances.push(InstancePlan {
            index: 1,
            replica: 1,
            node_rank: 0,
            proc_rank: None,
            gpu_ids: Vec::new(),
            probe: Probe::Role,
            host: HostPlan::Local,
            port: 9001,
            commands: Vec::new(),
            env: Vec::new(),
            resources: None,
        });
        r.instances.push(InstancePlan {
            index: 2,
            replica: 2,
            node_rank: 0,
            proc_rank: None,
            gpu_ids: Vec::new(),
            probe: Probe::Role,
            host: HostPlan::Remote {
                name: "b".to_string(),
                address: "x".to_string(),
            },
            port: 9002,
            commands: Vec::new(),
            env: Vec::new(),
            resources: None,
        });
        let needs = local_docker_needs(&r);
        assert_eq!(needs.image.as_deref(), Some("img"));
        assert_eq!(
            needs.gpus.unwrap().count,
            4,
            "two local instances of 2 GPUs"
        );
        assert_eq!(
            needs.ports,
            [9000, 9001],
            "the remote instance is not checked here"
        );
    }
}
