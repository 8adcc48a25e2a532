//! Seed 000 on Kubernetes (issue #28): `plan` of tasks/moai-r1-pd-k8s.yaml with
//! tasks/hosts/moai-k8s.yaml prints the pod of every process in the seed's shape (checked pod
//! by pod: GPUs, HCA, toleration, model volume, memory-backed /dev/shm, labels, the decode
//! ranks kept on their node's node), and the seed's mock twin (tasks/moai-r1-pd-mock.yaml: 2
//! prefill, 3 decode instances of 2 ranks each, the real vllm-router) runs end to end with
//! every role a pod of the local test cluster.

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

use super::pd::{print_timings, python_volumes, timed_run};
use super::{cluster, hosts_file};
use crate::common::{bin, json, latest, repo};
use crate::topology::{Checked, assert_topology_run, routers_venv};

/// The pods `orchestrate plan` prints, in order: (role, pod).
fn planned_pods(text: &str) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let mut role = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if let Some(rest) = line.strip_prefix("  role ") {
            role = rest
                .split([' ', ':'])
                .next()
                .unwrap_or_default()
                .to_string();
        }
        if !line.trim_start().starts_with("pod of instance") {
            continue;
        }
        let mut yaml = String::new();
        while let Some(next) = lines.peek() {
            let Some(body) = next.strip_prefix("      ") else {
                break;
            };
            yaml.push_str(body);
            yaml.push('\n');
            lines.next();
        }
        let pod: Value = serde_saphyr::from_str(&yaml).unwrap_or_else(|e| panic!("{e}: {yaml}"));
        out.push((role.clone(), pod));
    }
    out
}

