//! Several processes per node (`procs`): data-parallel ranks as processes of their own, each
//! with its share of the node's GPUs, its own port and its rank variables. `plan` gives every
//! process its place, port, GPUs and rendered rank flags, and lists every rank among the
//! role's servers (what a router takes); a share that does not divide is an error at `procs`.
//! End to end on this machine: 2 decode instances of 2 ranks each behind the real
//! sglang-router (regular mode), the router reporting all 4 ranks before the load; each
//! process logs to `logs/<role>-r<replica>-n<node>-p<proc>.log` with its own
//! `CUDA_VISIBLE_DEVICES`. The Slurm (one step per process), SSH, Docker and Kubernetes
//! forms are in their providers' tests (`slurm.rs`, `ssh/`, `docker/`, `kubernetes/`).

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::common::{bin, json, latest};

const HOSTS: &str = "hosts:
  a: {address: 10.0.0.1, gpus: 8:H100}
  b: {address: 10.0.0.2, gpus: 8:H100}
";

/// A decode role of 4 ranks per node on hosts a and b, and a router listing every rank.
const PLANNED: &str = r#"name: dp
backend: vllm
model: m
roles:
  decode:
    hosts: [a, b]
    procs: 4
    port: 9000
    resources: {gpu: 8}
    commands:
      - "serve --port {{ port }} --dp {{ world_size }} --rank {{ rank }} --local {{ proc_rank }}/{{ procs }} --master {{ master_addr }} --gpus {{ gpus }} --nnodes {{ nnodes }}"
  router:
    port: 8000
    resources: {gpu: 0}
    depends_on: [decode]
    commands:
      - "route{% for u in roles.decode.servers %} {{ u }}{% endfor %} leaders{% for u in roles.decode.leaders %} {{ u }}{% endfor %} procs {{ roles.decode.procs }} nodes {{ roles.decode.nodes }}"
entry_role: router
benchmark:
  dataset: {kind: random, input_len: 8, output_len: 8}
  num_prompts: 4
"#;

/// `orchestrate plan --format json` of task text `yaml` with the hosts file: its output.
fn plan(dir: &Path, yaml: &str) -> std::process::Output {
    let task = dir.join("task.yaml");
    std::fs::write(&task, yaml).unwrap();
    let hosts = dir.join("hosts.yaml");
    std::fs::write(&hosts, HOSTS).unwrap();
    Command::new(bin())
        .args(["plan", "--format", "json", "--hosts"])
        .arg(&hosts)
        .arg(&task)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .expect("orchestrate runs")
}

