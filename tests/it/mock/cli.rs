//! `orchestrate mock-server` as a process: the listening line, SIGTERM, crash exit code,
//! bad flags, and `--simulate`.

use std::process::Command;

use serde_json::json;

use super::client::*;

#[tokio::test]
async fn serves_until_sigterm_then_exits_0() {
    let (mut child, addr) = cli_spawn(&["--preset", "fixed", "--itl-ms", "1"]);
    let (status, _) = call(addr, "GET", "/health", None).await;
    assert_eq!(status, 200);
    let (status, v) = call_json(
        addr,
        "/v1/completions",
        &json!({"prompt": "x", "max_tokens": 3}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    // SAFETY: plain kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert_eq!(cli_wait(&mut child), 0);
}

#[tokio::test]
async fn crash_after_exits_1() {
    let (mut child, addr) =
        cli_spawn(&["--preset", "fixed", "--itl-ms", "1", "--crash-after", "1"]);
    let (status, _) = call_json(
        addr,
        "/v1/completions",
        &json!({"prompt": "x", "max_tokens": 1}),
    )
    .await;
    assert_eq!(status, 200);
    let mut s = connect(addr).await;
    let _ = s
        .send_request(build(
            addr,
            "POST",
            "/v1/completions",
            Some(&json!({"prompt": "x"})),
        ))
        .await;
    assert_eq!(cli_wait(&mut child), 1);
}

#[test]
fn bad_flags_exit_2_with_a_message() {
    let out = Command::new(crate::common::bin())
        .args(["mock-server", "--preset", "h100"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown preset `h100`") && err.contains("h20-vllm-tp16"),
        "{err}"
    );
    let out = Command::new(crate::common::bin())
        .args(["mock-server", "--decode-ms", "1:x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn simulate_prints_the_preset_table() {
    let out = Command::new(crate::common::bin())
        .args([
            "mock-server",
            "--preset",
            "h20-vllm-tp16",
            "--simulate",
            "1000:1000",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let table = String::from_utf8(out.stdout).unwrap();
    assert_eq!(table.lines().count(), 2 + 8, "{table}");
    assert!(
        table.lines().nth(2).unwrap().starts_with("| 1 |"),
        "{table}"
    );
}
