//! Readiness: is a freshly started server able to answer? Declarative probes (HTTP status on a
//! path, or a TCP connect, then optionally one tiny completion) retried under a deadline.
//! Fails at once, with the instance's last log lines, when the instance exits while starting.
//! Owns the probes; does not start or stop anything.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use tokio_util::sync::CancellationToken;

use crate::plan::ReadinessPlan;
use crate::provider::{ExitInfo, Instance};

/// Lines of log shown when a server dies or never becomes ready.
pub const TAIL_LINES: usize = 40;

/// Why a server did not become ready.
#[derive(Debug, thiserror::Error)]
pub enum ReadinessError {
    #[error("{what} exited during startup ({exit}) after {elapsed:.1?}; last log lines:\n{tail}")]
    Exited {
        what: String,
        exit: ExitInfo,
        elapsed: Duration,
        tail: String,
    },
    #[error(
        "{what} was not ready after {timeout:?} (last probe: {last}); raise `readiness.timeout` if the model needs longer to load; last log lines:\n{tail}"
    )]
    Timeout {
        what: String,
        timeout: Duration,
        last: String,
        tail: String,
    },
    #[error("cancelled while waiting for {what} to become ready")]
    Cancelled { what: String },
}

/// The model and endpoint used by the generate probe.
#[derive(Debug, Clone)]
pub struct GenerateProbe {
    pub model: String,
}

/// Wait until `instance` passes `plan`'s probes. Returns the time it took.
pub async fn wait(
    instance: &dyn Instance,
    plan: &ReadinessPlan,
    generate: Option<&GenerateProbe>,
    cancel: &CancellationToken,
) -> Result<Duration, ReadinessError> {
    let started = Instant::now();
    let base = instance.base_url();
    let interval = plan
        .http
        .as_ref()
        .map(|h| h.interval)
        .unwrap_or(Duration::from_millis(500));
    let deadline = started + plan.timeout;
    let mut last;
    let mut attempts = 0u32;
    let mut http_ok = false;
    loop {
        let attempt_timeout = interval
            .max(Duration::from_secs(2))
            .min(Duration::from_secs(10));
        let outcome = if !http_ok {
            match &plan.http {
                Some(http) => get(&base, &http.path, attempt_timeout)
                    .await
                    .map(|(status, _)| {
                        (
                            status == http.status,
                            format!("GET {} -> {status}", http.path),
                        )
                    }),
                None => tcp(&base, attempt_timeout)
                    .await
                    .map(|()| (true, "tcp connect ok".to_string())),
            }
        } else {
            let probe = generate.expect("generate probe only after http passed");
            let body = serde_json::json!({"model": probe.model, "prompt": "Hello", "max_tokens": 1, "stream": false});
            post_json(&base, "/v1/completions", &body, attempt_timeout)
                .await
                .map(|(status, body)| {
                    (
                        status == 200,
                        format!("POST /v1/completions -> {status} {}", truncate(&body, 200)),
                    )
                })
        };
        match outcome {
            Ok((true, _)) if !http_ok && plan.generate && generate.is_some() => {
                http_ok = true;
                continue;
            }
            Ok((true, _)) => return Ok(started.elapsed()),
            Ok((false, text)) => last = text,
            Err(e) => last = e,
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(ReadinessError::Timeout {
                what: instance.describe(),
                timeout: plan.timeout,
                last,
                tail: tail(instance),
            });
        }
        // Poll fast at first (servers that start quickly are seen at once), then every `interval`.
        attempts += 1;
        let ramp = Duration::from_millis(50).saturating_mul(1 << attempts.min(10));
        let pause = interval.min(ramp).min(deadline - now);
        tokio::select! {
            exit = instance.exited() => {
                return Err(ReadinessError::Exited { what: instance.describe(), exit, elapsed: started.elapsed(), tail: tail(instance) });
            }
            _ = cancel.cancelled() => return Err(ReadinessError::Cancelled { what: instance.describe() }),
            _ = tokio::time::sleep(pause) => {}
        }
    }
}

/// One health check after a point: does `path` still answer `status`?
pub async fn healthy(base_url: &str, plan: &ReadinessPlan) -> bool {
    match &plan.http {
        Some(http) => {
            matches!(get(base_url, &http.path, Duration::from_secs(5)).await, Ok((s, _)) if s == http.status)
        }
        None => tcp(base_url, Duration::from_secs(5)).await.is_ok(),
    }
}