/// What `plan` of task text `yaml` printed on stderr, failing.
fn plan_error(yaml: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let out = plan(dir.path(), yaml);
    assert!(!out.status.success());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn plan_gives_each_process_of_a_node_its_gpus_port_and_rank() {
    let dir = tempfile::tempdir().unwrap();
    let out = plan(dir.path(), PLANNED);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plans: Value = serde_json::from_slice(&out.stdout).unwrap();
    let d = &plans[0]["deployments"][0];
    let decode = &d["roles"][0];
    assert_eq!(decode["name"], "decode");
    let instances = decode["instances"].as_array().unwrap();
    assert_eq!(
        instances.len(),
        8,
        "2 replicas (one per host) x 4 processes"
    );
    for (n, i) in instances.iter().enumerate() {
        let (replica, proc) = (n / 4, n % 4);
        let ip = format!("10.0.0.{}", replica + 1);
        assert_eq!(i["index"], n);
        assert_eq!(i["replica"], replica);
        assert_eq!(i["node_rank"], 0);
        assert_eq!(i["proc_rank"], proc);
        assert_eq!(i["host"]["remote"]["address"], ip.as_str());
        assert_eq!(i["port"], 9000 + proc);
        assert_eq!(i["probe"], "role", "every rank serves");
        let first = 2 * proc;
        assert_eq!(
            i["gpu_ids"],
            serde_json::json!([first.to_string(), (first + 1).to_string()]),
            "process {proc} gets GPUs {first} and {}",
            first + 1
        );
        assert_eq!(i["resources"]["gpu"]["count"], 2);
        assert_eq!(
            i["commands"][0],
            format!(
                "serve --port {} --dp 4 --rank {proc} --local {proc}/4 --master {ip} --gpus 2 --nnodes 1",
                9000 + proc
            )
        );
    }
    let servers: String = (1..=2)
        .flat_map(|h| (0..4).map(move |p| format!(" http://10.0.0.{h}:{}", 9000 + p)))
        .collect();
    assert_eq!(
        d["roles"][1]["instances"][0]["commands"][0],
        format!("route{servers} leaders http://10.0.0.1:9000 http://10.0.0.2:9000 procs 4 nodes 1")
    );
}

#[test]
fn a_gpu_count_that_procs_does_not_divide_is_an_error_at_procs() {
    let stderr = plan_error(&PLANNED.replace("procs: 4", "procs: 3"));
    assert!(stderr.contains("task.yaml:7:12"), "{stderr}");
    assert!(
        stderr.contains("runs 3 processes per node, but its nodes have 8 GPU(s)"),
        "{stderr}"
    );
    assert!(stderr.contains("multiple of 3"), "{stderr}");
}

#[test]
fn fixed_ports_past_the_last_port_are_an_error_at_port() {
    let stderr = plan_error(&PLANNED.replace("port: 9000", "port: 65534"));
    assert!(stderr.contains("task.yaml:8:11"), "{stderr}");
    assert!(stderr.contains("past 65535"), "{stderr}");
}

/// 2 decode instances of 2 ranks (processes) each on this machine, each rank the mock server
/// on its own port, behind sglang-router in regular mode listing `roles.decode.servers`.
fn local_task(venv: &Path) -> String {
    format!(
        r#"name: dp-local
backend: vllm
model: dp-model
roles:
  decode:
    replicas: 2
    procs: 2
    port: auto
    resources: {{gpu: 4}}
    readiness: {{timeout: 30s}}
    commands:
      - echo "rank {{{{ rank }}}} of {{{{ world_size }}}} proc {{{{ proc_rank }}}}/{{{{ procs }}}} gpus $CUDA_VISIBLE_DEVICES"
      - exec {{{{ orchestrate }}}} mock-server --port {{{{ port }}}} --model {{{{ model }}}} --preset fixed --itl-ms 2 --seed {{{{ role_index }}}}
  router:
    port: auto
    resources: {{gpu: 0}}
    depends_on: [decode]
    readiness: {{timeout: 60s}}
    commands:
      - >-
        exec {python} -m sglang_router.launch_router --worker-urls
        {{%- for u in roles.decode.servers %}} {{{{ u }}}}{{% endfor %}}
        --policy round_robin --host 127.0.0.1 --port {{{{ port }}}} --prometheus-port {prom}
entry_role: router
benchmark:
  dataset: {{kind: random, input_len: 16, output_len: 4}}
  tokenizer: {tokenizer}
  ignore_eos: true
  num_prompts: 16
  concurrency: 4
"#,
        python = venv.join("bin/python").display(),
        tokenizer = crate::common::repo()
            .join("data/tokenizer/tokenizer.json")
            .display(),
        prom = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port(),
    )
}

#[test]
fn ranks_run_as_processes_of_their_own_behind_the_real_router() {
    let Some(venv) = crate::topology::routers_venv() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let task = dir.path().join("dp-local.yaml");
    std::fs::write(&task, local_task(&venv)).unwrap();
    let results = dir.path().join("results");
    let out = crate::common::run_command(&task, &results, &dir.path().join("state"))
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .output()
        .expect("orchestrate runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "run failed: {stderr}");
    let run = latest(&results, "dp-local");
    let m = json(&run.join("manifest.json"));
    assert_eq!(m["status"], "completed", "{m:#}");
    let d = &m["deployments"][0];
    // The router reported the 4 ranks, each its own worker, before the load.
    let t = &d["instances"]["router-0"]["topology"][0];
    assert_eq!(t["expected"]["decode"], 4, "{t}");
    assert_eq!(t["reported"]["decode"], 4, "{t}");
    let s = json(
        &run.join("points")
            .join(m["points"][0]["id"].as_str().unwrap())
            .join("summary.json"),
    );
    assert_eq!(
        (s["completed"].as_u64(), s["failed"].as_u64()),
        (Some(16), Some(0)),
        "{s:#}"
    );
    // Each process: its own log, rank and GPUs (2 of the node's 4), its own port.
    let mut ports = Vec::new();
    for n in 0..4 {
        let (replica, proc) = (n / 2, n % 2);
        let log =
            std::fs::read_to_string(run.join(format!("logs/decode-r{replica}-n0-p{proc}.log")))
                .unwrap();
        let gpus = if proc == 0 { "0,1" } else { "2,3" };
        assert!(
            log.contains(&format!("rank {proc} of 2 proc {proc}/2 gpus {gpus}")),
            "{log}"
        );
        assert!(log.contains("listening on"), "{log}");
        let i = &d["instances"][format!("decode-{n}")];
        assert!(
            i["ready_after_s"].is_number(),
            "decode-{n} probed ready: {i:#}"
        );
        ports.push(
            m["resolved"]["deployments"]["d1"]["roles"][0]["instances"][n]["port"]
                .as_u64()
                .unwrap(),
        );
    }
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), 4, "every process has its own port");
    // The manifest's record of each process names its place on its node.
    assert_eq!(d["instances"]["decode-3"]["proc_rank"], 1, "{d:#}");
    assert_eq!(d["instances"]["decode-3"]["replica"], 1, "{d:#}");
}

