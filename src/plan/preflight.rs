//! Plan-side pre-flight: what the hosts must offer before anything starts, read off a plan.
//! For every remote host the plan places instances on, the ports it must have free, the GPUs
//! it must have (the most any one deployment puts on it, summed over that deployment's
//! instances there) and whether Docker must answer; for a Docker role on this machine, its
//! image, GPUs and ports. Checking them is the providers' and ssh's work; this only says what.

use std::collections::BTreeMap;

use super::{DeploymentPlan, HostPlan, ProviderKind, RolePlan};
use crate::deploy::GpuRequest;

/// What one remote host must offer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostNeeds {
    /// The host's name in the hosts file.
    pub host: String,
    /// Some role runs in Docker there, so its engine must answer.
    pub docker: bool,
    /// The most GPUs any one deployment puts there.
    pub gpus: Option<GpuRequest>,
    /// Ports that must be free, in first-use order.
    pub ports: Vec<u16>,
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
                });
                need.docker |= role.provider == ProviderKind::Docker;
                if !need.ports.contains(&instance.port) {
                    need.ports.push(instance.port);
                }
                if let Some(want) = &role.resources.gpu {
                    gpus_here
                        .entry(name.clone())
                        .and_modify(|sum| {
                            sum.count += want.count;
                            for n in &want.names {
                                if !sum.names.contains(n) {
                                    sum.names.push(n.clone());
                                }
                            }
                        })
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

/// What a Docker role needs from the engine on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalDockerNeeds {
    pub image: Option<String>,
    /// GPUs for every instance on this machine together; `None` when none are asked for.
    pub gpus: Option<GpuRequest>,
    /// Each local instance's port.
    pub ports: Vec<u16>,
}

/// What a Docker role of a plan needs from the local engine: its image, its GPUs (once per
/// instance on this host) and each local instance's port.
pub fn local_docker_needs(role: &RolePlan) -> LocalDockerNeeds {
    let local: Vec<_> = role
        .instances
        .iter()
        .filter(|i| matches!(i.host, HostPlan::Local))
        .collect();
    let gpus = match &role.resources.gpu {
        Some(gpu) if !local.is_empty() && gpu.count > 0 => {
            let mut all = gpu.clone();
            all.count = gpu.count.saturating_mul(local.len() as u32);
            Some(all)
        }
        _ => None,
    };
    LocalDockerNeeds {
        image: role.image.clone(),
        gpus,
        ports: local.iter().map(|i| i.port).collect(),
    }
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
                    probe: Probe::Role,
                    host: HostPlan::Remote {
                        name: host.to_string(),
                        address: "x".to_string(),
                    },
                    port: *port,
                    commands: Vec::new(),
                    env: Vec::new(),
                })
                .collect(),
            readiness: ReadinessPlan {
                http: None,
                generate: false,
                interval: Duration::from_secs(1),
                timeout: Duration::from_secs(1),
                workers: None,
                alive_only: false,
            },
            volumes: Vec::new(),
            container: Default::default(),
            resources: Resources {
                gpu: Some(GpuRequest {
                    count: gpus,
                    names: vec!["H20".to_string()],
                    vendor: GpuVendor::Nvidia,
                }),
                shm_size: None,
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
        let needs = remote_host_needs(&plan);
        assert_eq!(needs.len(), 2);
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
            probe: Probe::Role,
            host: HostPlan::Local,
            port: 9001,
            commands: Vec::new(),
            env: Vec::new(),
        });
        r.instances.push(InstancePlan {
            index: 2,
            replica: 2,
            node_rank: 0,
            probe: Probe::Role,
            host: HostPlan::Remote {
                name: "b".to_string(),
                address: "x".to_string(),
            },
            port: 9002,
            commands: Vec::new(),
            env: Vec::new(),
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
