//! Kubernetes clusters of the hosts file: every key read, the defaults, and errors that name
//! the key and the line.

use super::*;
use crate::hosts::{SshConfig, load_with};

fn load(text: &str) -> Result<crate::hosts::HostsFile, String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hosts.yaml");
    std::fs::write(&path, text).unwrap();
    load_with(&path, &SshConfig::default()).map_err(|e| {
        e.to_string()
            .replace(&dir.path().display().to_string(), "[DIR]")
    })
}

const FULL: &str = "\
hosts: {}
clusters:
  k8s:
    kubernetes:
      kubeconfig: /etc/kube/bench.yaml
      context: gpu-pool
      namespace: bench
      node_selector: {nvidia.com/gpu.product: H100_80GB}
      tolerations:
        - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
      gpu_resource: amd.com/gpu
      resources: {rdma/hca: 1, hugepages-2Mi: 1Gi}
      service_account: bench
      image_pull_secrets: [regcred]
      host_network: true
      image_pull_policy: Never
      price_per_gpu_hour: 2.5
";

#[test]
fn every_key_is_read() {
    let file = load(FULL).unwrap();
    let k8s = file.kubernetes("k8s").unwrap();
    assert_eq!(k8s.kubeconfig, Some(PathBuf::from("/etc/kube/bench.yaml")));
    assert_eq!(k8s.context.as_deref(), Some("gpu-pool"));
    assert_eq!(k8s.namespace, "bench");
    assert_eq!(k8s.node_selector["nvidia.com/gpu.product"], "H100_80GB");
    assert_eq!(k8s.tolerations[0].operator.as_deref(), Some("Exists"));
    assert_eq!(k8s.tolerations[0].effect.as_deref(), Some("NoSchedule"));
    assert_eq!(k8s.gpu_resource, "amd.com/gpu");
    assert_eq!(k8s.resources["rdma/hca"], "1");
    assert_eq!(k8s.resources["hugepages-2Mi"], "1Gi");
    assert_eq!(k8s.service_account.as_deref(), Some("bench"));
    assert_eq!(k8s.image_pull_secrets, vec!["regcred".to_string()]);
    assert!(k8s.host_network);
    assert_eq!(k8s.image_pull_policy, "Never");
    assert_eq!(file.price_per_gpu_hour("k8s"), Some(2.5));
    assert_eq!(k8s.key("namespace"), "clusters.k8s.kubernetes.namespace");
    assert_eq!(
        k8s.at("namespace"),
        Some(format!("{}:7:18", file.path.display()).as_str())
    );
    assert_eq!(file.kubernetes_clusters().count(), 1);
    assert!(file.slurm("k8s").is_none());
}

#[test]
fn an_empty_map_takes_the_defaults() {
    let file = load("hosts: {}\nclusters:\n  k8s:\n    kubernetes: {}\n").unwrap();
    let k8s = file.kubernetes("k8s").unwrap();
    assert_eq!(k8s.kubeconfig, None);
    assert_eq!(k8s.context, None);
    assert_eq!(k8s.namespace, DEFAULT_NAMESPACE);
    assert_eq!(k8s.gpu_resource, DEFAULT_GPU_RESOURCE);
    assert!(!k8s.host_network);
    assert_eq!(k8s.image_pull_policy, "IfNotPresent");
    assert!(k8s.resources.is_empty() && k8s.tolerations.is_empty());
}

#[test]
fn errors_name_the_key_and_the_line() {
    let base = "hosts: {}\nclusters:\n  k8s:\n    kubernetes:\n";
    let cases = [
        (
            "      namespace: Bench\n",
            "hosts.yaml:5:18: `clusters.k8s.kubernetes.namespace` is `Bench`, which is not a namespace name",
        ),
        (
            "      gpu_resource: gpu\n",
            "hosts.yaml:5:21: `clusters.k8s.kubernetes.gpu_resource` is `gpu`, which is not an extended resource name",
        ),
        (
            "      resources: {rdma/hca: lots}\n",
            "`clusters.k8s.kubernetes.resources.rdma/hca` is `lots`, which is not a quantity",
        ),
        (
            "      resources: {\"bad key\": 1}\n",
            "`clusters.k8s.kubernetes.resources` has `bad key`, which is not a resource name",
        ),
        (
            "      node_selector: {pool: \"a b\"}\n",
            "`clusters.k8s.kubernetes.node_selector.pool` is `a b`, which is not a label value",
        ),
        (
            "      tolerations: [{key: gpu, operator: Maybe}]\n",
            "a toleration of `clusters.k8s.kubernetes.tolerations` has operator `Maybe`",
        ),
        (
            "      tolerations: [{key: gpu, effect: Never}]\n",
            "has effect `Never`",
        ),
        (
            "      image_pull_secrets: [Reg_Cred]\n",
            "`clusters.k8s.kubernetes.image_pull_secrets` has `Reg_Cred`, which is not a Secret name",
        ),
        (
            "      service_account: \"\"\n",
            "`clusters.k8s.kubernetes.service_account` is ``, which is not a service account name",
        ),
        (
            "      kubeconfig: 42\n",
            "hosts.yaml:5:19: `clusters.k8s.kubernetes.kubeconfig` is a number, not a file path",
        ),
        (
            "      context: \"\"\n",
            "`clusters.k8s.kubernetes.context` is empty",
        ),
        (
            "      image_pull_policy: never\n",
            "`clusters.k8s.kubernetes.image_pull_policy` is `never`: expected `Always`, `IfNotPresent` or `Never`",
        ),
    ];
    for (line, want) in cases {
        let err = load(&format!("{base}{line}")).unwrap_err();
        assert!(err.contains(want), "{line}: {err}");
    }
    let err = load(&format!("{base}      namspace: bench\n")).unwrap_err();
    assert!(
        err.contains("hosts.yaml:5:7") && err.contains("namspace"),
        "{err}"
    );
    let err = load("hosts: {}\nclusters:\n  k8s: {kubernetes: {}, slurm: {partition: a, time_limit: \"1\", gpus_per_node: 1}}\n").unwrap_err();
    assert!(
        err.contains("either `slurm:` or `kubernetes:`, not both"),
        "{err}"
    );
    let err = load("hosts: {}\nclusters:\n  k8s: {}\n").unwrap_err();
    assert!(err.contains("needs `slurm:` or `kubernetes:`"), "{err}");
}

#[test]
fn names_follow_kubernetes_rules() {
    assert!(is_dns_label("bench-1"));
    assert!(!is_dns_label("Bench"));
    assert!(!is_dns_label("-a"));
    assert!(!is_dns_label(&"a".repeat(64)));
    assert!(is_dns_subdomain("regcred.v2"));
    assert!(!is_dns_subdomain("reg_cred"));
    assert!(is_qualified_name("nvidia.com/gpu"));
    assert!(is_qualified_name("kubernetes.io/hostname"));
    assert!(is_qualified_name("pool"));
    assert!(!is_qualified_name("nvidia.com/"));
    assert!(!is_qualified_name("Bad_Domain/x"));
    assert!(is_label_value(""));
    assert!(is_label_value("H100_80GB"));
    assert!(!is_label_value("a/b"));
}

#[test]
fn quantities_follow_kubernetes_rules() {
    for good in ["1", "8", "500m", "16Gi", "1.5", "2e3", "100M"] {
        assert!(is_quantity(good), "{good}");
    }
    for bad in ["", "one", "1GB", "-1", "1..2", "Gi", "."] {
        assert!(!is_quantity(bad), "{bad}");
    }
}
