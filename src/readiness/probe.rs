//! One probe of a server: the declared HTTP or TCP probe, or one tiny completion; the
//! health check after a point; and the pause between failed probes.

use std::time::Duration;

use super::excerpt::truncate;
use crate::fetch::{self, FetchError, Origin};
use crate::plan::ReadinessPlan;
use crate::units::error_chain;

/// Why one probe failed (kept as the last probe's text when the deadline passes).
#[derive(Debug, thiserror::Error)]
enum ProbeError {
    #[error(transparent)]
    Fetch(#[from] FetchError),
    #[error("connect {addr}: accepted, then closed at once (nothing listens behind it)")]
    ClosedAtOnce { addr: String },
    #[error("connect {addr}: timed out")]
    ConnectTimedOut { addr: String },
}

/// The model and endpoint used by the generate probe.
#[derive(Debug, Clone)]
pub struct GenerateProbe {
    pub model: String,
}

/// The pause after `attempts` failed probes: 20 ms, doubling, at most `interval` (a server
/// that starts in tens of milliseconds is seen within tens of milliseconds).
pub(super) fn backoff(attempts: u32, interval: Duration) -> Duration {
    interval.min(Duration::from_millis(10).saturating_mul(1 << attempts.min(12)))
}

/// One tiny completion (`max_tokens: 1`); Ok carries whether it answered 200 and what it saw.
/// Without a model (the task names none) the server is asked which it serves instead: it
/// passes when `/v1/models` lists one.
pub(super) async fn generate_once(
    origin: &Origin,
    probe: &GenerateProbe,
    timeout: Duration,
) -> Result<(bool, String), String> {
    if probe.model.is_empty() {
        return match served_model(origin, timeout).await {
            Ok(id) => Ok((true, format!("GET /v1/models -> {id}"))),
            Err(ModelsError::Answer(text)) => Ok((false, text)),
            Err(ModelsError::Fetch(e)) => Err(e),
        };
    }
    let body = serde_json::json!({"model": probe.model, "prompt": "Hello", "max_tokens": 1, "stream": false});
    fetch::post_json(origin, "/v1/completions", &body, timeout)
        .await
        .map(|reply| {
            (
                reply.status == 200,
                format!(
                    "POST /v1/completions -> {} {}",
                    reply.status,
                    truncate(&reply.text_lossy(), 200)
                ),
            )
        })
        .map_err(|e| error_chain(&ProbeError::from(e)))
}

/// Why the server named no model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelsError {
    /// It answered, but not with a list naming a model (what it said, shortened).
    Answer(String),
    /// It did not answer.
    Fetch(String),
}

impl std::fmt::Display for ModelsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Answer(text) | Self::Fetch(text) => f.write_str(text),
        }
    }
}

/// The model the server serves: the first `data[].id` of its OpenAI `GET /v1/models`.
pub async fn served_model(origin: &Origin, timeout: Duration) -> Result<String, ModelsError> {
    let reply = fetch::get(origin, "/v1/models", timeout)
        .await
        .map_err(|e| ModelsError::Fetch(error_chain(&ProbeError::from(e))))?;
    let text = reply.text_lossy();
    let said = || {
        format!(
            "GET /v1/models -> {} {}",
            reply.status,
            truncate(&text, 200)
        )
    };
    if reply.status != 200 {
        return Err(ModelsError::Answer(said()));
    }
    first_model_id(&text).ok_or_else(|| ModelsError::Answer(said()))
}

/// The first model id of a `/v1/models` answer (`{"object": "list", "data": [{"id": ..}]}`).
fn first_model_id(body: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(body).ok()?;
    value
        .get("data")?
        .as_array()?
        .iter()
        .find_map(|m| m.get("id")?.as_str().filter(|id| !id.is_empty()))
        .map(str::to_string)
}

/// The declared probe, once: `GET path` expecting `status`, or a TCP connect. Ok carries
/// whether it passed and what it saw.
pub(super) async fn probe(
    origin: &Origin,
    plan: &ReadinessPlan,
    timeout: Duration,
) -> Result<(bool, String), String> {
    match &plan.http {
        // A headless rank serves nothing: alive (checked by the caller) is ready.
        _ if plan.alive_only => Ok((true, "alive (headless rank, not probed)".to_string())),
        Some(http) => fetch::get(origin, &http.path, timeout)
            .await
            .map(|reply| {
                (
                    reply.status == http.status,
                    format!("GET {} -> {}", http.path, reply.status),
                )
            })
            .map_err(|e| error_chain(&ProbeError::from(e))),
        None => tcp(origin, timeout)
            .await
            .map(|()| (true, "tcp connect ok".to_string()))
            .map_err(|e| error_chain(&e)),
    }
}

/// One health check after a point: does the declared probe still pass?
pub async fn healthy(base_url: &str, plan: &ReadinessPlan) -> bool {
    match Origin::parse(base_url) {
        Ok(origin) => matches!(
            probe(&origin.root(), plan, Duration::from_secs(5)).await,
            Ok((true, _))
        ),
        Err(_) => false,
    }
}

async fn tcp(origin: &Origin, timeout: Duration) -> Result<(), ProbeError> {
    let addr = origin.socket_addr();
    match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(&addr)).await {
        // A port proxy (Docker's bridge network) accepts at once and closes when nothing
        // listens behind it: a connection closed within a moment is not a listening server.
        Ok(Ok(mut stream)) => {
            use tokio::io::AsyncReadExt;
            let mut byte = [0u8; 1];
            match tokio::time::timeout(Duration::from_millis(200), stream.read(&mut byte)).await {
                Ok(Ok(0)) | Ok(Err(_)) => Err(ProbeError::ClosedAtOnce { addr }),
                _ => Ok(()),
            }
        }
        Ok(Err(source)) => Err(FetchError::Connect { addr, source }.into()),
        Err(_) => Err(ProbeError::ConnectTimedOut { addr }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let proxy = Origin::parse(&proxy_url).unwrap();
        let err = tcp(&proxy, Duration::from_secs(2)).await.unwrap_err();
        assert!(matches!(err, ProbeError::ClosedAtOnce { .. }), "{err}");
        // Accepts and keeps the connection, as a server does.
        let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server_url = format!("http://{}", server.local_addr().unwrap());
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = server.accept().await {
                held.push(stream);
            }
        });
        tcp(&Origin::parse(&server_url).unwrap(), Duration::from_secs(2))
            .await
            .unwrap();
    }

    #[test]
    fn the_first_listed_model_is_the_served_one() {
        let vllm = r#"{"object":"list","data":[{"id":"Qwen/Qwen3-8B","object":"model","owned_by":"vllm","root":"Qwen/Qwen3-8B"},{"id":"lora-a","object":"model"}]}"#;
        assert_eq!(first_model_id(vllm).as_deref(), Some("Qwen/Qwen3-8B"));
        assert_eq!(first_model_id(r#"{"object":"list","data":[]}"#), None);
        assert_eq!(
            first_model_id(r#"{"data":[{"id":""},{"id":"m"}]}"#).as_deref(),
            Some("m")
        );
        assert_eq!(first_model_id("<html>not found</html>"), None);
    }
}