fn tail(instance: &dyn Instance) -> String {
    let lines = instance.log().tail(TAIL_LINES);
    if lines.is_empty() {
        "  (no output)".to_string()
    } else {
        lines
            .iter()
            .map(|l| format!("  | {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

fn truncate(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

fn authority(base_url: &str) -> Result<String, String> {
    let rest = base_url
        .strip_prefix("http://")
        .ok_or_else(|| format!("only http:// endpoints are probed, not {base_url}"))?;
    Ok(rest.split('/').next().unwrap_or(rest).to_string())
}

async fn tcp(base_url: &str, timeout: Duration) -> Result<(), String> {
    let addr = authority(base_url)?;
    match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(&addr)).await {
        // A port proxy (Docker's bridge network) accepts at once and closes when nothing
        // listens behind it: a connection closed within a moment is not a listening server.
        Ok(Ok(mut stream)) => {
            use tokio::io::AsyncReadExt;
            let mut byte = [0u8; 1];
            match tokio::time::timeout(Duration::from_millis(200), stream.read(&mut byte)).await {
                Ok(Ok(0)) | Ok(Err(_)) => Err(format!(
                    "connect {addr}: accepted, then closed at once (nothing listens behind it)"
                )),
                _ => Ok(()),
            }
        }
        Ok(Err(e)) => Err(format!("connect {addr}: {e}")),
        Err(_) => Err(format!("connect {addr}: timed out")),
    }
}

/// `GET base_url + path`, returning status and body text.
pub async fn get(base_url: &str, path: &str, timeout: Duration) -> Result<(u16, String), String> {
    request(base_url, hyper::Method::GET, path, None, timeout).await
}

/// `POST base_url + path` with a JSON body, returning status and body text.
pub async fn post_json(
    base_url: &str,
    path: &str,
    body: &serde_json::Value,
    timeout: Duration,
) -> Result<(u16, String), String> {
    request(
        base_url,
        hyper::Method::POST,
        path,
        Some(body.to_string()),
        timeout,
    )
    .await
}

async fn request(
    base_url: &str,
    method: hyper::Method,
    path: &str,
    body: Option<String>,
    timeout: Duration,
) -> Result<(u16, String), String> {
    let addr = authority(base_url)?;
    let work = async {
        let stream = tokio::net::TcpStream::connect(&addr)
            .await
            .map_err(|e| format!("connect {addr}: {e}"))?;
        let io = hyper_util::rt::TokioIo::new(stream);
        let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(|e| format!("http handshake with {addr}: {e}"))?;
        let driver = tokio::spawn(conn);
        let mut builder = hyper::Request::builder()
            .method(method.clone())
            .uri(path)
            .header(hyper::header::HOST, &addr);
        if body.is_some() {
            builder = builder.header(hyper::header::CONTENT_TYPE, "application/json");
        }
        let req = builder
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| e.to_string())?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| format!("{method} {path}: {e}"))?;
        let status = resp.status().as_u16();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("{method} {path}: reading body: {e}"))?
            .to_bytes();
        driver.abort();
        Ok((status, String::from_utf8_lossy(&bytes).to_string()))
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(result) => result,
        Err(_) => Err(format!("{method} {path}: no answer within {timeout:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deploy::Resources;
    use crate::plan::HttpProbePlan;
    use crate::provider::local::LocalProvider;
    use crate::provider::{LaunchRequest, LogSink, Provider};
    use crate::shutdown::Shutdown;

    fn plan(timeout: Duration) -> ReadinessPlan {
        ReadinessPlan {
            http: Some(HttpProbePlan {
                path: "/health".into(),
                status: 200,
                interval: Duration::from_millis(100),
            }),
            generate: false,
            timeout,
        }
    }

    async fn launch(commands: &[&str], port: u16) -> Box<dyn Instance> {
        LocalProvider::new(Shutdown::new())
            .with_grace(Duration::from_millis(200))
            .launch(LaunchRequest {
                run_id: "r".into(),
                task: "t".into(),
                deployment: "d1".into(),
                role: "server".into(),
                index: 0,
                image: None,
                commands: commands.iter().map(|s| s.to_string()).collect(),
                env: vec![],
                port,
                volumes: vec![],
                resources: Resources::default(),
                log: LogSink::memory(),
                container: Default::default(),
            })
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn an_exiting_server_fails_at_once_with_its_log_tail() {
        let instance = launch(
            &[
                "echo loading weights",
                "echo 'CUDA out of memory' >&2",
                "exit 7",
            ],
            9,
        )
        .await;
        let started = Instant::now();
        let err = wait(
            instance.as_ref(),
            &plan(Duration::from_secs(60)),
            None,
            &CancellationToken::new(),
        )
        .await
        .unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "took {:?}",
            started.elapsed()
        );
        let text = err.to_string();
        assert!(
            text.contains("exit code 7") && text.contains("CUDA out of memory"),
            "{text}"
        );
        instance.stop().await.unwrap();
    }

    #[tokio::test]
    async fn a_server_that_never_answers_fails_at_the_deadline() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let instance = launch(&["sleep 30"], port).await;
        let started = Instant::now();
        let err = wait(
            instance.as_ref(),
            &plan(Duration::from_millis(700)),
            None,
            &CancellationToken::new(),
        )
        .await
        .unwrap_err();
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(700) && took < Duration::from_secs(4),
            "took {took:?}"
        );
        assert!(matches!(err, ReadinessError::Timeout { .. }), "{err}");
        assert!(err.to_string().contains("readiness.timeout"));
        instance.stop().await.unwrap();
    }

    #[tokio::test]
    async fn cancellation_stops_the_wait() {
        let instance = launch(&["sleep 30"], 9).await;
        let cancel = CancellationToken::new();
        let c = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            c.cancel();
        });
        let err = wait(
            instance.as_ref(),
            &plan(Duration::from_secs(60)),
            None,
            &cancel,
        )
        .await
        .unwrap_err();
        assert!(matches!(err, ReadinessError::Cancelled { .. }));
        instance.stop().await.unwrap();
    }

    #[tokio::test]
    async fn tcp_probe_tells_a_port_proxy_from_a_listening_server() {
        // Accepts and closes at once, as docker-proxy does when nothing listens behind it.
        let proxy = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy_url = format!("http://{}", proxy.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((stream, _)) = proxy.accept().await {
                drop(stream);
            }
        });
        let err = tcp(&proxy_url, Duration::from_secs(2)).await.unwrap_err();
        assert!(err.contains("closed at once"), "{err}");
        // Accepts and keeps the connection, as a server does.
        let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server_url = format!("http://{}", server.local_addr().unwrap());
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = server.accept().await {
                held.push(stream);
            }
        });
        tcp(&server_url, Duration::from_secs(2)).await.unwrap();
    }
}
