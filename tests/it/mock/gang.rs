//! `orchestrate mock-server --nnodes 2` as a gang of two processes: rank 0 is unhealthy until
//! rank 1 joined, and either rank stops with exit code 1 when the other goes away.

use std::time::{Duration, Instant};

use serde_json::json;

use super::client::*;

/// Poll `/health` until it answers `want` (at most 10 s); the last status and body.
async fn health_until(addr: std::net::SocketAddr, want: u16) -> (u16, String) {
    let t0 = Instant::now();
    loop {
        let (status, body) = call(addr, "GET", "/health", None).await;
        let body = String::from_utf8_lossy(&body).into_owned();
        if status == want || t0.elapsed() > Duration::from_secs(10) {
            return (status, body);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn rank0() -> (Proc, std::net::SocketAddr, String) {
    let (p, lines) = Proc::mock(
        "rank 0",
        &[
            "--port",
            "0",
            "--preset",
            "fixed",
            "--itl-ms",
            "2",
            "--nnodes",
            "2",
            "--node-rank",
            "0",
            "--master-addr",
            "127.0.0.1:0",
        ],
        2,
    );
    let http = addr_after(&lines[0], "listening on http://");
    let master = addr_after(&lines[1], "gang master on ");
    assert!(lines[1].contains("waiting for 1 more ranks"), "{lines:?}");
    (p, http, format!("127.0.0.1:{}", master.port()))
}

#[tokio::test]
async fn rank0_is_unhealthy_until_rank1_joins_and_stops_when_it_goes() {
    let (mut r0, http, master) = rank0();
    let (status, body) = call(http, "GET", "/health", None).await;
    assert_eq!(status, 503);
    assert!(
        body.starts_with(b"waiting for the gang: 1 of 2"),
        "{body:?}"
    );
    let (status, v) = call_json(http, "/v1/completions", &json!({"prompt": "x"})).await;
    assert_eq!(status, 503, "{v}");
    let (mut r1, lines) = Proc::mock(
        "rank 1",
        &[
            "--nnodes",
            "2",
            "--node-rank",
            "1",
            "--master-addr",
            &master,
            "--headless",
        ],
        1,
    );
    assert!(
        lines[0].starts_with("rank 1 of 2 joined rank 0"),
        "{lines:?}"
    );
    assert_eq!(health_until(http, 200).await.0, 200);
    let (status, v) = call_json(
        http,
        "/v1/completions",
        &json!({"prompt": "x", "max_tokens": 2}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let (_, info) = call(http, "GET", "/server_info", None).await;
    let info: serde_json::Value = serde_json::from_slice(&info).unwrap();
    assert_eq!(info["nnodes"], 2);
    // NCCL-style: a peer that dies takes the instance down.
    r1.child.kill().unwrap();
    let _ = r1.child.wait();
    assert_eq!(r0.wait_exit(Duration::from_secs(10)), 1);
    let err = r0.stderr_text();
    assert!(
        err.contains("rank 1 of 2") && err.contains("went away"),
        "{err}"
    );
}

#[tokio::test]
async fn rank1_stops_when_rank0_goes_and_sglang_naming_works() {
    let (mut r0, http, master) = rank0();
    // SGLang's spelling of the master address; no --headless.
    let (mut r1, _) = Proc::mock(
        "rank 1",
        &[
            "--nnodes",
            "2",
            "--node-rank",
            "1",
            "--dist-init-addr",
            &master,
        ],
        1,
    );
    assert_eq!(health_until(http, 200).await.0, 200);
    r0.child.kill().unwrap();
    let _ = r0.child.wait();
    assert_eq!(r1.wait_exit(Duration::from_secs(10)), 1);
    let err = r1.stderr_text();
    assert!(
        err.contains("rank 0 at") && err.contains("went away"),
        "{err}"
    );
}

#[test]
fn bad_gang_flags_exit_2() {
    let cases: [(&[&str], &str); 4] = [
        (&["--nnodes", "2"], "needs --master-addr"),
        (
            &["--nnodes", "2", "--node-rank", "2", "--master-addr", "h"],
            "below --nnodes 2",
        ),
        (
            &["--nnodes", "2", "--master-addr", "h", "--headless"],
            "--headless is for ranks > 0",
        ),
        (&["--disaggregation", "both"], "none, prefill or decode"),
    ];
    for (args, needle) in cases {
        let out = std::process::Command::new(crate::common::bin())
            .arg("mock-server")
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}
