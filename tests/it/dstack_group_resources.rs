//! Each of dstack's node groups asks its own `resources` for its own nodes: dstack's Ray
//! cluster as groups (a `cpu: 2` head, `gpu: H100:8` workers,
//! tests/fixtures/dstack-2026/groups/task-ray-groups.dstack.yml) is planned with each
//! worker on a host with eight H100s and the head on one without GPUs, each worker's
//! process asking for its GPUs (Docker, SSH pre-flight) and the head for none, and dstack's
//! `DSTACK_GPUS_PER_NODE` (the node's own) and `DSTACK_GPUS_NUM` (the gang's sum) per node;
//! a worker cannot land on a host without such GPUs.

use std::collections::BTreeMap;

use orchestrate::plan::{self, HostFacts, PlanContext};
use orchestrate::spec;

use crate::common;

/// dstack's Ray cluster as node groups, from its docs, with `extra` after `type: task` (and
/// without the `- HF_TOKEN` pass-through, which needs the variable set).
fn ray_groups(extra: &str) -> spec::Task {
    ray_groups_edited(extra, "")
}

/// [`ray_groups`] with the line `drop` removed too.
fn ray_groups_edited(extra: &str, drop: &str) -> spec::Task {
    let path = common::repo().join("tests/fixtures/dstack-2026/groups/task-ray-groups.dstack.yml");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.contains("cpu: 2") && text.contains("gpu: H100:8"),
        "{text}"
    );
    let text = text
        .replace("type: task\n", &format!("type: task\n{extra}"))
        .replace("  - HF_TOKEN\n", "")
        .replace(drop, "");
    let profile = common::repo().join("tasks/profiles/r1-online.yaml");
    spec::load_str_with(&path, text, Some(&profile)).unwrap()
}

/// A hosts file of a host without GPUs, hosts of eight H100s (`h100_hosts` of them) and one
/// of eight L4s.
fn hosts(h100_hosts: usize) -> BTreeMap<String, HostFacts> {
    let host = |address: &str, gpus: Option<(u32, &str)>| HostFacts {
        address: address.to_string(),
        gpus: gpus.map(|g| g.0),
        gpu_name: gpus.map(|g| g.1.to_string()),
    };
    let mut out = BTreeMap::from([
        ("cpu".to_string(), host("10.0.1.1", None)),
        ("l4".to_string(), host("10.0.1.9", Some((8, "L4")))),
    ]);
    for i in 1..=h100_hosts {
        out.insert(
            format!("h{i}"),
            host(&format!("10.0.1.1{i}"), Some((8, "H100"))),
        );
    }
    out
}

#[test]
fn each_group_node_is_placed_and_asks_for_its_own_groups_gpus() {
    let task = ray_groups("");
    let p = plan::build(&task, &PlanContext::new().with_hosts(hosts(2))).unwrap();
    let role = &p.deployments[0].roles[0];
    let placed: Vec<String> = role
        .instances
        .iter()
        .map(|i| match &i.host {
            plan::HostPlan::Remote { name, .. } => name.clone(),
            other => panic!("not a host of the hosts file: {other:?}"),
        })
        .collect();
    assert_eq!(
        placed,
        ["cpu", "h1", "h2"],
        "the head on the host without GPUs"
    );
    let gpus: Vec<u32> = role
        .instances
        .iter()
        .map(|i| role.resources_of(i).gpu.as_ref().map_or(0, |g| g.count))
        .collect();
    assert_eq!(gpus, [0, 8, 8]);
    for i in &role.instances[1..] {
        let gpu = role.resources_of(i).gpu.as_ref().unwrap();
        assert_eq!(gpu.names, ["H100"]);
    }
    for (i, per_node) in role.instances.iter().zip(["0", "8", "8"]) {
        let env = crate::spec::env_of(i);
        assert_eq!(
            env["DSTACK_GPUS_PER_NODE"], per_node,
            "node {}",
            i.node_rank
        );
        assert_eq!(env["DSTACK_GPUS_NUM"], "16", "node {}", i.node_rank);
    }
    // What each host must offer (SSH pre-flight): the workers' GPUs, none on the head's.
    let needs = plan::preflight::remote_host_needs(&p.deployments);
    let by_host: BTreeMap<&str, u32> = needs
        .iter()
        .map(|n| (n.host.as_str(), n.gpus.as_ref().map_or(0, |g| g.count)))
        .collect();
    assert_eq!(by_host, BTreeMap::from([("cpu", 0), ("h1", 8), ("h2", 8)]));
    // `plan` says which hosts were chosen for which node.
    let notes: Vec<&str> = p.dstack.iter().map(|n| n.text.as_str()).collect();
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("node 2: gpu H100:8: host h2")),
        "{notes:#?}"
    );
}

