//! Pre-flight checks derived from a plan: for every remote host the plan places instances
//! on, the ports it must have free, the GPUs it must have (the most any one deployment puts
//! on it, summed over that deployment's instances there) and whether Docker must answer.

use std::collections::BTreeMap;

use super::HostCheck;
use crate::hosts::{HostsError, HostsFile};
use crate::plan::{DeploymentPlan, GpuRequest, HostPlan, ProviderKind};

/// One [`HostCheck`] per remote host of `deployments`, in host-name order.
pub fn checks_for(
    deployments: &[DeploymentPlan],
    hosts: &HostsFile,
) -> Result<Vec<HostCheck>, HostsError> {
    let mut checks: BTreeMap<String, HostCheck> = BTreeMap::new();
    for deployment in deployments {
        let mut gpus_here: BTreeMap<String, GpuRequest> = BTreeMap::new();
        for role in &deployment.roles {
            for instance in &role.instances {
                let HostPlan::Remote { name, .. } = &instance.host else {
                    continue;
                };
                let check = match checks.get_mut(name) {
                    Some(check) => check,
                    None => {
                        let host = hosts.host(name)?.clone();
                        checks.entry(name.clone()).or_insert(HostCheck {
                            host,
                            docker: false,
                            gpus: None,
                            ports: Vec::new(),
                        })
                    }
                };
                check.docker |= role.provider == ProviderKind::Docker;
                if !check.ports.contains(&instance.port) {
                    check.ports.push(instance.port);
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
            let check = checks.get_mut(&name).expect("inserted above");
            match &check.gpus {
                Some(have) if have.count >= want.count => {}
                _ => check.gpus = Some(want),
            }
        }
    }
    Ok(checks.into_values().collect())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::plan::{GpuVendor, InstancePlan, ReadinessPlan, Resources, RolePlan};

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
                timeout: Duration::from_secs(1),
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
        }
    }

    #[test]
    fn sums_gpus_per_deployment_and_keeps_the_largest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hosts.yaml");
        std::fs::write(&path, "hosts:\n  a: {}\n  b: {}\n").unwrap();
        let hosts = crate::hosts::load_with(&path, &Default::default()).unwrap();
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
        let checks = checks_for(&plan, &hosts).unwrap();
        assert_eq!(checks.len(), 2);
        let (a, b) = (&checks[0], &checks[1]);
        assert_eq!(a.host.name, "a");
        assert!(a.docker && !b.docker);
        assert_eq!(a.ports, [30000, 30001]);
        assert_eq!(b.ports, [30000, 8000]);
        assert_eq!(a.gpus.as_ref().unwrap().count, 8);
        assert_eq!(b.gpus.as_ref().unwrap().count, 4);
    }

    #[test]
    fn unknown_host_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hosts.yaml");
        std::fs::write(&path, "hosts:\n  a: {}\n").unwrap();
        let hosts = crate::hosts::load_with(&path, &Default::default()).unwrap();
        let plan = [deployment(vec![role(
            "s",
            ProviderKind::Local,
            1,
            &[("aa", 1)],
        )])];
        let err = checks_for(&plan, &hosts).unwrap_err().to_string();
        assert!(err.contains("unknown host `aa`"), "{err}");
    }
}