/// `orchestrate plan` of seed 000's Kubernetes task (its ShareGPT file made here).
fn plan_text() -> String {
    const SHAREGPT: &str = "/data/datasets/ShareGPT_V3_unfiltered_cleaned_split.json";
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("sharegpt.json");
    std::fs::write(
        &data,
        r#"[{"id": "a", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]}]"#,
    )
    .unwrap();
    let text = std::fs::read_to_string(repo().join("tasks/moai-r1-pd-k8s.yaml")).unwrap();
    let task = dir.path().join("moai-r1-pd-k8s.yaml");
    std::fs::write(&task, text.replace(SHAREGPT, &data.display().to_string())).unwrap();
    let out = Command::new(bin())
        .args(["plan", "--hosts"])
        .arg(repo().join("tasks/hosts/moai-k8s.yaml"))
        .arg(&task)
        .env("NO_COLOR", "1")
        .env_remove("ORCHESTRATE_HOSTS")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A pod's one container.
fn container(pod: &Value) -> &Value {
    &pod["spec"]["containers"][0]
}

/// The seed's volumes on a GPU pod: the model as a hostPath, /dev/shm in memory (16Gi).
fn assert_seed_volumes(pod: &Value) {
    let volumes = pod["spec"]["volumes"].as_array().unwrap();
    let model = volumes
        .iter()
        .find(|v| v["hostPath"]["path"] == "/path/to/deepseek-r1")
        .unwrap_or_else(|| panic!("{pod:#}"));
    let shm = volumes
        .iter()
        .find(|v| v["emptyDir"]["medium"] == "Memory")
        .unwrap_or_else(|| panic!("{pod:#}"));
    assert_eq!(shm["emptyDir"]["sizeLimit"], "16Gi", "{pod:#}");
    let mounts = container(pod)["volumeMounts"].as_array().unwrap();
    let mounted = |name: &Value| {
        mounts
            .iter()
            .find(|m| &m["name"] == name)
            .map(|m| m["mountPath"].clone())
    };
    assert_eq!(
        mounted(&model["name"]),
        Some(Value::from("/app/model/DeepSeek-R1"))
    );
    assert_eq!(mounted(&shm["name"]), Some(Value::from("/dev/shm")));
}

#[test]
fn plan_prints_every_pod_of_seed_000_in_its_kubernetes_shape() {
    let pods = planned_pods(&plan_text());
    let of = |role: &str| -> Vec<&Value> {
        pods.iter()
            .filter(|(r, _)| r == role)
            .map(|(_, p)| p)
            .collect()
    };
    let (prefill, decode, router) = (of("prefill"), of("decode"), of("router"));
    assert_eq!((prefill.len(), decode.len(), router.len()), (2, 24, 1));
    let image =
        "255250787067.dkr.ecr.ap-northeast-2.amazonaws.com/quickstart/moreh-vllm:vllm_251212";
    for (i, pod) in prefill.iter().chain(&decode).enumerate() {
        let is_decode = i >= 2;
        let c = container(pod);
        assert_eq!(c["image"], image);
        assert_eq!(c["imagePullPolicy"], "IfNotPresent");
        // The seed's requests, limits = requests: 8 GPUs a prefill pod, 1 a decode rank.
        let gpus = if is_decode { "1" } else { "8" };
        for kind in ["requests", "limits"] {
            assert_eq!(c["resources"][kind]["amd.com/gpu"], gpus, "{pod:#}");
            assert_eq!(c["resources"][kind]["mellanox/hca"], "1", "{pod:#}");
        }
        let t = &pod["spec"]["tolerations"][0];
        assert_eq!(
            (&t["key"], &t["operator"], &t["effect"]),
            (
                &Value::from("amd.com/gpu"),
                &Value::from("Exists"),
                &Value::from("NoSchedule")
            )
        );
        assert_seed_volumes(pod);
        assert_eq!(pod["metadata"]["namespace"], "mif");
        // The environment is in the pod's Secret; the side channel host is the pod's own IP
        // (status.podIP, as in the seed), in the spec where the kubelet expands it.
        let env = c["env"].to_string();
        assert!(env.contains("status.podIP"), "{env}");
        assert!(
            env.contains(r#"{"name":"VLLM_NIXL_SIDE_CHANNEL_HOST","value":"$(POD_IP)"}"#),
            "{env}"
        );
        assert!(!env.contains("VLLM_ROCM_USE_AITER"), "{env}");
        let labels = &pod["metadata"]["labels"];
        assert_eq!(labels["orchestrate/node"], "0");
        if is_decode {
            let (replica, rank) = ((i - 2) / 8, (i - 2) % 8);
            assert_eq!(labels["orchestrate/role"], "decode");
            assert_eq!(labels["orchestrate/replica"], replica.to_string());
            assert_eq!(labels["orchestrate/proc"], rank.to_string());
            let term = &pod["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                [0];
            assert_eq!(term["topologyKey"], "kubernetes.io/hostname", "{pod:#}");
            let sel = &term["labelSelector"]["matchLabels"];
            assert_eq!(sel["orchestrate/replica"], replica.to_string());
            assert_eq!(sel["orchestrate/role"], "decode");
            // Rank 0's pod is its own address; the others name it, replaced by its IP
            // once it runs.
            let leader = if rank == 0 {
                "$(POD_IP)".to_string()
            } else {
                format!("<k8s:decode-{}>", replica * 8)
            };
            let command = c["command"].to_string();
            assert!(
                command.contains(&format!(
                    "--data-parallel-size 8 --data-parallel-rank {rank} --data-parallel-address {leader}"
                )),
                "{command}"
            );
        } else {
            assert_eq!(labels["orchestrate/role"], "prefill");
            assert!(pod["spec"]["affinity"].is_null(), "{pod:#}");
            assert!(labels.get("orchestrate/proc").is_none());
        }
    }
    // The router: no GPU, on :80, every decode rank a worker of its own.
    let r = container(router[0]);
    assert!(
        r["resources"]["requests"].get("amd.com/gpu").is_none(),
        "{r:#}"
    );
    let command = r["command"].to_string();
    assert_eq!(
        command.matches("--decode http://<k8s:decode-").count(),
        24,
        "{command}"
    );
    assert_eq!(command.matches("--prefill http://<k8s:prefill-").count(), 2);
    assert_eq!(r["ports"][0]["containerPort"], 80);
}

/// The mock twin of seed 000 with every role a pod of cluster `k8s`: the mock image, the
/// router's Python and venv mounted from the host, the tokenizer by absolute path.
fn twin_task(dir: &Path, venv: &Path) -> std::path::PathBuf {
    let text = std::fs::read_to_string(repo().join("tasks/moai-r1-pd-mock.yaml")).unwrap();
    let text = text
        .replace("{{ orchestrate }}", "orchestrate")
        .replace(
            "../data/tokenizer/tokenizer.json",
            &repo()
                .join("data/tokenizer/tokenizer.json")
                .display()
                .to_string(),
        )
        .replace("    port: auto\n", "    port: auto\n    hosts: [k8s]\n")
        .replacen(
            "backend: vllm\n",
            &format!("backend: vllm\nimage: {}\n", crate::docker::mock_image()),
            1,
        )
        .replacen(
            "  router:",
            &format!(
                "  router:\n    volumes: [{}]\n    env: {{ORCHESTRATE_ROUTERS_VENV: {}}}\n ",
                python_volumes(venv).join(", "),
                venv.display()
            ),
            1,
        );
    assert_eq!(text.matches("hosts: [k8s]").count(), 3, "{text}");
    let task = dir.join("moai-r1-pd-mock.yaml");
    std::fs::write(&task, text).unwrap();
    task
}

#[test]
fn kubernetes_seed_000_twin_runs_with_every_rank_a_pod() {
    let Some(venv) = routers_venv() else { return };
    let Some((c, _turn)) = cluster() else { return };
    let name = "moai-r1-pd-mock";
    let work = tempfile::tempdir().unwrap();
    let task = twin_task(work.path(), &venv);
    let hosts = hosts_file(c, work.path(), "");
    let results = work.path().join("results");
    let (out, observed_ready, exited) =
        timed_run(&task, &hosts, &results, &work.path().join("state"), name);
    let router = Checked {
        role: "router",
        via: "router",
        prefill: 2,
        decode: 6,
    };
    // 3 points of 12 prompts.
    assert_topology_run(work.path(), name, &out, 12, &router);
    let run_dir = latest(&results, name);
    let m = json(&run_dir.join("manifest.json"));
    let d = &m["deployments"][0]["instances"];
    // Each decode rank was a pod of its own, with its own IP in the router's command.
    let command = d["router-0"]["argv"].to_string();
    for i in 0..6 {
        let ip = d[format!("decode-{i}")]["pod"]["ip"].as_str().unwrap();
        assert!(
            command.contains(&format!("http://{ip}:")),
            "decode-{i}: {command}"
        );
        assert_eq!(d[format!("decode-{i}")]["proc_rank"], i % 2, "{d:#}");
    }
    c.assert_clean(name, "teardown left objects");
    let keys: Vec<String> = (0..2)
        .map(|i| format!("prefill-{i}"))
        .chain((0..6).map(|i| format!("decode-{i}")))
        .chain(["router-0".to_string()])
        .collect();
    print_timings(
        &m,
        &keys,
        observed_ready.expect("the test saw the deployment ready"),
        exited,
    );
}
