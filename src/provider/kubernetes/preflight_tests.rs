//! Unit tests of the GPU arithmetic of the Kubernetes pre-flight (the API calls are tested
//! against the real cluster in tests/it/kubernetes.rs).

use std::collections::BTreeMap;

use super::*;

fn cluster(selector: bool) -> KubernetesCluster {
    KubernetesCluster {
        name: "k8s".into(),
        kubeconfig: None,
        context: None,
        namespace: "bench".into(),
        node_selector: if selector {
            BTreeMap::from([("pool".to_string(), "h100".to_string())])
        } else {
            BTreeMap::new()
        },
        tolerations: Vec::new(),
        gpu_resource: "nvidia.com/gpu".into(),
        resources: BTreeMap::new(),
        service_account: None,
        image_pull_secrets: Vec::new(),
        host_network: false,
        image_pull_policy: "IfNotPresent".into(),
        places: BTreeMap::from([
            ("namespace".to_string(), "hosts.yaml:5:18".to_string()),
            ("node_selector".to_string(), "hosts.yaml:6:30".to_string()),
        ]),
    }
}

fn ask(pods: &[u64]) -> ClusterAsk {
    ClusterAsk {
        pod_gpus: pods.to_vec(),
    }
}

#[test]
fn pods_that_fit_have_no_problem() {
    assert!(gpu_problems(&cluster(true), &[8, 8], &ask(&[8, 4, 4])).is_empty());
}

#[test]
fn a_pod_larger_than_any_node_names_the_selector_line() {
    let p = gpu_problems(&cluster(true), &[4, 4], &ask(&[8]));
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(
        p[0].starts_with("  hosts.yaml:6:30: `clusters.k8s.kubernetes.node_selector`"),
        "{}",
        p[0]
    );
    assert!(p[0].contains("asks for 8 `nvidia.com/gpu`"), "{}", p[0]);
    assert!(
        p[0].contains("most any of the 2 schedulable node(s) matching"),
        "{}",
        p[0]
    );
    assert!(p[0].contains("has allocatable is 4"), "{}", p[0]);
}

#[test]
fn pods_that_fit_one_by_one_but_not_together() {
    let p = gpu_problems(&cluster(false), &[8], &ask(&[8, 8]));
    assert_eq!(p.len(), 1, "{p:?}");
    // No selector: the key is gpu_resource, placed at the namespace's line as a fallback.
    assert!(
        p[0].starts_with("  hosts.yaml:5:18: `clusters.k8s.kubernetes.gpu_resource`"),
        "{}",
        p[0]
    );
    assert!(
        p[0].contains("ask for 16 `nvidia.com/gpu` together but the 1 schedulable node(s) have 8"),
        "{}",
        p[0]
    );
}

#[test]
fn no_nodes_at_all() {
    let p = gpu_problems(&cluster(false), &[], &ask(&[1]));
    assert!(
        p[0].contains("0 schedulable node(s) has allocatable is 0")
            || p[0].contains("the most any of the 0 schedulable node(s)"),
        "{}",
        p[0]
    );
}
