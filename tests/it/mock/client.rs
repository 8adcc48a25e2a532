//! The test client of the mock server tests: start `serve` on port 0 or the binary, send
//! requests with a minimal hyper client, split SSE streams into timed events, read metrics.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use orchestrate_mock::{self as mock, Curve, MockConfig, MockError, Preset};
use serde_json::Value;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub(crate) struct Server {
    pub addr: SocketAddr,
    pub cancel: CancellationToken,
    pub task: JoinHandle<Result<(), MockError>>,
}

impl Server {
    pub(crate) async fn start(config: MockConfig) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let cancel = CancellationToken::new();
        let task = tokio::spawn(mock::serve(config, listener, cancel.clone()));
        Self { addr, cancel, task }
    }

    pub(crate) async fn stop(self) -> Result<(), MockError> {
        self.cancel.cancel();
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("serve stops within 10 s")
            .unwrap()
    }
}

/// A fast fixed-step server: `step_ms` per step whatever the batch, no prefill cost.
pub(crate) fn fast(step_ms: f64) -> MockConfig {
    let mut c = MockConfig::new(Preset::Fixed);
    c.latency.decode = Curve::constant(step_ms);
    c
}

pub(crate) type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

pub(crate) async fn connect(addr: SocketAddr) -> Sender {
    let stream = TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender
}

pub(crate) fn build(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Request<Full<Bytes>> {
    let body = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
    Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .header("x-request-id", "client-42")
        .body(Full::new(body))
        .unwrap()
}

/// One request; the whole body.
pub(crate) async fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> (u16, Bytes) {
    let mut s = connect(addr).await;
    let resp = s
        .send_request(build(addr, method, path, body))
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.into_body().collect().await.unwrap().to_bytes())
}

pub(crate) async fn call_json(addr: SocketAddr, path: &str, body: &Value) -> (u16, Value) {
    let (status, bytes) = call(addr, "POST", path, Some(body)).await;
    (status, serde_json::from_slice(&bytes).unwrap())
}

/// An SSE event as the client saw it: arrival time and payload (`None` for `[DONE]`).
#[derive(Debug)]
pub(crate) struct Event {
    pub at: Instant,
    pub data: Option<Value>,
}

/// A streaming request: (sent time, status, events in order).
pub(crate) async fn stream(
    addr: SocketAddr,
    path: &'static str,
    body: Value,
) -> (Instant, u16, Vec<Event>) {
    let mut s = connect(addr).await;
    let sent = Instant::now();
    let resp = s
        .send_request(build(addr, "POST", path, Some(&body)))
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    let mut buf = Vec::new();
    let mut events = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.unwrap();
        let at = Instant::now();
        let Some(data) = frame.data_ref() else {
            continue;
        };
        buf.extend_from_slice(data);
        while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = buf.drain(..end + 2).collect();
            let text = std::str::from_utf8(&event).unwrap().trim_end();
            let payload = text.strip_prefix("data: ").expect("SSE data line");
            let data = (payload != "[DONE]").then(|| serde_json::from_str(payload).unwrap());
            events.push(Event { at, data });
        }
    }
    assert!(buf.is_empty(), "trailing bytes: {buf:?}");
    (sent, status, events)
}

pub(crate) fn usage_of(events: &[Event]) -> Option<&Value> {
    events
        .iter()
        .filter_map(|e| e.data.as_ref())
        .find(|d| d["choices"].as_array().is_some_and(Vec::is_empty))
        .map(|d| &d["usage"])
}

/// Token-bearing events (non-empty choices with text or content).
pub(crate) fn token_events(events: &[Event]) -> Vec<&Event> {
    events
        .iter()
        .filter(|e| {
            e.data.as_ref().is_some_and(|d| {
                let c = &d["choices"][0];
                c["text"].as_str().is_some_and(|t| !t.is_empty())
                    || c["delta"]["content"]
                        .as_str()
                        .is_some_and(|t| !t.is_empty())
            })
        })
        .collect()
}

