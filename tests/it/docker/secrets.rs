//! `orchestrate -v run` with a docker task whose server prints its secret: the engine's
//! request bodies (container `Env`) on stderr, the container log, the manifest and reports
//! show `***`; the manifest records the container id and the image's digest (a local build:
//! its `sha256:` id).

use super::*;

const SECRET_NAME: &str = "ORCH_DOCKER_TEST_SECRET";
const SECRET_VALUE: &str = "hf_docker_4b1f0e92c7";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verbose_docker_run_redacts_the_secret_and_records_the_image_digest() {
    let shutdown = Shutdown::new();
    let Some(provider) = provider(&shutdown).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let task = format!("it-secret-{}", std::process::id());
    let tokenizer = common::repo().join("data/tokenizer/tokenizer.json");
    let text = format!(
        "name: {task}
backend: vllm
model: m
image: {IMAGE}
port: auto
env:
  HF_TOKEN: ${{{{ secrets.{SECRET_NAME} }}}}
commands:
  - echo \"token is $HF_TOKEN\"
  - exec orchestrate mock-server --host 0.0.0.0 --port {{{{ port }}}} --model m
readiness: {{http: /health, timeout: 30s}}
benchmark:
  dataset: {{kind: random, input_len: 16, output_len: 4}}
  tokenizer: {tokenizer}
  ignore_eos: true
  num_prompts: 2
  matrix:
    concurrency: [1]
",
        tokenizer = tokenizer.display()
    );
    let path = dir.path().join(format!("{task}.yaml"));
    std::fs::write(&path, text).unwrap();
    let out = Command::new(common::bin())
        .arg("-v")
        .arg("run")
        .arg(&path)
        .arg("--results")
        .arg(dir.path().join("results"))
        .env(SECRET_NAME, SECRET_VALUE)
        .env("ORCHESTRATE_STATE_DIR", dir.path().join("state"))
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // The engine's create request is logged with -v, its Env redacted.
    assert!(stderr.contains("HF_TOKEN=***"), "{stderr}");
    assert!(!stderr.contains(SECRET_VALUE), "{stderr}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains(SECRET_VALUE));
    let results = dir.path().join("results");
    let run = common::latest(&results, &task);
    let log = std::fs::read_to_string(run.join("logs/server-r0-n0.log")).unwrap();
    assert!(log.contains("token is ***\n"), "{log}");
    let hits = common::files_containing(&results, SECRET_VALUE);
    assert!(hits.is_empty(), "the secret in {hits:?}");
    let m = common::json(&run.join("manifest.json"));
    let p = &m["deployments"][0]["instances"]["server-0"];
    let id = p["image"]["id"].as_str().unwrap();
    assert!(id.starts_with("sha256:"), "{p:#}");
    assert_eq!(
        p["image_digest"], id,
        "a local build has no registry digest: {p:#}"
    );
    assert_eq!(p["container_id"], p["container"]["id"], "{p:#}");
    assert_eq!(p["env"]["HF_TOKEN"], "***", "{p:#}");
    assert_eq!(p["secrets"], serde_json::json!([SECRET_NAME]), "{p:#}");
    let repro = std::fs::read_to_string(run.join("repro.md")).unwrap();
    assert!(
        repro.contains(&format!("--entrypoint /bin/sh {IMAGE} -c")) && repro.contains(id),
        "{repro}"
    );
    let filter = LabelFilter {
        run: None,
        task: Some(task.clone()),
    };
    assert!(provider.list(&filter).await.unwrap().is_empty());
}
