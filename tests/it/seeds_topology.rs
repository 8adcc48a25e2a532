//! The seeds as task files: `orchestrate plan` of tasks/moai-r1-pd-mi300x.yaml (seed 000) and
//! tasks/dynamo-vs-vllm-h20.yaml (seed 001) with their hosts examples renders the seeds' launch
//! flags and env exactly, per process (hosts, node ranks, master addresses, the router's worker
//! list, the load); and each mock twin (tasks/moai-r1-pd-mock.yaml,
//! tasks/dynamo-vs-vllm-mock.yaml) runs end to end through `orchestrate run` with the real
//! vllm-router from the routers venv: the topology check passed and every point completed.

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::common::{bin, json, latest, repo};
use crate::routers::venv;

/// The resolved plan of `task` (relative to the repository) with `hosts`, as JSON.
fn plan(task: &str, hosts: &str) -> Value {
    let out = Command::new(bin())
        .args(["plan", "--format", "json", "--hosts", hosts, task])
        .current_dir(repo())
        .env("NO_COLOR", "1")
        .env_remove("ORCHESTRATE_HOSTS")
        .stdin(Stdio::null())
        .output()
        .expect("orchestrate runs");
    assert!(
        out.status.success(),
        "plan {task}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plans: Value = serde_json::from_slice(&out.stdout).unwrap();
    plans[0].clone()
}

/// Seed 000 reads ShareGPT from the cluster's `/data`, and `plan` checks that the file is
/// there: plan a copy of the task whose dataset names a small ShareGPT file made here.
fn plan_seed_000() -> Value {
    const SHAREGPT: &str = "/data/datasets/ShareGPT_V3_unfiltered_cleaned_split.json";
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("sharegpt.json");
    std::fs::write(
        &data,
        r#"[{"id": "a", "conversations": [{"from": "human", "value": "hello there"}, {"from": "gpt", "value": "hi"}]}]"#,
    )
    .unwrap();
    let text = std::fs::read_to_string(repo().join("tasks/moai-r1-pd-mi300x.yaml")).unwrap();
    assert!(text.contains(SHAREGPT), "seed 000 reads {SHAREGPT}");
    let task = dir.path().join("moai-r1-pd-mi300x.yaml");
    std::fs::write(&task, text.replace(SHAREGPT, &data.display().to_string())).unwrap();
    let hosts = repo().join("tasks/hosts/moai-mi300x.yaml");
    plan(task.to_str().unwrap(), hosts.to_str().unwrap())
}

/// The role `name` of deployment `d`.
fn role<'a>(d: &'a Value, name: &str) -> &'a Value {
    d["roles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no role {name} in {d:#}"))
}

/// Every instance of a role.
fn instances(role: &Value) -> &Vec<Value> {
    role["instances"].as_array().unwrap()
}

/// An instance's host name and address.
fn host(i: &Value) -> (&str, &str) {
    let h = &i["host"]["remote"];
    (h["name"].as_str().unwrap(), h["address"].as_str().unwrap())
}

/// An instance's rendered commands.
fn commands(i: &Value) -> Vec<&str> {
    i["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect()
}

/// An instance's env, `NAME=value` in order.
fn env(i: &Value) -> Vec<String> {
    i["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            format!(
                "{}={}",
                e["name"].as_str().unwrap(),
                e["value"].as_str().unwrap()
            )
        })
        .collect()
}

/// Seed 000's common env (`_common.extraEnvVars`), with the pod IP replaced by the host's.
fn moai_common_env(ip: &str) -> Vec<String> {
    [
        "UCX_IB_PCI_RELAXED_ORDERING=on",
        "UCX_TLS=rocm_copy,rocm_ipc,self,sm,rc_x",
        "NCCL_IB_PCI_RELAXED_ORDERING=1",
        "NCCL_NET_GDR_LEVEL=3",
        "NCCL_MIN_NCHANNELS=112",
        "VLLM_RANDOMIZE_DP_DUMMY_INPUTS=1",
        "VLLM_ROCM_USE_AITER=1",
        "VLLM_ROCM_USE_AITER_FP8BMM=0",
        "VLLM_ALL2ALL_BACKEND=mori",
        "VLLM_HTTP_TIMEOUT_KEEP_ALIVE=1000000000",
        "VLLM_NIXL_ABORT_REQUEST_TIMEOUT=1000000000",
        &format!("VLLM_NIXL_SIDE_CHANNEL_HOST={ip}"),
        "VLLM_LOG_STATS_INTERVAL=10",
        "VLLM_SERVERSIDE_LOGGING=1",
        "VLLM_SERVERSIDE_LOG_INTERVAL=10",
        "GLOO_SOCKET_IFNAME=",
        "NCCL_SOCKET_IFNAME=",
        "TP_SOCKET_IFNAME=",
    ]
    .iter()
    .map(ToString::to_string)
    .collect()
}

