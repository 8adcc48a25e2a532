//! Servers that go silent or never stop talking (issue 14, items 4 and 5): a raw TCP server
//! written here for each shape (never accepting, accepting and never answering, half a head,
//! a head and no body, half a body, a stream that stops mid-way, one endless SSE line), with
//! `orchestrate bench` ending in bounded time and memory; and `orchestrate run` against a mock
//! server stopped with SIGSTOP mid-point, which fails the point and its deployment once.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{bin, mock_task, repo, run_command};

/// How a raw server misbehaves after it read a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// Listens, never accepts: the kernel completes the handshake and queues the request.
    NeverAccepts,
    /// Accepts, reads the request, sends nothing.
    Silent,
    /// The status line and a header, never the blank line.
    PartialHead,
    /// A whole 200 head (chunked), no body.
    HeadNoBody,
    /// `content-length: 4000`, then 300 bytes of it.
    HalfBody,
    /// Three output chunks of an SSE stream, then nothing (a server stopped mid-way).
    StopsMidStream,
    /// A 200 SSE head, then one `data:` line that never ends, as fast as the socket takes it.
    EndlessLine,
    /// A 500 head, then an error body that never ends.
    EndlessErrorBody,
}

/// A raw server on port 0; its threads end when it drops.
struct Raw {
    addr: String,
    stop: Arc<AtomicBool>,
}

impl Drop for Raw {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop.
        let _ = TcpStream::connect(&self.addr);
    }
}

fn raw(shape: Shape) -> Raw {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    std::thread::spawn(move || {
        if shape == Shape::NeverAccepts {
            while !flag.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(20));
            }
            drop(listener);
            return;
        }
        for conn in listener.incoming() {
            if flag.load(Ordering::SeqCst) {
                break;
            }
            let Ok(conn) = conn else { continue };
            let flag = flag.clone();
            std::thread::spawn(move || answer(conn, shape, &flag));
        }
    });
    Raw { addr, stop }
}

/// Read one request (head and `content-length` body).
fn read_request(conn: &mut TcpStream) -> bool {
    let mut buf = Vec::new();
    let mut piece = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap_or(0));
            if buf.len() >= end + 4 + len {
                return true;
            }
        }
        match conn.read(&mut piece) {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&piece[..n]),
        }
    }
}

fn chunk(data: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out
}

const SSE_HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";

