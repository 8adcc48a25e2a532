//! The reproduction bundle and secret redaction, end to end with the built binary and the
//! mock server: a demo-sized run records every process (argv, env, pid, exit, time to ready,
//! server version) and orchestrate's own command line; `runs show --repro` prints them; a
//! failing server that prints its secrets leaves no trace of them in the archive, on stderr
//! or on stdout.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::common::{bin, files_containing, json, latest, repo};

/// A secret passed through `${{ secrets.NAME }}`; its value is unique to this file.
const SECRET_NAME: &str = "ORCH_REPRO_TEST_SECRET";
const SECRET_VALUE: &str = "hf_repro_0e7d1c9a5b";
/// A literal value of an env entry whose name looks secret.
const LITERAL_KEY: &str = "sk-literal-9f8e7d6c";

fn write_task(dir: &Path, name: &str, commands: &[&str], timeout: &str) -> PathBuf {
    let tokenizer = repo().join("data/tokenizer/tokenizer.json");
    let commands: Vec<String> = commands.iter().map(|c| format!("  - {c:?}")).collect();
    let text = format!(
        "name: {name}
backend: vllm
model: m
port: auto
env:
  HF_TOKEN: ${{{{ secrets.{SECRET_NAME} }}}}
  OPENAI_API_KEY: {LITERAL_KEY}
  PLAIN_SETTING: visible-value
commands:
{commands}
readiness: {{http: /health, timeout: {timeout}}}
benchmark:
  dataset: {{kind: random, input_len: 16, output_len: 4}}
  tokenizer: {tokenizer}
  ignore_eos: true
  num_prompts: 2
  matrix:
    concurrency: [1]
",
        commands = commands.join("\n"),
        tokenizer = tokenizer.display()
    );
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, text).unwrap();
    path
}

fn orchestrate(dir: &Path, args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env(SECRET_NAME, SECRET_VALUE)
        .env("ORCHESTRATE_STATE_DIR", dir.join("state"))
        .stdin(Stdio::null())
        .output()
        .expect("orchestrate runs")
}

fn assert_no_secret(results: &Path, out: &Output) {
    for needle in [SECRET_VALUE, LITERAL_KEY] {
        let hits = files_containing(results, needle);
        assert!(hits.is_empty(), "{needle} written to {hits:?}");
        for (stream, text) in [("stderr", &out.stderr), ("stdout", &out.stdout)] {
            let text = String::from_utf8_lossy(text);
            assert!(!text.contains(needle), "{needle} on {stream}:\n{text}");
        }
    }
}

