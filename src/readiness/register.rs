//! Registering workers with a router, as dstack does for its SGLang router: each worker's
//! `GET /server_info` says what it is (`disaggregation_mode` `prefill`, `decode`, or neither:
//! `regular`; a prefill worker's `disaggregation_bootstrap_port`), and `POST /workers` on the
//! router adds it (`{url, worker_type, bootstrap_port}`, answered 202 `accepted` by the SGLang
//! Model Gateway / sglang-router). The count check of [`super::workers`] follows.
//!
//! Owns: the two requests and their retries. Does not own: which workers (the runner's
//! topology rule).

use std::time::Instant;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::excerpt::{tail, truncate};
use super::workers::{ExitWatch, Timing, TopologyError, pause, probe_timeout};
use crate::fetch::{self, Origin};
use crate::provider::Instance;

/// One worker to register.
pub struct Worker<'a> {
    /// The running worker (asked for its `/server_info` where orchestrate reaches it).
    pub instance: &'a dyn Instance,
    /// Its URL as the router reaches it (`http://host:port`, what a router's `--prefill`
    /// would be given).
    pub url: String,
}

/// What a worker's `/server_info` says it is: worker type and bootstrap port.
pub fn worker_type(info: &Value) -> (&'static str, Option<u64>) {
    match info.get("disaggregation_mode").and_then(Value::as_str) {
        Some("prefill") => (
            "prefill",
            info.get("disaggregation_bootstrap_port")
                .and_then(Value::as_u64),
        ),
        Some("decode") => ("decode", None),
        _ => ("regular", None),
    }
}

/// Register every worker with `router` (of role `role`); each request is retried until the
/// router role's timeout.
pub async fn register(
    router: &dyn Instance,
    role: &str,
    workers: &[Worker<'_>],
    timing: Timing,
    cancel: &CancellationToken,
    exited: &mut ExitWatch<'_>,
) -> Result<(), TopologyError> {
    let started = Instant::now();
    let mut attempt = 0u32;
    for w in workers {
        loop {
            let last = match once(router, w, timing).await {
                Ok(()) => break,
                Err(e) => e,
            };
            if started.elapsed() >= timing.timeout {
                return Err(TopologyError::Register {
                    what: router.describe(),
                    role: role.to_string(),
                    worker: w.url.clone(),
                    last,
                    timeout: timing.timeout,
                    tail: tail(router),
                });
            }
            pause(started, timing, &mut attempt, cancel, exited).await?;
        }
    }
    Ok(())
}

/// Ask the worker what it is, then add it to the router.
async fn once(router: &dyn Instance, w: &Worker<'_>, timing: Timing) -> Result<(), String> {
    let timeout = probe_timeout(timing);
    let origin = Origin::parse(&w.instance.base_url()).map_err(|e| e.to_string())?;
    let reply = fetch::get(&origin.root(), "/server_info", timeout)
        .await
        .map_err(|e| format!("GET /server_info of {}: {e}", w.url))?;
    let info: Value = serde_json::from_slice(&reply.body).map_err(|_| {
        format!(
            "GET /server_info of {}: HTTP {}, not JSON: {}",
            w.url,
            reply.status,
            truncate(&reply.text_lossy(), 120)
        )
    })?;
    if info
        .get("status")
        .and_then(Value::as_str)
        .is_some_and(|s| s != "ready")
    {
        return Err(format!("{} is not ready yet (/server_info)", w.url));
    }
    let (kind, bootstrap) = worker_type(&info);
    let mut body = json!({"url": w.url, "worker_type": kind});
    if let Some(p) = bootstrap {
        body["bootstrap_port"] = json!(p);
    }
    let origin = Origin::parse(&router.base_url()).map_err(|e| e.to_string())?;
    let reply = fetch::post_json(&origin.root(), "/workers", &body, timeout)
        .await
        .map_err(|e| format!("POST /workers: {e}"))?;
    if (200..300).contains(&reply.status) {
        Ok(())
    } else {
        Err(format!(
            "POST /workers {body}: HTTP {}: {}",
            reply.status,
            truncate(&reply.text_lossy(), 200)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worker_type_is_what_server_info_says() {
        let prefill =
            json!({"disaggregation_mode": "prefill", "disaggregation_bootstrap_port": 8998});
        assert_eq!(worker_type(&prefill), ("prefill", Some(8998)));
        let decode =
            json!({"disaggregation_mode": "decode", "disaggregation_bootstrap_port": null});
        assert_eq!(worker_type(&decode), ("decode", None));
        assert_eq!(
            worker_type(&json!({"disaggregation_mode": "null"})),
            ("regular", None)
        );
        assert_eq!(worker_type(&json!({})), ("regular", None));
    }
}