fn answer(mut conn: TcpStream, shape: Shape, stop: &AtomicBool) {
    if !read_request(&mut conn) {
        return;
    }
    let sent = match shape {
        Shape::NeverAccepts | Shape::Silent => Ok(()),
        Shape::PartialHead => {
            conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n")
        }
        Shape::HeadNoBody => conn.write_all(SSE_HEAD),
        Shape::HalfBody => conn
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 4000\r\n\r\n")
            .and_then(|()| {
                conn.write_all(&b"data: {\"choices\":[{\"text\":\"a\"}]}\n\n".repeat(8))
            }),
        Shape::StopsMidStream => conn.write_all(SSE_HEAD).and_then(|()| {
            (0..3).try_for_each(|_| {
                conn.write_all(&chunk(b"data: {\"choices\":[{\"text\":\"a\"}]}\n\n"))
            })
        }),
        Shape::EndlessLine | Shape::EndlessErrorBody => {
            let endless = if shape == Shape::EndlessLine {
                conn.write_all(SSE_HEAD)
                    .and_then(|()| conn.write_all(&chunk(b"data: {\"choices\":[{\"text\":\"")))
            } else {
                conn.write_all(
                    b"HTTP/1.1 500 Internal Server Error\r\ntransfer-encoding: chunked\r\n\r\n",
                )
            };
            let piece = chunk(&[b'a'; 64 * 1024]);
            // Until the client hangs up (or 1 GiB, a bound for a broken client).
            if endless.is_ok() {
                for _ in 0..16 * 1024 {
                    if stop.load(Ordering::SeqCst) || conn.write_all(&piece).is_err() {
                        break;
                    }
                }
            }
            return;
        }
    };
    if sent.is_err() {
        return;
    }
    // Hold the connection open, silent, until the test ends.
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn bench_command(addr: &str, dir: &Path, extra: &[&str]) -> Command {
    let mut cmd = Command::new(bin());
    cmd.args(["bench", "--base-url", &format!("http://{addr}")])
        .args(["--model", "m", "--tokenizer"])
        .arg(repo().join("data/tokenizer/tokenizer.json"))
        .args(["--random-input-len", "16", "--random-output-len", "8"])
        .args([
            "--num-prompts",
            "3",
            "--max-concurrency",
            "3",
            "--disable-tqdm",
        ])
        .args([
            "--save-result",
            "--result-filename",
            "r.json",
            "--result-dir",
        ])
        .arg(dir)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn records(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("r.requests.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Wait for `child` for at most `limit`; kill it and fail when it does not end. While it
/// runs, its peak resident memory (VmHWM, KiB) is read from /proc; returns the output and
/// that peak.
fn wait_bounded(mut child: std::process::Child, limit: Duration) -> (std::process::Output, u64) {
    let started = Instant::now();
    let status = format!("/proc/{}/status", child.id());
    let mut peak_kib = 0;
    loop {
        if let Ok(text) = std::fs::read_to_string(&status)
            && let Some(kib) = text
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        {
            peak_kib = peak_kib.max(kib);
        }
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "bench did not end within {limit:?}:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    (child.wait_with_output().unwrap(), peak_kib)
}

#[test]
fn bench_ends_on_every_kind_of_silent_server_with_its_requests_stalled() {
    for shape in [
        Shape::NeverAccepts,
        Shape::Silent,
        Shape::PartialHead,
        Shape::HeadNoBody,
        Shape::HalfBody,
        Shape::StopsMidStream,
    ] {
        let server = raw(shape);
        let dir = tempfile::tempdir().unwrap();
        let started = Instant::now();
        let child = bench_command(
            &server.addr,
            dir.path(),
            &["--stall-timeout", "1s", "--no-server-metrics"],
        )
        .spawn()
        .unwrap();
        let (out, _) = wait_bounded(child, Duration::from_secs(30));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{shape:?}: {stderr}");
        assert!(
            stderr.contains("no request completed"),
            "{shape:?}: {stderr}"
        );
        let records = records(dir.path());
        assert_eq!(records.len(), 3, "{shape:?}");
        for r in &records {
            assert_eq!(r["outcome"]["status"], "stalled", "{shape:?}: {r}");
            assert_eq!(r["outcome"]["silent_ms"], 1000, "{shape:?}: {r}");
        }
        if shape == Shape::StopsMidStream {
            // What came before the silence is kept.
            assert!(
                records
                    .iter()
                    .all(|r| r["chunks"].as_array().unwrap().len() == 3)
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{shape:?}: took {:?}",
            started.elapsed()
        );
    }
}

#[test]
fn one_endless_sse_line_fails_its_request_in_bounded_memory() {
    let server = raw(Shape::EndlessLine);
    let dir = tempfile::tempdir().unwrap();
    // Server metrics stay on: the /metrics scrape gets the endless answer too.
    let child = bench_command(&server.addr, dir.path(), &["--request-timeout", "60s"])
        .spawn()
        .unwrap();
    let (out, peak_kib) = wait_bounded(child, Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    for r in &records(dir.path()) {
        assert_eq!(r["outcome"]["status"], "stream_error", "{r}");
        let message = r["outcome"]["message"].as_str().unwrap();
        assert!(message.contains("longer than 1 MiB"), "{message}");
    }
    assert!(
        peak_kib > 0 && peak_kib < 256 * 1024,
        "peak RSS {peak_kib} KiB (bound 256 MiB)"
    );
}

#[test]
fn an_endless_error_body_ends_its_request_at_the_cap() {
    let server = raw(Shape::EndlessErrorBody);
    let dir = tempfile::tempdir().unwrap();
    let child = bench_command(&server.addr, dir.path(), &["--no-server-metrics"])
        .spawn()
        .unwrap();
    let (out, peak_kib) = wait_bounded(child, Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let records = records(dir.path());
    assert_eq!(records.len(), 3);
    for r in &records {
        assert_eq!(r["outcome"]["status"], "http_status", "{r}");
        assert_eq!(r["outcome"]["code"], 500, "{r}");
        // The start of the body is kept, 512 bytes at most.
        let body = r["outcome"]["body"].as_str().unwrap();
        assert!(body.starts_with("aaaa") && body.len() <= 512, "{body}");
    }
    assert!(peak_kib < 256 * 1024, "peak RSS {peak_kib} KiB");
}

/// A process group stopped by the test is continued and killed when the test ends, whatever
/// happened.
struct Stopped(Vec<i32>);

impl Drop for Stopped {
    fn drop(&mut self) {
        for &pgid in &self.0 {
            // SAFETY: signals to process groups this test stopped.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
                libc::kill(-pgid, libc::SIGCONT);
            }
        }
    }
}

#[test]
fn a_server_stopped_mid_point_fails_its_deployment_once_and_the_rest_are_not_run() {
    let work = tempfile::tempdir().unwrap();
    let task = mock_task(
        work.path(),
        "silent",
        20,
        "  dataset: {kind: random, input_len: 16, output_len: 10}\n  concurrency: 2\n  num_prompts: 6\n  stall_timeout: 2s\n  matrix:\n    output_len: [3000, 10, 20]\n",
    );
    let results = work.path().join("results");
    let mut child = run_command(&task, &results, &work.path().join("state"))
        .spawn()
        .unwrap();
    let started = Instant::now();
    // Once the first point runs, stop the server's whole process group.
    let (manifest_path, stopped) = loop {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the first point never started"
        );
        if let Ok(link) = std::fs::read_link(results.join("silent/latest")) {
            let path = results.join("silent").join(link).join("manifest.json");
            if let Ok(text) = std::fs::read_to_string(&path) {
                let m: Value = serde_json::from_str(&text).unwrap();
                if m["points"][0]["status"] == "running" {
                    let groups: Vec<i32> = m["deployments"][0]["instances"]
                        .as_object()
                        .unwrap()
                        .values()
                        .filter_map(|f| f["pgid"].as_i64())
                        .map(|g| g as i32)
                        .collect();
                    assert!(!groups.is_empty(), "no process group recorded: {m}");
                    break (path, Stopped(groups));
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    std::thread::sleep(Duration::from_millis(500));
    for &pgid in &stopped.0 {
        // SAFETY: stopping the server group the run started for this test.
        unsafe { libc::kill(-pgid, libc::SIGSTOP) };
    }
    let stopped_at = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if stopped_at.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("the run did not end within 60 s of its server going silent");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let took = stopped_at.elapsed();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    drop(stopped);
    assert_eq!(status.code(), Some(1), "{stderr}");
    // 2 s of stall, a 5 s health check, teardown: far less than 3 points x 3000 tokens x 20 ms.
    assert!(took < Duration::from_secs(40), "took {took:?}");
    let m: Value = serde_json::from_str(&std::fs::read_to_string(&manifest_path).unwrap()).unwrap();
    let d = &m["deployments"][0];
    assert_eq!(d["status"], "failed", "{d}");
    assert!(d["error"].as_str().unwrap().contains("went silent"), "{d}");
    let p0 = &m["points"][0];
    assert_eq!(p0["status"], "failed", "{p0}");
    assert!(
        p0["error"].as_str().unwrap().contains("went silent"),
        "{p0}"
    );
    for p in &m["points"].as_array().unwrap()[1..] {
        assert_eq!(p["status"], "skipped", "{p}");
        let error = p["error"].as_str().unwrap();
        assert!(
            error.starts_with("not run:") && error.contains("went silent"),
            "{p}"
        );
    }
    // The stalled requests are recorded as such.
    let dir = manifest_path
        .parent()
        .unwrap()
        .join("points")
        .join(p0["dir"].as_str().unwrap());
    let lines = std::fs::read_to_string(dir.join("requests.jsonl")).unwrap();
    assert!(
        lines
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .any(|r| r["outcome"]["status"] == "stalled"),
        "{lines}"
    );
}

/// `benchmark.stall_timeout` in a task file: a duration or `off`, shown by `plan` when it is
/// not the default; zero or garbage is bad input located at the value.
/// A server that dies while its process lives on (here a shell that sleeps after the server;
/// on Slurm, a step's `srun` in KillWait): the next point gets no answer, the health check
/// fails, and the deployment fails once; the points after it are not run.
#[test]
fn a_server_dead_behind_a_live_process_fails_its_deployment_after_one_point() {
    let work = tempfile::tempdir().unwrap();
    let task = mock_task(
        work.path(),
        "down",
        20,
        "  dataset: {kind: random, input_len: 16, output_len: 50}\n  num_prompts: 6\n  matrix:\n    concurrency: [2, 1, 3]\n",
    );
    let text = std::fs::read_to_string(&task)
        .unwrap()
        .replace("--itl-ms 20\"\n", "--itl-ms 20 || true\"\n  - sleep 120\n");
    assert!(text.contains("sleep 120"), "{text}");
    std::fs::write(&task, text).unwrap();
    let results = work.path().join("results");
    let child = run_command(&task, &results, &work.path().join("state"))
        .spawn()
        .unwrap();
    let started = Instant::now();
    // Once the first point has completed, kill the server itself (not its shell).
    let manifest_path = loop {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the first point never completed"
        );
        if let Ok(link) = std::fs::read_link(results.join("down/latest")) {
            let path = results.join("down").join(link).join("manifest.json");
            if let Ok(m) = std::fs::read_to_string(&path)
                .map_err(|_| ())
                .and_then(|t| serde_json::from_str::<Value>(&t).map_err(|_| ()))
                && m["points"][0]["status"] == "completed"
            {
                let port = m["deployments"][0]["instances"]["server-0"]["port"]
                    .as_u64()
                    .unwrap_or_else(|| panic!("no port recorded: {m}"));
                let killed = Command::new("pkill")
                    .args([
                        "-KILL",
                        "-f",
                        &format!("^[^ ]*orchestrate mock-server --port {port} "),
                    ])
                    .status()
                    .unwrap();
                assert!(killed.success(), "no mock-server on port {port}");
                break path;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = wait_bounded(child, Duration::from_secs(60)).0;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let m: Value = serde_json::from_str(&std::fs::read_to_string(&manifest_path).unwrap()).unwrap();
    let d = &m["deployments"][0];
    assert_eq!(d["status"], "failed", "{d}");
    assert!(
        d["error"]
            .as_str()
            .unwrap()
            .contains("failed its health check after a point in which no request completed"),
        "{d}"
    );
    assert_eq!(m["points"][0]["status"], "completed", "{m}");
    assert_eq!(m["points"][1]["status"], "failed", "{m}");
    let p2 = &m["points"][2];
    assert_eq!(p2["status"], "skipped", "{p2}");
    assert!(
        p2["error"]
            .as_str()
            .unwrap()
            .starts_with("not run: deployment")
            && p2["error"].as_str().unwrap().contains("was down"),
        "{p2}"
    );
}

#[test]
fn the_stall_timeout_of_a_task_file_is_checked_and_planned() {
    let work = tempfile::tempdir().unwrap();
    let plan = |value: &str| {
        let task = mock_task(
            work.path(),
            "stall",
            1,
            &format!(
                "  dataset: {{kind: random, input_len: 8, output_len: 8}}\n  num_prompts: 2\n  stall_timeout: {value}\n"
            ),
        );
        let out = Command::new(bin()).arg("plan").arg(&task).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stdout, stderr) = plan("off");
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("stall timeout off"), "{stdout}");
    let (code, stdout, stderr) = plan("90s");
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.contains("stall timeout 1m30s") || stdout.contains("stall timeout 90s"),
        "{stdout}"
    );
    let (_, stdout, _) = plan("5m");
    assert!(
        !stdout.contains("stall timeout"),
        "the default is not shown: {stdout}"
    );
    // The value sits on line 13, after `  stall_timeout: `.
    let (code, _, stderr) = plan("0s");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("stall.yaml:13:18:"), "{stderr}");
    assert!(
        stderr.contains("must be longer than 0s; write `off`"),
        "{stderr}"
    );
    let (code, _, stderr) = plan("soon");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("stall.yaml:13:18:"), "{stderr}");
    assert!(stderr.contains("or `off`"), "{stderr}");
}
