//! Helpers shared by the integration tests: the built binary, the repository root, whether
//! the environment demands Docker/SSH tests run (CI=true), and reading a run's archive.

#![allow(dead_code, reason = "each test module uses a different subset")]

use std::path::{Path, PathBuf};

/// The `orchestrate` binary built for this test run.
pub(crate) fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_orchestrate"))
}

/// The repository root (where tasks/ and docs/ live).
pub(crate) fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// In CI (`CI=true`) tests that need Docker or sshd must run: a missing engine is a failure,
/// never a silent skip.
pub(crate) fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// The run directory `results/<task>/latest` points at.
pub(crate) fn latest(results: &Path, task: &str) -> PathBuf {
    let link = results.join(task).join("latest");
    results
        .join(task)
        .join(std::fs::read_link(&link).expect("latest link"))
}

/// A JSON file of an archive, parsed (panics naming the file).
pub(crate) fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(
        &std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .unwrap()
}

/// A task file in `dir` named `<name>.yaml`: the built-in mock server (preset `fixed`, `itl_ms`
/// per token) on an auto port, the shipped tokenizer, and `benchmark` (YAML lines indented
/// under `benchmark:`) after it.
pub(crate) fn mock_task(dir: &Path, name: &str, itl_ms: u32, benchmark: &str) -> PathBuf {
    let task = dir.join(format!("{name}.yaml"));
    let text = format!(
        "name: {name}\nbackend: vllm\nmodel: mock-model\nport: auto\ncommands:\n  - \"{{{{ orchestrate }}}} mock-server --port {{{{ port }}}} --preset fixed --itl-ms {itl_ms}\"\nreadiness: {{http: /health, timeout: 30s}}\nbenchmark:\n  tokenizer: {}\n  ignore_eos: true\n{benchmark}",
        repo().join("data/tokenizer/tokenizer.json").display()
    );
    std::fs::write(&task, text).expect("the task file is written");
    task
}

/// `orchestrate run TASK --no-report --results RESULTS`, with a state dir of its own under
/// `state`, no stdin, output piped.
pub(crate) fn run_command(task: &Path, results: &Path, state: &Path) -> std::process::Command {
    let mut cmd = std::process::Command::new(bin());
    cmd.args(["run", "--no-report", "--results"])
        .arg(results)
        .arg(task)
        .env("ORCHESTRATE_STATE_DIR", state)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    cmd
}

/// Every file under `dir` whose bytes contain `needle`.
pub(crate) fn files_containing(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut hits = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
                stack.push(path);
            } else if std::fs::read(&path)
                .unwrap_or_default()
                .windows(needle.len())
                .any(|w| w == needle.as_bytes())
            {
                hits.push(path);
            }
        }
    }
    hits
}

/// A copy of the version-1 archive fixture's run under `results/demo/<run_id>`, its
/// manifest naming `run_id`.
pub(crate) fn version_1_run(results: &Path, run_id: &str) -> PathBuf {
    let fixture = repo().join("tests/fixtures/archive-v1/demo/20261123-223731");
    let dir = results.join("demo").join(run_id);
    std::fs::create_dir_all(results.join("demo")).unwrap();
    let copy = std::process::Command::new("cp")
        .arg("-r")
        .arg(&fixture)
        .arg(&dir)
        .status()
        .unwrap();
    assert!(copy.success());
    let manifest = dir.join("manifest.json");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(&manifest, text.replace("20261123-223731", run_id)).unwrap();
    dir
}

/// The lines of `text` that start with one of `prefixes`, each ending in a newline (the parts
/// of a `plan` that a snapshot keeps).
pub(crate) fn lines_starting(text: &str, prefixes: &[&str]) -> String {
    text.lines()
        .filter(|l| prefixes.iter().any(|p| l.starts_with(p)))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Live processes whose `/proc/<pid>/<file>` (`cmdline`, `environ`: NUL-separated) holds
/// exactly `entry` as one of its parts.
pub(crate) fn pids_with_entry(file: &str, entry: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/{file}"))
                .is_ok_and(|c| c.split(|&b| b == 0).any(|part| part == entry.as_bytes()))
        })
        .collect()
}
