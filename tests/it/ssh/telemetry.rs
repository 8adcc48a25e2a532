//! GPU telemetry on a remote host (issue #26): the sampler runs there through the ssh
//! provider (the stand-in replaying a real nvidia-smi recording), its samples come back into
//! the archive under the host's name, the hosts file's `price_per_gpu_hour` prices them, and
//! nothing is left running there.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::fixture::trusted_host;
use super::run::{assert_completed, manifest, run, spawn_run, stderr};
use crate::common::{json, latest, repo};
use crate::telemetry::{deaf_stand_in, gone, sampling, stand_in};

/// A task of the mock server on h1, `prompts` requests of `output_len` tokens at 20 ms, two
/// at a time; `mark` is its model name (on the server's command line).
fn remote_gpu_task(dir: &Path, mark: &str, output_len: u32, prompts: u32) -> PathBuf {
    let task = dir.join("remote-gpu.yaml");
    std::fs::write(
        &task,
        format!(
            r#"name: remote-gpu
backend: vllm
model: {mark}
port: auto
hosts: [h1]
commands:
  - "{{{{ orchestrate }}}} mock-server --host {{{{ host_address }}}} --port {{{{ port }}}} --model {mark} --preset fixed --itl-ms 20"
readiness: {{http: /health, timeout: 20s}}
benchmark:
  dataset: {{kind: random, input_len: 16, output_len: {output_len}}}
  tokenizer: {tokenizer}
  ignore_eos: true
  concurrency: 2
  num_prompts: {prompts}
"#,
            tokenizer = repo().join("data/tokenizer/tokenizer.json").display()
        ),
    )
    .unwrap();
    task
}

#[test]
fn a_remote_hosts_gpus_are_sampled_there_and_priced_from_the_hosts_file() {
    let Some((_keys, _sshd, dir, hosts)) = trusted_host("127.0.0.1") else {
        return;
    };
    // The hosts file's h1 at $1.8 per GPU-hour.
    let text = std::fs::read_to_string(&hosts).unwrap();
    let text = text.replacen(
        "identity_file:",
        "price_per_gpu_hour: 1.8, identity_file:",
        1,
    );
    std::fs::write(&hosts, text).unwrap();
    let mark = super::marker("telemetry");
    let task = remote_gpu_task(dir.path(), &mark, 30, 4);
    let command = stand_in("0.2", 1, &mark);
    let out = run(
        dir.path(),
        &hosts,
        &[&task],
        &[
            "--telemetry-command",
            &command,
            "--telemetry-interval",
            "200ms",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_completed(&manifest(dir.path(), "remote-gpu"), 1);
    assert!(
        gone(&mark, Duration::from_secs(8)),
        "the remote sampler outlived the run"
    );
    let points = latest(&dir.path().join("results"), "remote-gpu").join("points");
    let point = std::fs::read_dir(points)
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    let raw = std::fs::read_to_string(point.join("telemetry/h1.log")).unwrap();
    assert!(raw.contains(", 0, GPU-80d98ec6"), "{raw}");
    let summary = json(&point.join("summary.json"));
    let tele = &summary["telemetry"];
    assert_eq!(tele["per_gpu"][0]["host"], "h1", "{tele:#}");
    assert_eq!(tele["per_gpu"][0]["role"], "server");
    assert_eq!(tele["per_gpu"][0]["price_per_gpu_hour"], 1.8);
    let window = tele["window_end_s"].as_f64().unwrap() - tele["window_start_s"].as_f64().unwrap();
    let tokens = summary["total_output_tokens"].as_f64().unwrap();
    let dollars = 1.8 * window / 3600.0;
    let per_dollar = summary["output_tokens_per_dollar"].as_f64().unwrap();
    assert!(
        (per_dollar - tokens / dollars).abs() / per_dollar < 1e-9,
        "{summary:#}"
    );
    assert!(summary["joules_per_token"].as_f64().unwrap() > 0.0);
}

/// orchestrate SIGKILLed while a remote sampler runs: the dropped connection's remote
/// watchdog ends the sampler (SIGTERM, then SIGKILL after its grace).
#[test]
fn a_remote_sampler_does_not_outlive_a_sigkilled_orchestrate() {
    let Some((_keys, _sshd, dir, hosts)) = trusted_host("127.0.0.1") else {
        return;
    };
    let mark = super::marker("telemetry-kill");
    // A point far longer than the test waits: 400 requests of 200 tokens at 20 ms.
    let task = remote_gpu_task(dir.path(), &mark, 200, 400);
    let sampler_mark = format!("{mark}-sampler");
    let sampler = deaf_stand_in("0.2", 1, &sampler_mark);
    let mut child = spawn_run(
        dir.path(),
        &hosts,
        &task,
        &["--telemetry-command", &sampler],
    );
    sampling(&sampler_mark);
    child.kill().unwrap(); // SIGKILL: orchestrate stops nothing itself
    child.wait().unwrap();
    assert!(
        gone(&sampler_mark, Duration::from_secs(15)),
        "the remote sampler outlived a SIGKILLed orchestrate"
    );
    assert!(
        gone(&mark, Duration::from_secs(15)),
        "the remote server outlived a SIGKILLed orchestrate"
    );
}
