//! Local instances as owned process trees: a SIGKILLed orchestrate leaves no server behind
//! (the watchdog), `ps` and `clean` find and end what is left when the watchdog is gone too,
//! and teardown never hangs on output pipes that an escaped child holds.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{bin, repo};

/// `orchestrate run TASK` with its own state dir, output piped.
fn start(task: &str, results: &Path, state: &Path) -> Child {
    Command::new(bin())
        .args(["run", task, "--no-report", "--results"])
        .arg(results)
        .env("ORCHESTRATE_STATE_DIR", state)
        .env("NO_COLOR", "1")
        .current_dir(repo())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The manifest of the run of `task` once point `point` is running.
fn wait_for_point(results: &Path, task: &str, point: usize) -> Value {
    let started = Instant::now();
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "point {point} never started"
        );
        if let Ok(link) = std::fs::read_link(results.join(task).join("latest")) {
            let path = results.join(task).join(link).join("manifest.json");
            if let Ok(m) = std::fs::read_to_string(&path)
                .map_err(|_| ())
                .and_then(|t| serde_json::from_str::<Value>(&t).map_err(|_| ()))
                && m["points"][point]["status"] == "running"
            {
                return m;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn server_port(manifest: &Value) -> u16 {
    manifest["resolved"]["deployments"]["d1"]["roles"][0]["instances"][0]["port"]
        .as_u64()
        .expect("the server's port") as u16
}

fn answers(port: u16) -> bool {
    std::net::TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200))
        .is_ok()
}

/// Waits until nothing answers on `port`; false after `within`.
fn stops_answering(port: u16, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if !answers(port) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

fn sigkill(child: &mut Child) {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    child.wait().unwrap();
}

#[test]
fn a_sigkilled_run_leaves_no_server_listening() {
    let results = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut child = start(
        "tests/fixtures/run/forking.yaml",
        results.path(),
        state.path(),
    );
    let manifest = wait_for_point(results.path(), "forking", 1);
    let port = server_port(&manifest);
    assert!(answers(port), "the server answers during the point");
    sigkill(&mut child);
    assert!(
        stops_answering(port, Duration::from_secs(8)),
        "the server on port {port} outlived a SIGKILLed orchestrate"
    );
}

#[test]
fn ps_lists_and_clean_kills_a_leftover_whose_watchdog_died_too() {
    let results = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut child = start(
        "tests/fixtures/run/forking.yaml",
        results.path(),
        state.path(),
    );
    let manifest = wait_for_point(results.path(), "forking", 1);
    let port = server_port(&manifest);
    let run = manifest["run_id"].as_str().unwrap().to_string();
    let records: Vec<Value> = std::fs::read_dir(state.path().join("instances"))
        .expect("the instance is recorded")
        .map(|e| crate::common::json(&e.unwrap().path()))
        .collect();
    assert_eq!(records.len(), 1, "{records:?}");
    let watchdog = records[0]["watchdog"].as_i64().unwrap() as i32;
    // SAFETY: signalling a process this test's run started.
    unsafe { libc::kill(watchdog, libc::SIGKILL) };
    sigkill(&mut child);
    std::thread::sleep(Duration::from_millis(500));
    assert!(answers(port), "with no watchdog the server is a leftover");

    let verb = |args: &[&str]| {
        let out = Command::new(bin())
            .args(args)
            .env("ORCHESTRATE_STATE_DIR", state.path())
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
        )
    };
    let (code, listed) = verb(&["ps", "--run", &run]);
    assert_eq!(code, Some(0));
    assert!(
        listed.contains(&run) && listed.contains("process group") && listed.contains("(gone)"),
        "{listed}"
    );
    let (code, cleaned) = verb(&["clean", "--run", &run]);
    assert!(cleaned.contains("process group"), "{cleaned} ({code:?})");
    assert!(
        stops_answering(port, Duration::from_secs(5)),
        "clean left the server on port {port}"
    );
    let (_, listed) = verb(&["ps", "--run", &run]);
    assert!(!listed.contains(&run), "{listed}");
}
