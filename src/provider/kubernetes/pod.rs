//! The objects one instance is on Kubernetes, built from a [`LaunchRequest`] and the cluster's
//! hosts-file settings (pure: nothing here talks to the API server): its pod and the Secret
//! holding its environment, both named and labelled for the run so that teardown, `ps` and
//! `clean` find them by label.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Container, ContainerPort, EmptyDirVolumeSource, EnvFromSource, EnvVar, EnvVarSource,
    HostPathVolumeSource, LocalObjectReference, ObjectFieldSelector, Pod, PodAffinity,
    PodAffinityTerm, PodSpec, ResourceRequirements, Secret, SecretEnvSource, SecurityContext,
    TCPSocketAction, Toleration, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::hosts::KubernetesCluster;
use crate::provider::LaunchRequest;

/// Label keys every object of ours carries (values made label-safe; the full values are
/// annotations under the same keys). Prefixed `orchestrate/`, not `orchestrate.` as on our
/// containers: dockershim copies pod labels onto the pod's containers, and the Docker
/// provider's `ps`/`clean` must not take them for its own.
pub const RUN: &str = "orchestrate/run";
pub const TASK: &str = "orchestrate/task";
pub const DEPLOYMENT: &str = "orchestrate/deployment";
pub const ROLE: &str = "orchestrate/role";
pub const REPLICA: &str = "orchestrate/replica";
/// The rank of the pod's node in its replica.
pub const NODE: &str = "orchestrate/node";
/// The pod's process index on its node (only with `procs`).
pub const PROC: &str = "orchestrate/proc";
/// The pod's instance index in its role.
pub const INDEX: &str = "orchestrate/index";
/// Pid of the orchestrate process that created the object (shown by `ps`).
pub const OWNER_PID: &str = "orchestrate/pid";

/// The env var the kubelet sets to the pod's IP (downward API); `$(POD_IP)` in a command.
pub const POD_IP_ENV: &str = "POD_IP";

/// The one container of every pod.
pub const CONTAINER: &str = "server";

/// The longest name of a pod (a DNS label, so it can be the pod's hostname).
const MAX_NAME: usize = 63;

/// `text` as a label value: letters, digits, `-`, `_`, `.`, at most 63, alphanumeric at both
/// ends (others become `-`).
pub fn label_value(text: &str) -> String {
    let mapped: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .take(63)
        .collect();
    mapped
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_string()
}

/// The pod's (and its Secret's) name: `orch-<run>-<role>-<index>` as a DNS label, with a hash
/// of the whole when it must be cut.
pub fn pod_name(request: &LaunchRequest) -> String {
    let raw = format!(
        "orch-{}-{}-{}-{}",
        request.run_id, request.deployment, request.role, request.index
    );
    let mut name: String = raw
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    if name.len() > MAX_NAME {
        let hash = fnv(&raw);
        name.truncate(MAX_NAME - 9);
        name = format!("{}-{hash:08x}", name.trim_end_matches('-'));
    }
    name.trim_end_matches('-').to_string()
}