/// A role's own env of seed 000 (`extraEnvVars` of prefill or decode).
fn moai_role_env(chunk: u32, out_chunk: u32, combine_warp: u32, kind: &str) -> Vec<String> {
    vec![
        format!("VLLM_MOE_DP_CHUNK_SIZE={chunk}"),
        format!("VLLM_V1_OUTPUT_PROC_CHUNK_SIZE={out_chunk}"),
        "VLLM_MORI_DISPATCH_BLK_NO=128".into(),
        "VLLM_MORI_DISPATCH_WARP_PER_BLK=16".into(),
        "VLLM_MORI_COMBINE_BLK_NO=64".into(),
        format!("VLLM_MORI_COMBINE_WARP_PER_BLK={combine_warp}"),
        format!("VLLM_IS_DECODE_WORKER={kind}"),
    ]
}

/// dstack's env of a single-node replica on `ip`.
fn dstack_env(task: &str, gpus: u32, nodes: &[&str], rank: usize) -> Vec<String> {
    vec![
        format!("DSTACK_RUN_NAME={task}"),
        format!(
            "DSTACK_GPUS_NUM={}",
            gpus * u32::try_from(nodes.len()).unwrap()
        ),
        format!("DSTACK_GPUS_PER_NODE={gpus}"),
        format!("DSTACK_NODES_NUM={}", nodes.len()),
        format!("DSTACK_NODE_RANK={rank}"),
        format!("DSTACK_MASTER_NODE_IP={}", nodes[0]),
        format!("DSTACK_NODES_IPS={}", nodes.join("\n")),
    ]
}

const NIXL: &str = r#"--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'"#;

/// Seed 000's decode role: the seed's extraArgs run as 8 one-GPU data-parallel ranks per node
/// (parallelism.data: 8), each its own server on port 8000 + rank, pinned to its GPU. The
/// decode hosts, in order.
fn seed_000_decode_runs_8_ranks_per_node(d: &Value) -> [(&'static str, &'static str); 3] {
    let decode_cmd = |ip: &str, rank: usize| {
        format!(
            "vllm serve /app/model/DeepSeek-R1 --port {port} --data-parallel-size 8 \
             --data-parallel-rank {rank} --data-parallel-address {ip} \
             --data-parallel-rpc-port 13345 \
             --served-model-name deepseek-ai/DeepSeek-R1 --trust-remote-code \
             --no-enable-prefix-caching --no-enable-chunked-prefill --enforce-eager \
             --tensor-parallel-size 1 --enable-expert-parallel --max-model-len 8192 \
             --max-num-seqs 2048 --kv-cache-dtype fp8_e4m3 --quantization ds_fp8_per_token \
             --block-size 16 {NIXL} --disable-uvicorn-access-log --no-enable-log-requests \
             --disable-log-stats --max-num-batched-token 16384 --gpu-memory-utilization 0.92",
            port = 8000 + rank
        )
    };
    let decode = role(d, "decode");
    let hosts = [
        ("mi300x-2", "10.20.0.12"),
        ("mi300x-3", "10.20.0.13"),
        ("mi300x-4", "10.20.0.14"),
    ];
    assert_eq!(instances(decode).len(), 24);
    for (n, i) in instances(decode).iter().enumerate() {
        let ((name, ip), rank) = (hosts[n / 8], n % 8);
        assert_eq!(host(i), (name, ip));
        assert_eq!(
            (i["replica"].as_u64(), i["proc_rank"].as_u64()),
            (Some((n / 8) as u64), Some(rank as u64))
        );
        assert_eq!(i["port"], 8000 + rank);
        assert_eq!(
            i["gpu_ids"],
            serde_json::json!([rank.to_string()]),
            "{name} rank {rank}"
        );
        assert_eq!(i["resources"]["gpu"]["count"], 1);
        assert_eq!(i["probe"], "role");
        assert_eq!(commands(i), [decode_cmd(ip, rank).as_str()]);
        let mut want = moai_common_env(ip);
        want.extend(moai_role_env(512, 512, 8, "decode"));
        want.extend(dstack_env("moai-r1-pd-mi300x", 8, &[ip], 0));
        assert_eq!(env(i), want, "{name}");
    }

    hosts
}