/// Output tokens (words) in each token-bearing event. A server that falls behind (a busy
/// machine) coalesces tokens into fewer chunks, so tests check sums and the rules of
/// chunking rather than exact chunk counts.
pub(crate) fn chunk_words(events: &[Event]) -> Vec<usize> {
    token_events(events)
        .iter()
        .map(|e| {
            let c = &e.data.as_ref().unwrap()["choices"][0];
            let t = c["text"]
                .as_str()
                .or(c["delta"]["content"].as_str())
                .unwrap();
            t.split_whitespace().count()
        })
        .collect()
}

pub(crate) fn text_of(events: &[Event]) -> String {
    token_events(events)
        .iter()
        .map(|e| {
            let c = &e.data.as_ref().unwrap()["choices"][0];
            c["text"]
                .as_str()
                .or(c["delta"]["content"].as_str())
                .unwrap()
                .to_owned()
        })
        .collect()
}

pub(crate) fn metric(text: &str, name_and_labels: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name_and_labels) && l[name_and_labels.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name_and_labels} in\n{text}"))
}

/// Start `orchestrate mock-server --port 0 ARGS`; the process and its address.
pub(crate) fn cli_spawn(args: &[&str]) -> (std::process::Child, SocketAddr) {
    let mut child = Command::new(crate::common::bin())
        .arg("mock-server")
        .args(["--port", "0"])
        .args(args)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    // Keep reading so the server never writes into a closed pipe.
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    let addr = line
        .trim()
        .strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("first stderr line: {line:?}"))
        .parse()
        .unwrap();
    (child, addr)
}

/// Wait (at most 10 s) for the process to exit; its exit code.
pub(crate) fn cli_wait(child: &mut std::process::Child) -> i32 {
    let t0 = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code().unwrap_or(-1);
        }
        if t0.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!("mock-server did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A child process killed (and reaped) when dropped, with its stderr collected for messages.
pub(crate) struct Proc {
    pub name: String,
    pub child: std::process::Child,
    pub stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Proc {
    /// Spawn `cmd` with stderr piped; the first `lines` stderr lines are returned (waiting at
    /// most 30 s for them), the rest is collected in `stderr`.
    pub(crate) fn spawn(name: &str, mut cmd: Command, lines: usize) -> (Self, Vec<String>) {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        let mut reader = BufReader::new(child.stderr.take().unwrap());
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = stderr.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            let mut n = 0;
            while reader.read_line(&mut line).is_ok_and(|k| k > 0) {
                if n < lines {
                    let _ = tx.send(line.trim_end().to_owned());
                    n += 1;
                }
                sink.lock().unwrap().push_str(&line);
                line.clear();
            }
        });
        let mut proc = Self {
            name: name.to_owned(),
            child,
            stderr,
        };
        let mut first = Vec::new();
        for _ in 0..lines {
            match rx.recv_timeout(Duration::from_secs(30)) {
                Ok(l) => first.push(l),
                Err(_) => {
                    let _ = proc.child.kill();
                    panic!(
                        "{name}: no line {} on stderr; got {first:?}",
                        first.len() + 1
                    );
                }
            }
        }
        (proc, first)
    }

    /// `orchestrate mock-server ARGS`, with the first `lines` stderr lines.
    pub(crate) fn mock(name: &str, args: &[&str], lines: usize) -> (Self, Vec<String>) {
        let mut cmd = Command::new(crate::common::bin());
        cmd.arg("mock-server").args(args);
        Self::spawn(name, cmd, lines)
    }

    /// Wait at most `limit` for the exit; the exit code (panics with stderr when it runs on).
    pub(crate) fn wait_exit(&mut self, limit: Duration) -> i32 {
        let t0 = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code().unwrap_or(-1);
            }
            assert!(
                t0.elapsed() < limit,
                "{} still runs after {limit:?}; stderr:\n{}",
                self.name,
                self.stderr_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(crate) fn stderr_text(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The address after `prefix` in a stderr line (`listening on http://ADDR`).
pub(crate) fn addr_after(line: &str, prefix: &str) -> SocketAddr {
    line.strip_prefix(prefix)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("expected `{prefix}ADDR`, got {line:?}"))
}