/// FNV-1a, 32 bits: a short stable suffix for cut names.
fn fnv(text: &str) -> u32 {
    text.bytes().fold(0x811c_9dc5, |h: u32, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// The labels (label-safe) and annotations (exact) of every object of this instance.
fn meta(request: &LaunchRequest, cluster: &KubernetesCluster, name: &str) -> ObjectMeta {
    let place = request.place;
    let exact: Vec<(&str, String)> = [
        (RUN, request.run_id.clone()),
        (TASK, request.task.clone()),
        (DEPLOYMENT, request.deployment.clone()),
        (ROLE, request.role.clone()),
        (REPLICA, place.replica.to_string()),
        (NODE, place.node_rank.to_string()),
        (INDEX, request.index.to_string()),
        (OWNER_PID, std::process::id().to_string()),
    ]
    .into_iter()
    .chain(place.proc_rank.map(|p| (PROC, p.to_string())))
    .collect();
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(cluster.namespace.clone()),
        labels: Some(
            exact
                .iter()
                .map(|(k, v)| (k.to_string(), label_value(v)))
                .collect(),
        ),
        annotations: Some(exact.into_iter().map(|(k, v)| (k.to_string(), v)).collect()),
        ..ObjectMeta::default()
    }
}

/// A value naming the pod's own IP (`$(POD_IP)`, from an address orchestrate rendered): it
/// goes in the pod spec's `env`, after `POD_IP`, where the kubelet expands it; `envFrom`
/// values are never expanded. Such a value is an address, not a secret.
fn names_own_ip(value: &str) -> bool {
    value.contains("$(POD_IP)")
}

/// The Secret holding the instance's environment (secrets included): the pod takes it with
/// `envFrom`, so no value is ever written in the pod spec (but for [`names_own_ip`] ones).
pub fn secret(request: &LaunchRequest, cluster: &KubernetesCluster, name: &str) -> Secret {
    Secret {
        metadata: meta(request, cluster, name),
        string_data: Some(
            request
                .env
                .iter()
                .filter(|(_, v)| !names_own_ip(v))
                .cloned()
                .collect(),
        ),
        type_: Some("Opaque".to_string()),
        ..Secret::default()
    }
}

/// A byte count as a Kubernetes quantity: in the largest binary unit that divides it
/// (`16Gi`, as a Helm chart writes it), else in bytes.
fn quantity(bytes: u64) -> String {
    for (unit, suffix) in [
        (1u64 << 40, "Ti"),
        (1 << 30, "Gi"),
        (1 << 20, "Mi"),
        (1 << 10, "Ki"),
    ] {
        if bytes >= unit && bytes.is_multiple_of(unit) {
            return format!("{}{suffix}", bytes / unit);
        }
    }
    bytes.to_string()
}

/// For one of several processes of a node (`procs`): the pods of the same run, deployment,
/// role, replica and node must share a node (`kubernetes.io/hostname`). The first of them is
/// placed freely (Kubernetes lets a pod that matches its own affinity term start a group);
/// the others follow it.
fn same_node(request: &LaunchRequest) -> Option<Affinity> {
    request.place.proc_rank?;
    let labels = [
        (RUN, request.run_id.clone()),
        (DEPLOYMENT, request.deployment.clone()),
        (ROLE, request.role.clone()),
        (REPLICA, request.place.replica.to_string()),
        (NODE, request.place.node_rank.to_string()),
    ];
    Some(Affinity {
        pod_affinity: Some(PodAffinity {
            required_during_scheduling_ignored_during_execution: Some(vec![PodAffinityTerm {
                label_selector: Some(LabelSelector {
                    match_labels: Some(
                        labels
                            .into_iter()
                            .map(|(k, v)| (k.to_string(), label_value(&v)))
                            .collect(),
                    ),
                    ..LabelSelector::default()
                }),
                topology_key: "kubernetes.io/hostname".to_string(),
                ..PodAffinityTerm::default()
            }]),
            ..PodAffinity::default()
        }),
        ..Affinity::default()
    })
}

/// The pod of `request` on `cluster`, named `name`; its environment comes from the Secret
/// of the same name ([`secret`]). `stop_grace` is its termination grace.
pub fn pod(
    request: &LaunchRequest,
    cluster: &KubernetesCluster,
    name: &str,
    stop_grace_secs: i64,
) -> Pod {
    let shell = request.container.shell.as_deref().unwrap_or("/bin/sh");
    let (command, args) = match (&request.container.entrypoint, request.commands.is_empty()) {
        (Some(words), _) => (Some(words.clone()), Some(request.commands.clone())),
        (None, true) => (None, None),
        (None, false) => (
            Some(vec![
                shell.to_string(),
                "-c".to_string(),
                request.commands.join("\n"),
            ]),
            None,
        ),
    };
    let (volumes, mounts) = volumes(request);
    let container = Container {
        name: CONTAINER.to_string(),
        image: request.image.clone(),
        image_pull_policy: Some(cluster.image_pull_policy.clone()),
        command,
        args,
        env: Some(
            std::iter::once(EnvVar {
                name: POD_IP_ENV.to_string(),
                value_from: Some(EnvVarSource {
                    field_ref: Some(ObjectFieldSelector {
                        field_path: "status.podIP".to_string(),
                        ..ObjectFieldSelector::default()
                    }),
                    ..EnvVarSource::default()
                }),
                ..EnvVar::default()
            })
            .chain(
                request
                    .env
                    .iter()
                    .filter(|(_, v)| names_own_ip(v))
                    .map(|(k, v)| EnvVar {
                        name: k.clone(),
                        value: Some(v.clone()),
                        ..EnvVar::default()
                    }),
            )
            .collect(),
        ),
        env_from: Some(vec![EnvFromSource {
            secret_ref: Some(SecretEnvSource {
                name: name.to_string(),
                optional: Some(false),
            }),
            ..EnvFromSource::default()
        }]),
        ports: Some(
            std::iter::once(request.port)
                .chain(request.container.ports.iter().copied())
                .map(|p| ContainerPort {
                    container_port: i32::from(p),
                    ..ContainerPort::default()
                })
                .collect(),
        ),
        resources: resources(request, cluster),
        volume_mounts: (!mounts.is_empty()).then_some(mounts),
        readiness_probe: Some(k8s_openapi::api::core::v1::Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::Int(i32::from(request.port)),
                ..TCPSocketAction::default()
            }),
            period_seconds: Some(2),
            ..k8s_openapi::api::core::v1::Probe::default()
        }),
        security_context: request.container.privileged.then(|| SecurityContext {
            privileged: Some(true),
            ..SecurityContext::default()
        }),
        ..Container::default()
    };
    let host_network =
        cluster.host_network || request.container.network == crate::deploy::Network::Host;
    Pod {
        metadata: meta(request, cluster, name),
        spec: Some(PodSpec {
            containers: vec![container],
            restart_policy: Some("Never".to_string()),
            termination_grace_period_seconds: Some(stop_grace_secs),
            host_network: host_network.then_some(true),
            dns_policy: host_network.then(|| "ClusterFirstWithHostNet".to_string()),
            node_selector: (!cluster.node_selector.is_empty())
                .then(|| cluster.node_selector.clone()),
            tolerations: (!cluster.tolerations.is_empty()).then(|| {
                cluster
                    .tolerations
                    .iter()
                    .map(|t| Toleration {
                        key: t.key.clone(),
                        operator: t.operator.clone(),
                        value: t.value.clone(),
                        effect: t.effect.clone(),
                        toleration_seconds: t.toleration_seconds,
                    })
                    .collect()
            }),
            service_account_name: cluster.service_account.clone(),
            image_pull_secrets: (!cluster.image_pull_secrets.is_empty()).then(|| {
                cluster
                    .image_pull_secrets
                    .iter()
                    .map(|s| LocalObjectReference { name: s.clone() })
                    .collect()
            }),
            volumes: (!volumes.is_empty()).then_some(volumes),
            affinity: same_node(request),
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

/// GPUs as the cluster's GPU resource, CPUs and memory as requests, the cluster's extra
/// resources; limits equal requests for the extended resources (as Kubernetes requires).
fn resources(request: &LaunchRequest, cluster: &KubernetesCluster) -> Option<ResourceRequirements> {
    let mut limits: BTreeMap<String, Quantity> = cluster
        .resources
        .iter()
        .map(|(k, v)| (k.clone(), Quantity(v.clone())))
        .collect();
    if let Some(gpu) = request.resources.gpu.as_ref().filter(|g| g.count > 0) {
        limits.insert(
            cluster.gpu_resource.clone(),
            Quantity(gpu.count.to_string()),
        );
    }
    let mut requests = limits.clone();
    if let Some(cpus) = request.resources.cpus {
        requests.insert("cpu".to_string(), Quantity(cpus.to_string()));
    }
    if let Some(memory) = request.resources.memory {
        requests.insert("memory".to_string(), Quantity(memory.to_string()));
    }
    if limits.is_empty() && requests.is_empty() {
        return None;
    }
    Some(ResourceRequirements {
        limits: (!limits.is_empty()).then_some(limits),
        requests: (!requests.is_empty()).then_some(requests),
        ..ResourceRequirements::default()
    })
}

/// hostPath volumes for the task's mounts, and a memory-backed emptyDir at /dev/shm for
/// `shm_size`.
fn volumes(request: &LaunchRequest) -> (Vec<Volume>, Vec<VolumeMount>) {
    let mut volumes = Vec::new();
    let mut mounts = Vec::new();
    for (i, v) in request.volumes.iter().enumerate() {
        let name = format!("host-{i}");
        volumes.push(Volume {
            name: name.clone(),
            host_path: Some(HostPathVolumeSource {
                path: v.host.clone(),
                type_: None,
            }),
            ..Volume::default()
        });
        mounts.push(VolumeMount {
            name,
            mount_path: v.container.clone(),
            read_only: v.read_only.then_some(true),
            ..VolumeMount::default()
        });
    }
    if let Some(shm) = request.resources.shm_size {
        volumes.push(Volume {
            name: "shm".to_string(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: Some("Memory".to_string()),
                size_limit: Some(Quantity(quantity(shm))),
            }),
            ..Volume::default()
        });
        mounts.push(VolumeMount {
            name: "shm".to_string(),
            mount_path: "/dev/shm".to_string(),
            ..VolumeMount::default()
        });
    }
    (volumes, mounts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deploy::{ContainerOptions, GpuRequest, Resources};
    use crate::hosts::Toleration as TolerationSetting;

    fn cluster() -> KubernetesCluster {
        KubernetesCluster {
            name: "k8s".into(),
            kubeconfig: None,
            context: None,
            namespace: "bench".into(),
            node_selector: BTreeMap::from([("pool".to_string(), "h100".to_string())]),
            tolerations: vec![TolerationSetting {
                key: Some("nvidia.com/gpu".into()),
                operator: Some("Exists".into()),
                value: None,
                effect: Some("NoSchedule".into()),
                toleration_seconds: None,
            }],
            gpu_resource: "amd.com/gpu".into(),
            resources: BTreeMap::from([("rdma/hca".to_string(), "1".to_string())]),
            service_account: Some("bench".into()),
            image_pull_secrets: vec!["regcred".into()],
            host_network: true,
            image_pull_policy: "Never".into(),
            places: BTreeMap::new(),
        }
    }

    fn request() -> LaunchRequest {
        LaunchRequest {
            run_id: "20261126-201500-Bench".into(),
            task: "my task".into(),
            deployment: "d1".into(),
            role: "decode".into(),
            index: 2,
            place: crate::provider::ProcessPlace {
                replica: 1,
                node_rank: 0,
                proc_rank: Some(3),
            },
            image: Some("vllm/vllm-openai:v0.11".into()),
            commands: vec!["echo hi".into(), "exec serve --port 8000".into()],
            env: vec![("HF_TOKEN".into(), "hf_secret".into())],
            port: 8000,
            volumes: vec![crate::deploy::VolumeMount {
                host: "/models".into(),
                container: "/models".into(),
                read_only: true,
            }],
            resources: Resources {
                gpu: Some(GpuRequest {
                    count: 8,
                    names: vec![],
                    vendor: crate::deploy::GpuVendor::Amd,
                }),
                shm_size: Some(1 << 30),
                cpus: Some(16),
                ..Resources::default()
            },
            log: crate::provider::LogSink::memory(),
            container: ContainerOptions::default(),
        }
    }

    #[test]
    fn the_pod_carries_the_role_and_the_cluster_settings() {
        let request = request();
        let name = pod_name(&request);
        assert_eq!(name, "orch-20261126-201500-bench-d1-decode-2");
        let pod = pod(&request, &cluster(), &name, 10);
        let value = serde_json::to_value(&pod).unwrap();
        let spec = &value["spec"];
        let c = &spec["containers"][0];
        assert_eq!(value["kind"], "Pod");
        assert_eq!(value["metadata"]["namespace"], "bench");
        assert_eq!(value["metadata"]["labels"][TASK], "my-task");
        assert_eq!(value["metadata"]["annotations"][TASK], "my task");
        assert_eq!(value["metadata"]["labels"][ROLE], "decode");
        assert_eq!(value["metadata"]["labels"][REPLICA], "1");
        assert_eq!(value["metadata"]["labels"][NODE], "0");
        assert_eq!(value["metadata"]["labels"][PROC], "3");
        assert_eq!(value["metadata"]["labels"][INDEX], "2");
        // One of several processes of a node: beside the pods of the same node.
        let term = &value["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            [0];
        assert_eq!(term["topologyKey"], "kubernetes.io/hostname");
        assert_eq!(term["labelSelector"]["matchLabels"][NODE], "0");
        assert_eq!(term["labelSelector"]["matchLabels"][REPLICA], "1");
        assert_eq!(term["labelSelector"]["matchLabels"][ROLE], "decode");
        assert!(term["labelSelector"]["matchLabels"].get(PROC).is_none());
        assert_eq!(c["image"], "vllm/vllm-openai:v0.11");
        assert_eq!(c["imagePullPolicy"], "Never");
        assert_eq!(c["command"][2], "echo hi\nexec serve --port 8000");
        assert_eq!(c["resources"]["limits"]["amd.com/gpu"], "8");
        assert_eq!(c["resources"]["requests"]["amd.com/gpu"], "8");
        assert_eq!(c["resources"]["limits"]["rdma/hca"], "1");
        assert_eq!(c["resources"]["requests"]["cpu"], "16");
        assert_eq!(c["envFrom"][0]["secretRef"]["name"], name.as_str());
        assert_eq!(
            c["env"][0]["valueFrom"]["fieldRef"]["fieldPath"],
            "status.podIP"
        );
        assert_eq!(c["readinessProbe"]["tcpSocket"]["port"], 8000);
        assert_eq!(spec["restartPolicy"], "Never");
        assert_eq!(spec["hostNetwork"], true);
        assert_eq!(spec["nodeSelector"]["pool"], "h100");
        assert_eq!(spec["tolerations"][0]["operator"], "Exists");
        assert_eq!(spec["serviceAccountName"], "bench");
        assert_eq!(spec["imagePullSecrets"][0]["name"], "regcred");
        assert_eq!(spec["volumes"][0]["hostPath"]["path"], "/models");
        assert_eq!(c["volumeMounts"][0]["readOnly"], true);
        assert_eq!(spec["volumes"][1]["emptyDir"]["medium"], "Memory");
        assert_eq!(spec["volumes"][1]["emptyDir"]["sizeLimit"], "1Gi");
        assert_eq!(c["volumeMounts"][1]["mountPath"], "/dev/shm");
        // Secrets never in the pod spec: the environment is in the Secret.
        assert!(!value.to_string().contains("hf_secret"), "{value}");
        let secret = serde_json::to_value(secret(&request, &cluster(), &name)).unwrap();
        assert_eq!(secret["stringData"]["HF_TOKEN"], "hf_secret");
        assert_eq!(secret["metadata"]["labels"][RUN], "20261126-201500-Bench");
    }

    #[test]
    fn sizes_are_quantities_in_the_largest_unit_that_divides_them() {
        assert_eq!(quantity(16 << 30), "16Gi");
        assert_eq!(quantity(1536 << 20), "1536Mi");
        assert_eq!(quantity(2 << 40), "2Ti");
        assert_eq!(quantity(1000), "1000");
    }

    #[test]
    fn names_and_label_values_are_what_kubernetes_takes() {
        let mut request = request();
        request.run_id = "r".repeat(80);
        let name = pod_name(&request);
        assert!(name.len() <= 63, "{name}");
        assert!(crate::hosts::is_dns_label(&name), "{name}");
        request.index = 3;
        assert_ne!(pod_name(&request), name, "the hash keeps cut names apart");
        assert_eq!(label_value("my task/v2"), "my-task-v2");
        assert_eq!(label_value("-x-"), "x");
        assert_eq!(label_value(&"a".repeat(70)).len(), 63);
    }

    #[test]
    fn a_pod_without_gpus_or_extras_asks_for_nothing() {
        let mut request = request();
        request.resources = Resources::default();
        request.volumes.clear();
        let mut plain = cluster();
        plain.resources.clear();
        plain.host_network = false;
        let value = serde_json::to_value(pod(&request, &plain, "p", 10)).unwrap();
        assert!(
            value["spec"]["containers"][0].get("resources").is_none(),
            "{value}"
        );
        assert!(value["spec"].get("volumes").is_none());
        assert!(value["spec"].get("hostNetwork").is_none());
    }

    #[test]
    fn an_env_value_naming_the_pods_own_ip_is_in_the_spec_where_the_kubelet_expands_it() {
        let mut request = request();
        request
            .env
            .push(("DSTACK_MASTER_NODE_IP".into(), "$(POD_IP)".into()));
        let spec = serde_json::to_value(pod(&request, &cluster(), "p", 10)).unwrap();
        let env = &spec["spec"]["containers"][0]["env"];
        assert_eq!(
            env[0]["name"], POD_IP_ENV,
            "POD_IP first: later values refer to it"
        );
        assert_eq!(env[1]["name"], "DSTACK_MASTER_NODE_IP");
        assert_eq!(env[1]["value"], "$(POD_IP)");
        let secret = serde_json::to_value(secret(&request, &cluster(), "p")).unwrap();
        assert!(
            secret["stringData"].get("DSTACK_MASTER_NODE_IP").is_none(),
            "{secret}"
        );
        assert_eq!(secret["stringData"]["HF_TOKEN"], "hf_secret");
    }
}