/// On Slurm: one replica of 2 processes on one node of the test cluster (2 fake GPUs per
/// node), allocated with `--ntasks-per-node=2`, each its own `srun --exact` step asking 1
/// GPU, which Slurm binds to a GPU of its own (overlapping steps would both get GPU 0).
#[test]
fn slurm_runs_each_process_of_a_node_as_a_step_with_its_own_gpu() {
    let Some((c, _turn)) = crate::slurm::cluster() else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let hosts = work.path().join("hosts.yaml");
    std::fs::write(
        &hosts,
        "hosts: {}\nclusters:\n  gpu:\n    slurm:\n      partition: gpu\n      time_limit: \"10:00\"\n      gpus_per_node: 2\n",
    )
    .unwrap();
    let task = work.path().join("slurm-procs.yaml");
    std::fs::write(
        &task,
        format!(
            r#"name: slurm-procs
backend: vllm
model: mock-model
hosts: [gpu]
procs: 2
port: auto
commands:
  - echo "at node=$SLURMD_NODENAME cuda=$CUDA_VISIBLE_DEVICES rank={{{{ rank }}}} gpus={{{{ gpus }}}}"
  - exec {{{{ orchestrate }}}} mock-server --port {{{{ port }}}} --preset fixed --itl-ms 1
readiness: {{http: /health, timeout: 30s}}
benchmark:
  tokenizer: {}
  ignore_eos: true
  dataset: {{kind: random, input_len: 16, output_len: 4}}
  num_prompts: 4
"#,
            crate::common::repo()
                .join("data/tokenizer/tokenizer.json")
                .display()
        ),
    )
    .unwrap();
    // The allocation has room for the node's two one-CPU steps.
    let plan = Command::new(bin())
        .arg("plan")
        .arg(&task)
        .arg("--hosts")
        .arg(&hosts)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&plan.stdout);
    assert!(text.contains("--nodes=1 "), "{text}");
    assert!(text.contains("--ntasks-per-node=2"), "{text}");
    let results = work.path().join("results");
    let state = work.path().join("state");
    let out = crate::slurm::finish(
        crate::slurm::run(c, &task, &hosts, &results, &state),
        std::time::Duration::from_secs(120),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let dir = latest(&results, "slurm-procs");
    let m = json(&dir.join("manifest.json"));
    assert_eq!(m["status"], "completed", "{m:#}");
    let job = crate::slurm::job_id(&m);
    // One node allocated for the two processes.
    let nodes = m["hosts"]["slurm:gpu:d1"]["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1, "{m:#}");
    let mut gpus = Vec::new();
    for proc in 0..2 {
        let log =
            std::fs::read_to_string(dir.join(format!("logs/server-r0-n0-p{proc}.log"))).unwrap();
        assert!(
            log.contains("--ntasks=1 --exact --gpus-per-node=1 sh"),
            "{log}"
        );
        let line = log
            .lines()
            .find(|l| l.starts_with("at node="))
            .unwrap_or_else(|| panic!("{log}"));
        assert!(
            line.contains(&format!("at node={} ", nodes[0]["name"].as_str().unwrap())),
            "{line}"
        );
        assert!(line.contains(&format!("rank={proc} gpus=1")), "{line}");
        let cuda = line
            .split("cuda=")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap();
        gpus.push(cuda.to_string());
    }
    assert_ne!(gpus[0], gpus[1], "each step has a GPU of its own: {gpus:?}");
    assert!(c.wait_gone(&job), "job {job} still queued after the run");
}

/// On Docker: 2 processes of one node as 2 containers of the mock image, each publishing
/// its own port; both probed ready, the load completed, no container left.
#[tokio::test]
async fn docker_runs_each_process_of_a_node_as_a_container_of_its_own() {
    let shutdown = orchestrate::shutdown::Shutdown::new();
    let Some(_engine) = crate::docker::provider(&shutdown).await else {
        return;
    };
    let image = crate::docker::mock_image();
    let dir = tempfile::tempdir().unwrap();
    let name = format!("docker-procs-{}", std::process::id());
    let task = dir.path().join(format!("{name}.yaml"));
    std::fs::write(
        &task,
        format!(
            r#"name: {name}
backend: vllm
model: m
image: {image}
procs: 2
port: auto
commands:
  - echo "rank {{{{ rank }}}} of {{{{ world_size }}}}"
  - exec orchestrate mock-server --host 0.0.0.0 --port {{{{ port }}}} --model m --speed 20
readiness: {{http: /health, timeout: 30s}}
benchmark:
  dataset: {{kind: random, input_len: 16, output_len: 4}}
  tokenizer: {tokenizer}
  ignore_eos: true
  num_prompts: 4
"#,
            tokenizer = crate::common::repo()
                .join("data/tokenizer/tokenizer.json")
                .display(),
        ),
    )
    .unwrap();
    let results = dir.path().join("results");
    let out = crate::common::run_command(&task, &results, &dir.path().join("state"))
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .output()
        .expect("orchestrate runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = latest(&results, &name);
    let m = json(&run.join("manifest.json"));
    assert_eq!(m["status"], "completed", "{m:#}");
    let instances = &m["deployments"][0]["instances"];
    let mut containers = Vec::new();
    for proc in 0..2 {
        let log =
            std::fs::read_to_string(run.join(format!("logs/server-r0-n0-p{proc}.log"))).unwrap();
        assert!(log.contains(&format!("rank {proc} of 2")), "{log}");
        assert!(log.contains("listening on"), "{log}");
        let i = &instances[format!("server-{proc}")];
        assert!(i["ready_after_s"].is_number(), "{i:#}");
        containers.push(i["container_id"].clone());
        assert!(i["container_id"].is_string(), "{i:#}");
    }
    assert_ne!(containers[0], containers[1], "{instances:#}");
    // Nothing of the task is left on the engine.
    let left = Command::new("docker")
        .args(["ps", "-a", "-q", "--filter"])
        .arg(format!("label=orchestrate.task={name}"))
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&left.stdout).trim().is_empty(),
        "containers left: {}",
        String::from_utf8_lossy(&left.stdout)
    );
}
