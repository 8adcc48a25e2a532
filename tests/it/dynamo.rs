//! The real NVIDIA Dynamo 1.6.1 (scripts/dynamo-venv.sh) through `orchestrate run`: Dynamo's
//! own mock engine workers (`python -m dynamo.mocker --disaggregation-mode prefill|decode`)
//! and its frontend (`python -m dynamo.frontend`, HTTP + router) as the entry role of a
//! `backend: dynamo` task, discovering each other through a file store (no etcd, no NATS)
//! over the TCP request plane on loopback. The topology check reads the frontend's
//! `GET /health` instances (`via: dynamo`) before the load; a frontend short of a decode
//! worker fails the deployment naming the counts. The task is docs/topologies.md's Dynamo
//! example with this machine's paths.

use std::path::Path;

use crate::common::{latest, repo};
use crate::ssh::marker;
use crate::topology::{Checked, assert_topology_run, assert_unready, command, summaries};

/// A tiny Hugging Face-style model directory for the mocker and the frontend (they need a
/// tokenizer and a `config.json`; nothing comes from the Hub): the project's tokenizer, its
/// config with `bos_token` as a plain string (Dynamo's parser rejects the `AddedToken` map).
pub(crate) fn model_dir(dir: &Path) {
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
    /// `readiness.workers` of the frontend (`None`: the default, one per worker replica).
    workers: Option<&'a str>,
    frontend_timeout: &'a str,
    num_prompts: u32,
}

/// The Dynamo task example of docs/topologies.md (the YAML block starting `name:
/// dynamo-1p1d`), so that the documented task is the one that runs.
fn documented_task() -> String {
    let doc = std::fs::read_to_string(repo().join("docs/topologies.md")).unwrap();
    let start = doc
        .find("```yaml\nname: dynamo-1p1d\n")
        .expect("docs/topologies.md has the Dynamo task example")
        + "```yaml\n".len();
    let len = doc[start..].find("```").unwrap();
    doc[start..start + len].to_string()
}

/// `text` with each `from` (exactly `times` of them) replaced by `to`.
fn replace(text: &str, from: &str, to: &str, times: usize) -> String {
    assert_eq!(
        text.matches(from).count(),
        times,
        "`{from}` in the documented Dynamo task:\n{text}"
    );
    text.replace(from, to)
}

/// The documented task (a prefill and a decode mocker, the frontend as entry role, a file
/// discovery store) with this machine's paths: the venv's python, a model directory, the
/// store and `HOME` in `dir`, bounded readiness timeouts, the marker in every command line.
fn task_file(dir: &Path, python: &Path, s: &Shape<'_>) -> std::path::PathBuf {
    let model = dir.join(s.marker);
    model_dir(&model);
    let py = format!("exec {} -m", python.display());
    let mut text = documented_task();
    for (from, to, times) in [
        ("name: dynamo-1p1d", format!("name: {}", s.name), 1),
        ("exec python -m", py, 3),
        ("/models/tiny", model.display().to_string(), 2),
        ("/shared/dynamo-kv", dir.join("kv").display().to_string(), 1),
        // The frontend caches model cards in ~/.cache/dynamo: the test's own directory.
        (
            "  HF_HUB_OFFLINE: \"1\"\n",
            format!(
                "  HF_HUB_OFFLINE: \"1\"\n  HOME: {}\n",
                dir.join("home").display()
            ),
            1,
        ),
        (
            "    port: auto\n    env:",
            "    port: auto\n    readiness: {timeout: 40s}\n    env:".to_string(),
            2,
        ),
        (
            "    depends_on: [prefill, decode]\n",
            format!(
                "    depends_on: [prefill, decode]\n    readiness: {{timeout: {}{}}}\n",
                s.frontend_timeout,
                s.workers
                    .map_or_else(String::new, |w| format!(", workers: {w}"))
            ),
            1,
        ),
        (
            "--request-plane tcp\"]\nentry_role",
            format!(
                "--request-plane tcp --dump-config-to {}\"]\nentry_role",
                dir.join(format!("{}-frontend.json", s.marker)).display()
            ),
            1,
        ),
        (
            "  num_prompts: 24\n",
            format!(
                "  num_prompts: {}\n  concurrency: 4\n  tokenizer: {}\n",
                s.num_prompts,
                repo().join("data/tokenizer/tokenizer.json").display()
            ),
            1,
        ),
    ] {
        text = replace(&text, from, &to, times);
    }
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