#[test]
fn a_run_records_every_process_and_runs_show_repro_repeats_it() {
    let dir = tempfile::tempdir().unwrap();
    let orchestrate_bin = bin().display().to_string();
    let serve = format!("{orchestrate_bin} mock-server --port {{{{ port }}}} --model m");
    let task = write_task(dir.path(), "repro", &[&serve], "30s");
    let out = orchestrate(
        dir.path(),
        &["run", task.to_str().unwrap(), "--results", "results"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let results = dir.path().join("results");
    let run = latest(&results, "repro");
    let m = json(&run.join("manifest.json"));

    let invocation = &m["invocation"];
    let argv: Vec<&str> = invocation["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(
        argv[1..],
        ["run", task.to_str().unwrap(), "--results", "results"]
    );
    let cwd = dir.path().canonicalize().unwrap();
    assert_eq!(invocation["cwd"], cwd.to_str().unwrap(), "{m:#}");
    assert_eq!(m["tool"]["version"], env!("CARGO_PKG_VERSION"));

    let p = &m["deployments"][0]["instances"]["server-0"];
    let port = p["port"].as_u64().expect("the port");
    let rendered = format!("{orchestrate_bin} mock-server --port {port} --model m");
    assert_eq!(p["argv"], serde_json::json!([rendered]), "{p:#}");
    assert_eq!(
        (p["role"].as_str(), p["index"].as_u64()),
        (Some("server"), Some(0))
    );
    assert_eq!(
        (p["replica"].as_u64(), p["node"].as_u64()),
        (Some(0), Some(0))
    );
    assert_eq!(
        (p["host"].as_str(), p["provider"].as_str()),
        (Some("local"), Some("local"))
    );
    assert_eq!(p["env"]["HF_TOKEN"], "***", "{p:#}");
    assert_eq!(p["env"]["OPENAI_API_KEY"], "***", "{p:#}");
    assert_eq!(p["env"]["PLAIN_SETTING"], "visible-value", "{p:#}");
    assert_eq!(
        p["secrets"],
        serde_json::json!(["OPENAI_API_KEY", SECRET_NAME])
    );
    assert!(p["pid"].as_u64().unwrap() > 1, "{p:#}");
    let ready = p["ready_after_s"].as_f64().unwrap();
    assert!(ready > 0.0 && ready < 30.0, "{p:#}");
    assert_eq!(p["server_version"]["source"], "GET /version", "{p:#}");
    assert_eq!(
        p["server_version"]["version"],
        format!("orchestrate-mock {}", env!("CARGO_PKG_VERSION"))
    );
    // Stopped by orchestrate: SIGTERM, which the mock answers by exiting.
    assert!(
        p["exit"]["code"].is_i64() || p["exit"]["signal"].is_i64(),
        "{p:#}"
    );

    let repro = std::fs::read_to_string(run.join("repro.md")).unwrap();
    let show = orchestrate(
        dir.path(),
        &[
            "runs",
            "show",
            "latest",
            "--task",
            "repro",
            "--results",
            "results",
            "--repro",
        ],
    );
    assert!(
        show.status.success(),
        "{}",
        String::from_utf8_lossy(&show.stderr)
    );
    let shown = String::from_utf8(show.stdout.clone()).unwrap();
    assert_eq!(shown, repro, "runs show --repro prints repro.md");
    for want in [
        format!("orchestrate run {} --results results", task.display()),
        format!("mock-server --port {port} --model m"),
        format!("`{SECRET_NAME}`"),
        "HF_TOKEN=***".to_string(),
        "PLAIN_SETTING=visible-value".to_string(),
        "(GET /version)".to_string(),
        "\"deployments\"".to_string(),
    ] {
        assert!(shown.contains(&want), "missing {want:?} in\n{shown}");
    }
    // A run directory works as RUN too; without --repro, the manifest.
    let plain = orchestrate(dir.path(), &["runs", "show", run.to_str().unwrap()]);
    assert!(plain.status.success());
    let again: serde_json::Value = serde_json::from_slice(&plain.stdout).unwrap();
    assert_eq!(again["run_id"], m["run_id"]);
    assert_no_secret(&results, &out);
}

#[test]
fn a_failing_server_that_prints_its_secrets_leaves_no_trace_of_them() {
    let dir = tempfile::tempdir().unwrap();
    let task = write_task(
        dir.path(),
        "leak",
        &[
            "echo \"token is $HF_TOKEN\"",
            "echo \"key is $OPENAI_API_KEY\" >&2",
            "printf 'partial %s' \"$HF_TOKEN\"",
            "exit 3",
        ],
        "10s",
    );
    // -v: debug logging on stderr is redacted too.
    let out = orchestrate(
        dir.path(),
        &["-v", "run", task.to_str().unwrap(), "--results", "results"],
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results = dir.path().join("results");
    let run = latest(&results, "leak");
    let m = json(&run.join("manifest.json"));
    let error = m["deployments"][0]["error"].as_str().unwrap();
    // The output was quoted, redacted: the path exists and is covered.
    assert!(
        error.contains("token is ***") && error.contains("key is ***"),
        "{error}"
    );
    let log = std::fs::read_to_string(run.join("logs/server-r0-n0.log")).unwrap();
    // stdout and stderr interleave in any order; each is redacted.
    for piece in ["token is ***\n", "partial ***", "key is ***\n"] {
        assert!(log.contains(piece), "{piece:?} not in {log}");
    }
    let p = &m["deployments"][0]["instances"]["server-0"];
    assert_eq!(p["exit"]["code"], 3, "{p:#}");
    assert!(run.join("report.md").is_file() && run.join("repro.md").is_file());
    assert_no_secret(&results, &out);
}
