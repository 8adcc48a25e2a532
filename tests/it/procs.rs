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

/// Live processes whose environment carries `ORCHESTRATE_INSTANCE=<marker>/<owner pid>`.
fn marked(marker: &str) -> Vec<i32> {
    crate::common::pids_with_entry("environ", &format!("ORCHESTRATE_INSTANCE={marker}/"))
}

#[test]
fn a_server_child_that_holds_stdout_in_another_session_does_not_hang_teardown() {
    let results = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut child = start(
        "tests/fixtures/run/escaping-child.yaml",
        results.path(),
        state.path(),
    );
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > Duration::from_secs(40) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let run = std::fs::read_link(results.path().join("escaping-child/latest")).ok();
    let marker = run.map(|r| format!("{}/d1/server-0", r.display()));
    // Whatever happened, leave nothing behind.
    let left = marker.as_deref().map(marked).unwrap_or_default();
    for pid in &left {
        // SAFETY: processes of the run this test started (they carry its marker).
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    if status.is_none() {
        sigkill(&mut child);
    }
    let status = status.expect("the run hung in teardown");
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        left.is_empty(),
        "the escaped child outlived the run: {left:?}"
    );
}

#[test]
fn a_dead_server_fails_its_deployment_once_and_the_rest_is_not_run() {
    let results = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let child = start(
        "tests/fixtures/run/dies-after-first-point.yaml",
        results.path(),
        state.path(),
    );
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let manifest = crate::common::json(
        &crate::common::latest(results.path(), "dies-after-first-point").join("manifest.json"),
    );
    let deployment = &manifest["deployments"][0];
    assert_eq!(deployment["status"], "failed", "{deployment}");
    let error = deployment["error"].as_str().unwrap();
    assert!(error.contains("server-0 exited (exit code 1)"), "{error}");
    // Told once, as a failure of a running deployment (not "failed to start"), with when
    // and what was kept (issue 29).
    assert!(
        error.contains("exited (exit code 1) during point concurrency=2 (local process group "),
        "{error}"
    );
    assert!(!stderr.contains("failed to start"), "{stderr}");
    assert_eq!(stderr.matches("[d1] failed").count(), 1, "{stderr}");
    assert!(
        stderr.contains("[d1] failed (1 completed point(s) kept, 2 not run): server-0 exited"),
        "{stderr}"
    );
    let points = manifest["points"].as_array().unwrap();
    assert_eq!(points[0]["status"], "completed", "{}", points[0]);
    // The first request of the second point finds the server gone; that point fails, and
    // the two after it are not run.
    assert_eq!(points[1]["status"], "failed", "{}", points[1]);
    for p in &points[2..] {
        assert_eq!(p["status"], "skipped", "{p}");
        let why = p["error"].as_str().unwrap();
        assert!(
            why.contains("not run") && why.contains("exit code 1"),
            "{why}"
        );
    }
}

#[test]
fn a_busy_fixed_port_is_a_preflight_error_naming_its_holder() {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let work = tempfile::tempdir().unwrap();
    let task = work.path().join("busy.yaml");
    let text = std::fs::read_to_string(repo().join("tests/fixtures/run/interrupt.yaml"))
        .unwrap()
        .replace("port: auto", &format!("port: {port}"))
        .replace("../../../data", &repo().join("data").display().to_string());
    std::fs::write(&task, text).unwrap();
    let results = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let out = start(task.to_str().unwrap(), results.path(), state.path())
        .wait_with_output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "port {port} on 127.0.0.1 is already in use by pid {}",
            std::process::id()
        )) && stderr.contains("nothing was started"),
        "{stderr}"
    );
    assert!(
        !results.path().join("interrupt").exists() && !state.path().join("instances").exists(),
        "nothing was started or archived"
    );
    drop(listener);
}

/// On a machine without a Docker engine, `ps` lists what it can (nothing here) and exits 0,
/// with a note that containers were not listed: no engine is not an error.
#[test]
fn ps_without_a_docker_engine_lists_processes_and_notes_the_engine() {
    let state = tempfile::tempdir().unwrap();
    let out = Command::new(bin())
        .args(["ps", "--json"])
        .env("ORCHESTRATE_STATE_DIR", state.path())
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .env_remove("ORCHESTRATE_HOSTS")
        .current_dir(state.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("containers not listed"), "{stderr}");
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows, serde_json::json!([]));
}
