//! The real NVIDIA Dynamo 1.6.1 (scripts/dynamo-venv.sh) through `orchestrate run`: Dynamo's
//! own mock engine workers (`python -m dynamo.mocker --disaggregation-mode prefill|decode`)
//! and its frontend (`python -m dynamo.frontend`, HTTP + router) as the entry role of a
//! `backend: dynamo` task, discovering each other through a file store (no etcd, no NATS)
//! over the TCP request plane on loopback. The topology check reads the frontend's
//! `GET /health` instances (`via: dynamo`) before the load; a frontend short of a decode
//! worker fails the deployment naming the counts.

use std::path::Path;

use crate::common::{latest, repo};
use crate::ssh::marker;
use crate::topology::{Checked, assert_topology_run, assert_unready, command, summaries};

/// A tiny Hugging Face-style model directory for the mocker and the frontend (they need a
/// tokenizer and a `config.json`; nothing comes from the Hub): the project's tokenizer, its
/// config with `bos_token` as a plain string (Dynamo's parser rejects the `AddedToken` map).
fn model_dir(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let tokenizer = repo().join("data/tokenizer");
    std::fs::copy(tokenizer.join("tokenizer.json"), dir.join("tokenizer.json")).unwrap();
    let mut config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(tokenizer.join("tokenizer_config.json")).unwrap(),
    )
    .unwrap();
    config["bos_token"] = "<s>".into();
    std::fs::write(dir.join("tokenizer_config.json"), config.to_string()).unwrap();
    let model = serde_json::json!({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 4971,
        "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
        "num_key_value_heads": 2, "intermediate_size": 128, "max_position_embeddings": 4096,
        "bos_token_id": 0, "eos_token_id": 0, "torch_dtype": "bfloat16"
    });
    std::fs::write(dir.join("config.json"), model.to_string()).unwrap();
}

/// Options of one Dynamo task.
struct Shape<'a> {
    name: &'a str,
    /// In every process's command line (the model directory's name, a frontend dump file).
    marker: &'a str,
    decodes: u32,
    /// `readiness.workers` of the frontend (`None`: the default, one per worker replica).
    workers: Option<&'a str>,
    frontend_timeout: &'a str,
    num_prompts: u32,
}

/// The task: `prefill` (1) and `decode` mockers, the frontend as entry role. Every process
/// shares a file discovery store in `dir`; workers answer `/health` on their system port.
fn task_file(dir: &Path, python: &Path, s: &Shape<'_>) -> std::path::PathBuf {
    let model = dir.join(s.marker);
    model_dir(&model);
    let py = python.display();
    let planes = "--discovery-backend file --request-plane tcp";
    let mocker = |mode: &str| {
        format!(
            "exec {py} -m dynamo.mocker --model-path {m} --model-name mock-model --disaggregation-mode {mode} {planes} --speedup-ratio 0",
            m = model.display()
        )
    };
    let worker_env = r#"
    env:
      DYN_SYSTEM_HOST: "{{ host_address }}"
      DYN_SYSTEM_PORT: "{{ port }}"
      DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS: '["generate"]'"#;
    let text = format!(
        r#"name: {name}
backend: dynamo
model: mock-model
env:
  HF_HUB_OFFLINE: "1"
  DYN_FILE_KV: {kv}
  DYN_TCP_RPC_HOST: "{{{{ host_address }}}}"
  DYN_EVENT_PLANE_HOST: "{{{{ host_address }}}}"
roles:
  prefill:
    port: auto
    readiness: {{timeout: 40s}}{worker_env}
    commands: ["{prefill}"]
  decode:
    replicas: {decodes}
    port: auto
    readiness: {{timeout: 40s}}{worker_env}
    commands: ["{decode}"]
  frontend:
    port: auto
    depends_on: [prefill, decode]
    readiness: {{timeout: {timeout}{workers}}}
    commands: ["exec {py} -m dynamo.frontend --http-host {{{{ host_address }}}} --http-port {{{{ port }}}} {planes} --dump-config-to {dump}"]
entry_role: frontend
benchmark:
  dataset: {{kind: random, input_len: 16, output_len: 8}}
  tokenizer: {tokenizer}
  concurrency: 4
  num_prompts: {n}
"#,
        name = s.name,
        kv = dir.join("kv").display(),
        prefill = mocker("prefill"),
        decode = mocker("decode"),
        decodes = s.decodes,
        timeout = s.frontend_timeout,
        workers = s
            .workers
            .map_or_else(String::new, |w| format!(", workers: {w}")),
        dump = dir.join(format!("{}-frontend.json", s.marker)).display(),
        tokenizer = repo().join("data/tokenizer/tokenizer.json").display(),
        n = s.num_prompts,
    );
    let path = dir.join(format!("{}.yaml", s.name));
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_1p1d_task_runs_through_the_dynamo_frontend() {
    let Some(python) = crate::routers::venv::dynamo() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mark = marker("dynamo");
    let task = task_file(
        dir.path(),
        &python,
        &Shape {
            name: "pd-dynamo",
            marker: &mark,
            decodes: 1,
            workers: None,
            frontend_timeout: "40s",
            num_prompts: 24,
        },
    );
    let out = command(dir.path(), &task, None).output().unwrap();
    let frontend = Checked {
        role: "frontend",
        via: "dynamo",
        prefill: 1,
        decode: 1,
    };
    assert_topology_run(dir.path(), "pd-dynamo", &out, 24, &frontend);
    let point = &summaries(dir.path(), "pd-dynamo")[0];
    assert_eq!(point["total_output_tokens"], 24 * 8, "{point:#}");
    assert_eq!(point["output_len_mismatch"], 0, "{point:#}");
    // Disaggregated: every request (and the readiness completion) went through the prefill
    // worker and then the decode worker, as their archived logs show.
    let logs = latest(&dir.path().join("results"), "pd-dynamo").join("logs");
    for worker in ["prefill", "decode"] {
        let log = std::fs::read_to_string(logs.join(format!("{worker}-r0-n0.log"))).unwrap();
        let served = log.matches("request received").count();
        assert!(served > 24, "{worker} served {served} requests:\n{log}");
    }
    assert!(
        crate::topology::gone(&mark),
        "a mocker or the frontend outlived the run"
    );
}

#[test]
fn a_dynamo_frontend_short_of_a_decode_worker_fails_the_deployment() {
    let Some(python) = crate::routers::venv::dynamo() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mark = marker("dynshort");
    let task = task_file(
        dir.path(),
        &python,
        &Shape {
            name: "pd-dynamo-short",
            marker: &mark,
            decodes: 1,
            workers: Some("{decode: 2}"),
            frontend_timeout: "6s",
            num_prompts: 4,
        },
    );
    let out = command(dir.path(), &task, None).output().unwrap();
    assert_unready(
        dir.path(),
        "pd-dynamo-short",
        &out,
        "reports 1 prefill and 1 decode workers (GET /health)",
        "expected at least 1 prefill and 2 decode workers",
        &mark,
    );
}