/// `plan` prints each worker's own GPUs on its instance line; the head has the role's
/// resources (its group's: no GPUs).
#[test]
fn plan_prints_each_group_nodes_own_resources() {
    let dir = tempfile::tempdir().unwrap();
    let hosts = dir.path().join("hosts.yaml");
    std::fs::write(
        &hosts,
        "hosts:\n  cpu: {address: 10.0.1.1}\n  h1: {address: 10.0.1.11, gpus: 8:H100}\n  h2: {address: 10.0.1.12, gpus: 8:H100}\n",
    )
    .unwrap();
    let out = std::process::Command::new(common::bin())
        .current_dir(common::repo())
        .args([
            "plan",
            "--profile",
            "tasks/profiles/r1-online.yaml",
            "--hosts",
        ])
        .arg(&hosts)
        .arg("tests/fixtures/dstack-2026/groups/task-ray-groups.dstack.yml")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let instances = common::lines_starting(&stdout, &["    instance "]);
    let lines: Vec<&str> = instances.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    assert!(
        lines[0].contains("on cpu (10.0.1.1)") && !lines[0].contains("own resources"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("  role server: docker image dstackai/base:0.15-base-ubuntu24.04, gpu"),
        "{stdout}"
    );
    for (line, host) in lines[1..].iter().zip(["h1", "h2"]) {
        assert!(
            line.contains(&format!("on {host} "))
                && line.contains("own resources: gpu 8 h100 (nvidia)"),
            "{stdout}"
        );
    }
}

#[test]
fn a_worker_cannot_land_on_a_host_without_its_groups_gpus() {
    // Named hosts: node 2 (the second worker) on the L4 host.
    let task = ray_groups("hosts: [cpu, h1, l4]\n");
    let err = plan::build(&task, &PlanContext::new().with_hosts(hosts(2)))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no host satisfies `gpu: H100:8`; the nearest is `l4`: L4 is not H100"),
        "{err}"
    );
    // The head's host needs no GPUs: named hosts in the groups' order plan.
    let task = ray_groups("hosts: [cpu, h1, h2]\n");
    plan::build(&task, &PlanContext::new().with_hosts(hosts(2))).unwrap();
    // Hosts chosen: one H100 host is too few for the two workers.
    let err = plan::build(&ray_groups(""), &PlanContext::new().with_hosts(hosts(1)))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("task-ray-groups.dstack.yml:26:")
            && err.contains("no host satisfies `gpu: H100:8`; the nearest is `l4`"),
        "{err}"
    );
}

/// On a Slurm cluster every step of a node gets the cluster's `gpus_per_node`: a group
/// asking another count is a plan-time error at its `gpu:` naming the cluster; a group
/// asking the cluster's count plans.
#[test]
fn a_groups_gpu_count_slurm_cannot_give_is_refused_at_the_group() {
    let on_slurm = |gpus_per_node: u32| {
        let mut cluster = crate::slurm::gpu_cluster();
        cluster.gpus_per_node = gpus_per_node;
        PlanContext::new().with_slurm([("gpu".to_string(), cluster)].into())
    };
    // Bare processes: `python:` (a container) has its own refusal on Slurm.
    let task = || ray_groups_edited("hosts: [gpu]\n", "python: 3.12\n");
    let err = plan::build(&task(), &on_slurm(4)).unwrap_err().to_string();
    assert!(
        err.contains("task-ray-groups.dstack.yml:26:")
            && err.contains("asks 8 GPU(s) through its group's `resources.gpu`")
            && err.contains("Slurm cluster `gpu`")
            && err.contains("`gpus_per_node` (4)"),
        "{err}"
    );
    let p = plan::build(&task(), &on_slurm(8)).unwrap();
    assert_eq!(p.deployments[0].roles[0].instances.len(), 3);
}
