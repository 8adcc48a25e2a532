//! Exit codes and the ends of a process (issue 14, item 6): a closed stdout ends the data
//! verbs quietly, numbers too large for a duration are bad input (exit 2) and never a panic,
//! `bench` interrupted exits 130, and `-q` silences progress.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use orchestrate_mock::{self as mock, Curve, MockConfig, Preset};
use tokio_util::sync::CancellationToken;

use crate::common::{bin, repo};

/// Run `orchestrate args` with its stdout closed before it writes anything; its stderr and
/// exit status.
fn with_closed_stdout(args: &[&str]) -> (std::process::ExitStatus, String) {
    let mut child = Command::new(bin())
        .args(args)
        .current_dir(repo())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reading end goes away at once: the first write meets a broken pipe.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn data_verbs_end_quietly_when_stdout_is_closed() {
    let empty = tempfile::tempdir().unwrap();
    let results = empty.path().to_str().unwrap();
    for args in [
        &["plan", "tasks/demo.yaml"][..],
        &["runs", "--results", results],
    ] {
        let (status, stderr) = with_closed_stdout(args);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(
            !matches!(status.code(), Some(4 | 101)),
            "{args:?}: {status:?} {stderr}"
        );
    }
}

fn output(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .current_dir(repo())
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn huge_durations_are_bad_input_everywhere() {
    let huge = "99999999999999999999d";
    for args in [
        &["validate", "tests/fixtures/spec/huge_duration.yaml"][..],
        &["plan", "tests/fixtures/spec/huge_duration.yaml"],
        &["run", "--lock-wait", huge, "tasks/demo.yaml"],
        &["bench", "--request-timeout", huge],
        &["bench", "--duration", huge],
    ] {
        let out = output(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(
            stderr.contains("longer than 365 days"),
            "{args:?}: {stderr}"
        );
    }
}

/// A hosts file `plan` must refuse (issue 29, item 3): exit 2, one `error:`, the file's
/// place and what to do.
#[test]
fn a_bad_hosts_file_is_one_located_error_at_plan() {
    let dir = tempfile::tempdir().unwrap();
    let slurm = |t: &str| {
        format!(
            "hosts: {{}}\nclusters:\n  gpu:\n    slurm: {{partition: b, time_limit: \"{t}\", gpus_per_node: 1}}\n"
        )
    };
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", Vec::new(), "hosts.yaml: the file is empty"),
        (
            "latin1",
            b"hosts:\n  caf\xe9: {}\n".to_vec(),
            "hosts.yaml:2:6: not UTF-8 text: byte 12",
        ),
        (
            "address",
            b"hosts:\n  a: {address: \"\"}\n".to_vec(),
            "hosts.yaml:2:16: `hosts.a.address` is empty",
        ),
        (
            "known",
            b"known_hosts: 42\nhosts: {}\n".to_vec(),
            "hosts.yaml:1:14: `known_hosts` is `42`, a number, not a file path",
        ),
        (
            "port",
            b"hosts:\n  a:\n    user: u\n    port: 99999999\n".to_vec(),
            "hosts.yaml:4:11: `hosts.a.port` is 99999999, not a port",
        ),
        (
            "words",
            slurm("ten minutes").into_bytes(),
            "not a Slurm time",
        ),
        (
            "huge",
            slurm("99999999999-00:00:00").into_bytes(),
            "over a year",
        ),
    ];
    for (name, bytes, want) in cases {
        let path = dir.path().join(name).join("hosts.yaml");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, bytes).unwrap();
        let out = output(&["plan", "tasks/demo.yaml", "--hosts", path.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(
            stderr.starts_with(&format!("error: {}", dir.path().join(name).display())),
            "{name}: {stderr}"
        );
        assert!(stderr.contains(want), "{name}: {stderr}");
        assert_eq!(stderr.matches("error:").count(), 1, "{name}: {stderr}");
        assert!(stderr.contains("help: "), "{name}: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn bench_interrupted_exits_130() {
    let mut c = MockConfig::new(Preset::Fixed);
    c.latency.decode = Curve::constant(5.0);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let cancel = CancellationToken::new();
    let _stop = cancel.clone().drop_guard();
    tokio::spawn(mock::serve(c, listener, cancel));
    let tok = repo().join("data/tokenizer/tokenizer.json");
    let mut child = Command::new(bin())
        .args(["bench", "--base-url", &base, "--model", "mock-model"])
        .arg("--tokenizer")
        .arg(&tok)
        .args(["--random-input-len", "8", "--random-output-len", "50"])
        .args([
            "--num-prompts",
            "200",
            "--duration",
            "60s",
            "--max-concurrency",
            "2",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    // SAFETY: sending a signal to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        loop {
            if child.try_wait().unwrap().is_some() {
                break child.wait_with_output().unwrap();
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "bench did not stop"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
}

#[test]
fn quiet_run_prints_no_progress() {
    let dir = tempfile::tempdir().unwrap();
    let task = dir.path().join("quiet.yaml");
    let tokenizer = repo().join("data/tokenizer/tokenizer.json");
    std::fs::write(
        &task,
        format!(
            "name: quiet\nbackend: vllm\nmodel: mock-model\nport: auto\ncommands:\n  - \"{{{{ orchestrate }}}} mock-server --port {{{{ port }}}} --preset fixed --itl-ms 1\"\nreadiness: {{http: /health, timeout: 30s}}\nbenchmark:\n  dataset: {{kind: random, input_len: 8, output_len: 4}}\n  tokenizer: {}\n  concurrency: 1\n  num_prompts: 2\n",
            tokenizer.display()
        ),
    )
    .unwrap();
    let results = dir.path().join("results");
    let out = Command::new(bin())
        .args(["-q", "run", "--no-report"])
        .arg(&task)
        .arg("--results")
        .arg(&results)
        .current_dir(Path::new(&repo()))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("[point"), "progress with -q: {stderr}");
    assert!(!stderr.contains("run:"), "progress with -q: {stderr}");
}