#[test]
fn plan_renders_seed_000_exactly() {
    let p = plan_seed_000();
    assert_eq!(p["backend"], "vllm");
    assert_eq!(p["model"], "deepseek-ai/DeepSeek-R1");
    assert_eq!(p["client"]["host"]["remote"]["name"], "client-0");
    let d = &p["deployments"][0];
    let names: Vec<&str> = d["roles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["prefill", "decode", "router"]);
    assert_eq!(d["entry_role"], "router");

    // The seed's prefill command, verbatim, on each of the two prefill hosts.
    let prefill_cmd = format!(
        "vllm serve \"/app/model/DeepSeek-R1\" --served-model-name deepseek-ai/DeepSeek-R1 \
         --port 8000 --trust-remote-code --tensor-parallel-size 1 --data-parallel-size 8 \
         --enable-expert-parallel --no-enable-prefix-caching --no-enable-chunked-prefill \
         --enforce-eager --max-model-len 8192 --max-num-seqs 2048 --kv-cache-dtype fp8_e4m3 \
         --quantization ds_fp8_per_token --block-size 16 {NIXL} --disable-uvicorn-access-log \
         --no-enable-log-requests --disable-log-stats --max-num-batched-token 64000 \
         --gpu-memory-utilization 0.92"
    );
    let prefill = role(d, "prefill");
    let image =
        "255250787067.dkr.ecr.ap-northeast-2.amazonaws.com/quickstart/moreh-vllm:vllm_251212";
    assert_eq!(prefill["image"], image);
    let hosts = [("mi300x-0", "10.20.0.10"), ("mi300x-1", "10.20.0.11")];
    assert_eq!(instances(prefill).len(), 2);
    for (i, (name, ip)) in instances(prefill).iter().zip(hosts) {
        assert_eq!(host(i), (name, ip));
        assert_eq!(i["port"], 8000);
        assert_eq!(commands(i), [prefill_cmd.as_str()]);
        let mut want = moai_common_env(ip);
        want.extend(moai_role_env(4096, 128, 4, "prefill"));
        want.extend(dstack_env("moai-r1-pd-mi300x", 8, &[ip], 0));
        assert_eq!(env(i), want, "{name}");
    }

    let hosts = seed_000_decode_runs_8_ranks_per_node(d);

    // vllm-router in place of Istio + Heimdall: every prefill and decode leader, no GPUs.
    let router = role(d, "router");
    let r = &instances(router)[0];
    assert_eq!(host(r), ("mi300x-0", "10.20.0.10"));
    assert_eq!(r["port"], 80);
    // Every decode rank is a worker of its own, as every decode pod was the gateway's.
    let decodes: String = hosts
        .iter()
        .flat_map(|(_, ip)| {
            (0..8).map(move |rank| format!(" --decode http://{ip}:{}", 8000 + rank))
        })
        .collect();
    let router_cmd = format!(
        "exec vllm-router --vllm-pd-disaggregation --kv-connector nixl \
         --prefill http://10.20.0.10:8000 --prefill http://10.20.0.11:8000{decodes} \
         --host 0.0.0.0 --port 80 --prometheus-port 29100 --request-timeout-secs 3600"
    );
    assert_eq!(
        commands(r),
        [
            "pip install --quiet vllm-router==0.1.17",
            router_cmd.as_str(),
        ]
    );
    assert!(
        env(r).contains(&"DSTACK_GPUS_NUM=0".to_string()),
        "{:?}",
        env(r)
    );

    // The seed's load: 32,400 prompts at concurrency 10,800, exact lengths, its rates,
    // warm-ups and cool-downs.
    let want = [
        (512, 140.0, "2m", "1m10s"),
        (1000, 80.0, "2m20s", "1m50s"),
        (2000, 48.0, "4m10s", "4m50s"),
    ];
    let points = d["points"].as_array().unwrap();
    assert_eq!(points.len(), want.len());
    for (pt, (len, rps, warmup, cooldown)) in points.iter().zip(want) {
        let load = &pt["load"];
        let ds = &load["dataset"]["share_gpt"];
        assert_eq!(
            (ds["input_len"].as_u64(), ds["output_len"].as_u64()),
            (Some(len), Some(len)),
            "{pt:#}"
        );
        assert_eq!(load["ignore_eos"], true);
        let shape = &load["shape"];
        assert_eq!(shape["max_concurrency"], 10800);
        assert_eq!(shape["limit"]["requests"], 32400);
        assert_eq!(shape["rate"]["poisson"]["rps"].as_f64(), Some(rps));
        assert_eq!(shape["warmup"], warmup);
        assert_eq!(shape["cooldown"], cooldown);
    }
}

/// The head's Ray start and wait for `nnodes` Ray nodes, then `serve`; a worker's join.
fn ray_head(ip: &str, serve: &str) -> String {
    format!(
        "ray start --head --port=6379 --node-ip-address={ip} && until [ \"$(python3 -c 'import \
         ray; ray.init(address=\"auto\"); print(sum(n[\"Alive\"] for n in ray.nodes()))')\" = \
         \"2\" ]; do sleep 5; done && {serve}"
    )
}

/// The Dynamo decode head: the graph without the PrefillWorker link, Ray, then `serve`.
fn decode_head(ip: &str, serve: &str) -> String {
    format!(
        "cat > /workspace/examples/llm/graphs/disagg_no_prefill.py <<'PY'\n\
         from components.frontend import Frontend\n\
         from components.processor import Processor\n\
         from components.worker import VllmWorker\n\
         Frontend.link(Processor).link(VllmWorker)\n\
         PY\n\
         ray start --head --port=6379 --node-ip-address={ip}\n\
         until [ \"$(python3 -c 'import ray; ray.init(address=\"auto\"); \
         print(sum(n[\"Alive\"] for n in ray.nodes()))')\" = \"2\" ]; do sleep 5; done\n\
         {serve}"
    )
}

/// The vLLM TP16 head: Ray, then `serve` at once (orchestrate counts the Ray nodes).
fn vllm_ray_head(ip: &str, serve: &str) -> String {
    format!("ray start --head --port=6379 --node-ip-address={ip} && {serve}")
}

/// The vLLM TP16 worker: started after the head (`master-first`), so no retry loop.
fn vllm_ray_worker(head: &str, ip: &str) -> String {
    format!("exec ray start --block --address={head}:6379 --node-ip-address={ip}")
}

fn ray_worker(head: &str, ip: &str) -> String {
    format!(
        "until ray start --block --address={head}:6379 --node-ip-address={ip}; do sleep 5; done"
    )
}

const CUDAGRAPH: &str = r#"'{"cudagraph_capture_sizes": [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128, 136, 144, 152, 160, 168, 176, 184, 192, 200, 208, 216, 224, 232, 240, 248, 256]}'"#;

/// vLLM TP16 over h20-0 + h20-1: the seed's command on the Ray head, started master-first,
/// and the run waits for 2 Ray nodes on the head's GCS port before `/health`.
fn vllm_tp16_is_a_master_first_ray_gang(vllm_d: &Value) {
    let server = role(vllm_d, "server");
    assert_eq!(server["image"], "vllm-openai:v0.9.0.1-pyarrow");
    let serve = format!(
        "exec vllm serve /data/models/deepseek-ai/DeepSeek-R1 --served-model-name \
         deepseek-ai/DeepSeek-R1 --port 8000 --block-size 128 --max-model-len 4096 \
         --max-num-batched-tokens 4096 --no-enable-prefix-caching --enable-chunked-prefill \
         --compilation-config {CUDAGRAPH} -tp 16 --disable-log-requests --enable-reasoning \
         --reasoning-parser deepseek_r1"
    );
    let is = instances(server);
    assert_eq!(is.len(), 2);
    assert_eq!(host(&is[0]), ("h20-0", "10.30.0.10"));
    assert_eq!(commands(&is[0]), [vllm_ray_head("10.30.0.10", &serve)]);
    assert_eq!(host(&is[1]), ("h20-1", "10.30.0.11"));
    assert_eq!(
        commands(&is[1]),
        [vllm_ray_worker("10.30.0.10", "10.30.0.11")]
    );
    // The head starts first, and the run waits for 2 Ray nodes on its GCS port before /health.
    assert_eq!(server["startup_order"], "master-first");
    assert_eq!(
        server["readiness"]["ray"],
        serde_json::json!({"port": 6379, "nodes": 2, "command": "ray"})
    );
    assert_eq!(server["readiness"]["http"]["path"], "/health");
}

#[test]
fn plan_renders_seed_001_exactly() {
    let p = plan("tasks/dynamo-vs-vllm-h20.yaml", "tasks/hosts/h20.yaml");
    let deployments = p["deployments"].as_array().unwrap();
    assert_eq!(deployments.len(), 2);
    let (dyn_d, vllm_d) = (&deployments[0], &deployments[1]);
    assert_eq!(dyn_d["name"], "dynamo-1p1d");
    assert_eq!(dyn_d["backend"], "dynamo");
    assert_eq!(vllm_d["name"], "vllm-tp16");
    assert_eq!(vllm_d["backend"], "vllm");

    // Infra roles first, without GPUs, on h20-0.
    for (name, cmd) in [
        ("etcd", "exec etcd --listen-client-urls http://0.0.0.0:2379"),
        ("nats", "exec nats-server -js --trace -m 8222"),
    ] {
        let r = role(dyn_d, name);
        let i = &instances(r)[0];
        assert_eq!(host(i), ("h20-0", "10.30.0.10"));
        assert_eq!(commands(i), [cmd]);
        assert!(env(i).contains(&"DSTACK_GPUS_NUM=0".to_string()), "{name}");
    }
    let order: Vec<&str> = dyn_d["roles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(order, ["etcd", "nats", "prefill", "decode"]);
    assert_eq!(dyn_d["entry_role"], "decode");

    // Each TP16 worker is a 2-node Ray gang: node 0 heads and serves, node 1 joins.
    let infra = [
        "NATS_SERVER=nats://10.30.0.10:4222".to_string(),
        "ETCD_ENDPOINTS=10.30.0.10:2379".to_string(),
    ];
    let cases = [
        (
            "prefill",
            [("h20-2", "10.30.0.12"), ("h20-3", "10.30.0.13")],
            "cd /workspace/examples/llm && exec dynamo serve \
             components.prefill_worker:PrefillWorker -f /tmp/r1-1p1d.yaml",
        ),
        (
            "decode",
            [("h20-0", "10.30.0.10"), ("h20-1", "10.30.0.11")],
            "cd /workspace/examples/llm && exec dynamo serve graphs.disagg_no_prefill:Frontend \
             -f /tmp/r1-1p1d.yaml",
        ),
    ];
    for (name, hosts, serve) in cases {
        let r = role(dyn_d, name);
        let is = instances(r);
        assert_eq!(is.len(), 2, "{name}");
        let ips = [hosts[0].1, hosts[1].1];
        for (rank, (i, (h, ip))) in is.iter().zip(hosts).enumerate() {
            assert_eq!(host(i), (h, ip), "{name} {rank}");
            assert_eq!(i["node_rank"], rank);
            assert_eq!(i["probe"], if rank == 0 { "role" } else { "alive" });
            let cmds = commands(i);
            // The seed's Dynamo config, verbatim.
            assert!(
                cmds[0].starts_with("cat > /tmp/r1-1p1d.yaml <<'CONFIG'\nCommon:\n")
                    && cmds[0].contains(
                        "kv-transfer-config: '{\"kv_connector\":\"DynamoNixlConnector\"}'"
                    )
                    && cmds[0].contains(&format!("compilation-config: {CUDAGRAPH}"))
                    && cmds[0].contains("remote-prefill: true\n  conditional-disagg: false")
                    && cmds[0].contains("endpoint: dynamo.Processor.chat/completions"),
                "{}",
                cmds[0]
            );
            let last = cmds.last().unwrap();
            if rank == 0 && name == "prefill" {
                assert_eq!(*last, ray_head(ip, serve));
            } else if rank == 0 {
                // The decode head first writes the graph without `.link(PrefillWorker)`.
                assert_eq!(*last, decode_head(ip, serve));
            } else {
                assert_eq!(*last, ray_worker(ips[0], ip));
            }
            let mut want = vec![format!("VLLM_HOST_IP={ip}")];
            want.extend(infra.iter().cloned());
            want.extend(dstack_env("dynamo-vs-vllm-h20", 8, &ips, rank));
            assert_eq!(env(i), want, "{name} {rank}");
        }
    }

    vllm_tp16_is_a_master_first_ray_gang(vllm_d);

    // The sweep: ISL:OSL 3000:150, 1000:1000, 500:1000 x concurrency 1..128, per deployment.
    let mut want = Vec::new();
    for (isl, osl) in [(3000, 150), (1000, 1000), (500, 1000)] {
        for c in [1, 2, 4, 8, 16, 32, 64, 128] {
            want.push((isl, osl, c));
        }
    }
    for d in deployments {
        let got: Vec<(u64, u64, u64)> = d["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|pt| {
                let l = &pt["load"];
                let ds = &l["dataset"]["random"];
                assert_eq!(l["endpoint"], "chat");
                assert_eq!(l["ignore_eos"], true);
                (
                    ds["input_len"].as_u64().unwrap(),
                    ds["output_len"].as_u64().unwrap(),
                    l["shape"]["max_concurrency"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(got, want, "{}", d["name"]);
    }
}

/// `orchestrate run` of a shipped mock twin with its own state dir and results; the manifest.
fn run_twin(task: &str) -> Option<(tempfile::TempDir, Value)> {
    venv::routers()?;
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(bin())
        .args(["run", "--no-report", "--results"])
        .arg(dir.path().join("results"))
        .arg(repo().join(task))
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .env("ORCHESTRATE_ROUTERS_VENV", venv::dir())
        .env("ORCHESTRATE_STATE_DIR", dir.path().join("state"))
        .env_remove("ORCHESTRATE_HOSTS")
        .env_remove("ORCHESTRATE_RESULTS")
        .stdin(Stdio::null())
        .output()
        .expect("orchestrate runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "run {task}: {stderr}");
    let name = Path::new(task).file_stem().unwrap().to_str().unwrap();
    let run = latest(&dir.path().join("results"), name);
    let manifest = json(&run.join("manifest.json"));
    assert_eq!(manifest["status"], "completed", "{manifest:#}");
    let points = manifest["points"].as_array().unwrap();
    assert!(!points.is_empty());
    for p in points {
        assert_eq!(p["status"], "completed", "{p:#}");
        assert_eq!(p["validity"]["valid"], true, "{p:#}");
        let s = json(
            &run.join("points")
                .join(p["id"].as_str().unwrap())
                .join("summary.json"),
        );
        assert_eq!(s["failed"], 0, "{s:#}");
        assert!(s["completed"].as_u64().unwrap() > 0, "{s:#}");
    }
    Some((dir, manifest))
}

/// The topology check recorded on `router` of deployment `d`: it passed with the counts.
fn assert_topology(d: &Value, router: &str, prefill: u64, decode: u64) {
    let t = &d["instances"][format!("{router}-0")]["topology"][0];
    assert_eq!(t["role"], router, "{:#}", d["instances"]);
    assert_eq!(t["via"], "router");
    assert_eq!(t["expected"]["prefill"], prefill, "{t}");
    assert_eq!(t["expected"]["decode"], decode, "{t}");
    assert_eq!(t["reported"]["prefill"], prefill, "{t}");
    assert_eq!(t["reported"]["decode"], decode, "{t}");
}

#[test]
fn the_seed_000_mock_twin_runs_through_the_real_vllm_router() {
    let Some((_dir, m)) = run_twin("tasks/moai-r1-pd-mock.yaml") else {
        return;
    };
    assert_eq!(m["points"].as_array().unwrap().len(), 3);
    // 3 decode instances of 2 ranks each: the router lists every rank.
    assert_topology(&m["deployments"][0], "router", 2, 6);
    let d = &m["deployments"][0]["instances"];
    for index in 0..6 {
        assert!(
            d[format!("decode-{index}")]["ready_after_s"].is_number(),
            "decode-{index} was probed ready: {d:#}"
        );
    }
}

#[test]
fn the_seed_001_mock_twin_runs_both_deployments() {
    let Some((_dir, m)) = run_twin("tasks/dynamo-vs-vllm-mock.yaml") else {
        return;
    };
    let ds = m["deployments"].as_array().unwrap();
    assert_eq!(ds.len(), 2, "{ds:#?}");
    // One worker per 2-node gang: the router lists the gang leaders.
    assert_topology(&ds[0], "frontend", 1, 1);
    assert_eq!(m["points"].as_array().unwrap().len(), 12);
}
