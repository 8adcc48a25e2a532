//! Topology readiness: once every role of a deployment is ready, a router must report the
//! prefill and decode workers it was given, and then one generation must pass through the
//! entry role. A router that cannot reach a worker still answers its own `/health`, so only
//! this check catches it before the load does.
//!
//! How routers report their workers (`readiness.workers.via`):
//! - `router`: `GET /workers` (SGLang Model Gateway / `sglang-router`, and `vllm-router`, its
//!   fork). Counted: the `workers[]` entries with `is_healthy` not false, by `worker_type`
//!   (`prefill`, `decode`; `regular` counts as decode); without a `workers` list,
//!   `stats.prefill_count` / `decode_count` (+ `regular_count`).
//! - `dynamo`: the Dynamo frontend's `GET /health`: the `instances[]` whose `endpoint` is
//!   `generate`, by `component` (`prefill`; `decode`, `backend` and `tensorrt_llm` count as
//!   decode). Dynamo 1.6.1 answers 200 `healthy` with an empty list before any worker
//!   registered (older frontends 503), and lists its decode workers as `backend`.
//!
//! Owns: reading those answers and the wait. Does not own: which role is a router and what it
//! should report (the runner's topology rule).

use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::excerpt::{tail, tail_text, truncate};
use super::probe::{GenerateProbe, backoff, generate_once};
use crate::fetch::{self, Origin};
use crate::provider::{ExitInfo, Instance};
use crate::spec::WorkersVia;
use crate::units::error_chain;

/// What a router must report: at least this many prefill and decode workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expected {
    pub prefill: u32,
    pub decode: u32,
    pub via: WorkersVia,
}

/// What a router reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Reported {
    pub prefill: u32,
    pub decode: u32,
}

impl Reported {
    fn covers(&self, expected: &Expected) -> bool {
        self.prefill >= expected.prefill && self.decode >= expected.decode
    }
}

/// The path a router reports its workers on.
pub fn path(via: WorkersVia) -> &'static str {
    match via {
        WorkersVia::Router => "/workers",
        WorkersVia::Dynamo => "/health",
    }
}

/// The worker counts in a router's answer, or why none could be read.
pub fn parse(via: WorkersVia, body: &[u8]) -> Result<Reported, String> {
    let json: Value = serde_json::from_slice(body).map_err(|_| {
        format!(
            "not JSON: {}",
            truncate(&String::from_utf8_lossy(body), 120)
        )
    })?;
    match via {
        WorkersVia::Router => router_counts(&json),
        WorkersVia::Dynamo => dynamo_counts(&json),
    }
}

fn router_counts(json: &Value) -> Result<Reported, String> {
    if let Some(list) = json.get("workers").and_then(Value::as_array) {
        let mut out = Reported::default();
        for w in list {
            if w.get("is_healthy").and_then(Value::as_bool) == Some(false) {
                continue;
            }
            match w.get("worker_type").and_then(Value::as_str) {
                Some("prefill") => out.prefill += 1,
                Some("decode" | "regular") => out.decode += 1,
                _ => {}
            }
        }
        return Ok(out);
    }
    let stats = json
        .get("stats")
        .ok_or("no `workers` list nor `stats` in the answer")?;
    let count = |key: &str| {
        stats
            .get(key)
            .and_then(Value::as_u64)
            .map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX))
    };
    Ok(Reported {
        prefill: count("prefill_count"),
        decode: count("decode_count").saturating_add(count("regular_count")),
    })
}

fn dynamo_counts(json: &Value) -> Result<Reported, String> {
    let list = json
        .get("instances")
        .and_then(Value::as_array)
        .ok_or("no `instances` list in the answer")?;
    let mut out = Reported::default();
    for i in list {
        if i.get("endpoint").and_then(Value::as_str) != Some("generate") {
            continue;
        }
        match i.get("component").and_then(Value::as_str) {
            Some("prefill") => out.prefill += 1,
            Some("decode" | "backend" | "tensorrt_llm") => out.decode += 1,
            _ => {}
        }
    }
    Ok(out)
}

/// Why the topology did not become ready.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error(
        "the topology was not ready after {timeout:?}: {what} reports {reported} (GET {path}), expected at least {expected}{last}; check that the router reaches every worker at the address in its command, or set `readiness.workers` of role `{role}` to what it should report (`enabled: false` if it cannot report workers); last log lines of {what}:\n{tail}"
    )]
    Workers {
        what: String,
        role: String,
        path: &'static str,
        reported: String,
        expected: String,
        last: String,
        timeout: Duration,
        tail: String,
    },
    #[error(
        "the topology was not ready after {timeout:?}: every worker is reported, but a completion through {what} failed (last: {last}); last log lines of {what}:\n{tail}"
    )]
    Generate {
        what: String,
        last: String,
        timeout: Duration,
        tail: String,
    },
    #[error(
        "the topology was not ready after {timeout:?}: {what} did not take worker {worker} (last: {last}); check that the router of role `{role}` accepts `POST /workers` (the SGLang router does) and that the worker answers `GET /server_info`; last log lines of {what}:\n{tail}"
    )]
    Register {
        what: String,
        role: String,
        worker: String,
        last: String,
        timeout: Duration,
        tail: String,
    },
    #[error("{key} exited ({exit}) while the topology was becoming ready; last log lines:\n{tail}")]
    Exited {
        key: String,
        exit: ExitInfo,
        tail: String,
    },
    #[error("cancelled while waiting for the topology")]
    Cancelled,
}

/// How long and how often to try.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub interval: Duration,
    pub timeout: Duration,
}

/// Resolves with the first process of the deployment that exits: key, exit, log tail.
pub type ExitWatch<'a> = BoxFuture<'a, (String, ExitInfo, Vec<String>)>;

/// Wait until `router` (of role `role`) reports `expected`. Returns what it reported.
pub async fn wait(
    router: &dyn Instance,
    role: &str,
    expected: &Expected,
    timing: Timing,
    cancel: &CancellationToken,
    exited: &mut ExitWatch<'_>,
) -> Result<Reported, TopologyError> {
    let path = path(expected.via);
    let started = Instant::now();
    let mut seen: Option<Reported> = None;
    let mut attempt = 0u32;
    loop {
        let last = match Origin::parse(&router.base_url()) {
            Ok(origin) => match fetch::get(&origin.root(), path, probe_timeout(timing)).await {
                Ok(reply) => match parse(expected.via, &reply.body) {
                    Ok(r) if r.covers(expected) => return Ok(r),
                    Ok(r) => {
                        seen = Some(r);
                        String::new()
                    }
                    Err(e) => format!("HTTP {}, {e}", reply.status),
                },
                Err(e) => error_chain(&e),
            },
            Err(e) => e.to_string(),
        };
        if started.elapsed() >= timing.timeout {
            return Err(TopologyError::Workers {
                what: router.describe(),
                role: role.to_string(),
                path,
                reported: seen.map_or_else(|| "no worker counts".to_string(), |r| counts(&r)),
                expected: counts(&Reported {
                    prefill: expected.prefill,
                    decode: expected.decode,
                }),
                last: if last.is_empty() {
                    String::new()
                } else {
                    format!(" (last answer: {last})")
                },
                timeout: timing.timeout,
                tail: tail(router),
            });
        }
        pause(started, timing, &mut attempt, cancel, exited).await?;
    }
}

/// One completion through `entry` must succeed (retried until the timeout).
pub async fn generate(
    entry: &dyn Instance,
    probe: &GenerateProbe,
    timing: Timing,
    cancel: &CancellationToken,
    exited: &mut ExitWatch<'_>,
) -> Result<(), TopologyError> {
    let started = Instant::now();
    let mut attempt = 0u32;
    loop {
        let last = match Origin::parse(&entry.base_url()) {
            Ok(origin) => match generate_once(&origin.root(), probe, probe_timeout(timing)).await {
                Ok((true, _)) => return Ok(()),
                Ok((false, text)) => text,
                Err(e) => e,
            },
            Err(e) => e.to_string(),
        };
        if started.elapsed() >= timing.timeout {
            return Err(TopologyError::Generate {
                what: entry.describe(),
                last,
                timeout: timing.timeout,
                tail: tail(entry),
            });
        }
        pause(started, timing, &mut attempt, cancel, exited).await?;
    }
}

fn counts(r: &Reported) -> String {
    format!("{} prefill and {} decode workers", r.prefill, r.decode)
}

pub(super) fn probe_timeout(timing: Timing) -> Duration {
    timing
        .interval
        .max(Duration::from_secs(2))
        .min(Duration::from_secs(10))
}

/// Sleep before the next try (fast at first, then every `interval`), failing at once when a
/// process of the deployment exits or the run is cancelled.
pub(super) async fn pause(
    started: Instant,
    timing: Timing,
    attempt: &mut u32,
    cancel: &CancellationToken,
    exited: &mut ExitWatch<'_>,
) -> Result<(), TopologyError> {
    *attempt += 1;
    let left = timing.timeout.saturating_sub(started.elapsed());
    let sleep = backoff(*attempt, timing.interval).min(left);
    tokio::select! {
        (key, exit, lines) = exited => Err(TopologyError::Exited { key, exit, tail: tail_text(&lines) }),
        _ = cancel.cancelled() => Err(TopologyError::Cancelled),
        _ = tokio::time::sleep(sleep) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gateway_answer_counts_healthy_workers_by_type() {
        // As sglang-router 0.3.2 answers (abridged), one prefill unhealthy.
        let body = br#"{"workers":[
            {"url":"http://a:1","worker_type":"prefill","is_healthy":true,"bootstrap_port":8998},
            {"url":"http://b:1","worker_type":"prefill","is_healthy":false},
            {"url":"http://c:1","worker_type":"decode","is_healthy":true},
            {"url":"http://d:1","worker_type":"decode","is_healthy":true}],
            "total":4,"stats":{"prefill_count":2,"decode_count":2,"regular_count":0}}"#;
        assert_eq!(
            parse(WorkersVia::Router, body).unwrap(),
            Reported {
                prefill: 1,
                decode: 2
            }
        );
    }

    #[test]
    fn without_a_worker_list_the_stats_count() {
        let body = br#"{"stats":{"prefill_count":2,"decode_count":1,"regular_count":1}}"#;
        assert_eq!(
            parse(WorkersVia::Router, body).unwrap(),
            Reported {
                prefill: 2,
                decode: 2
            }
        );
        let err = parse(WorkersVia::Router, b"{}").unwrap_err();
        assert!(err.contains("stats"), "{err}");
        let err = parse(WorkersVia::Router, b"Not Found").unwrap_err();
        assert!(err.contains("not JSON: Not Found"), "{err}");
    }

    #[test]
    fn the_dynamo_1_6_health_counts_its_prefill_and_backend_generate_instances() {
        // As the Dynamo 1.6.1 frontend answered (file discovery, TCP request plane) with one
        // `dynamo.mocker --disaggregation-mode prefill` and two `decode` workers registered.
        let body = br#"{"status":"healthy","endpoints":["dyn://dynamo.backend.generate","dyn://dynamo.prefill.generate","dyn://dynamo.prefill.worker_kv_query_source_28391fd11b44f"],"instances":[{"component":"backend","endpoint":"generate","namespace":"dynamo","instance_id":17563757118235241957,"transport":{"tcp":"127.0.0.1:34655/f3bf000ad1a66de5/dynamo/backend/generate"},"device_type":"cuda","request_plane_codec":"msgpack"},{"component":"backend","endpoint":"generate","namespace":"dynamo","instance_id":752041896574515969,"transport":{"tcp":"127.0.0.1:43785/a6fca1ed588fb01/dynamo/backend/generate"},"device_type":"cuda","request_plane_codec":"msgpack"},{"component":"prefill","endpoint":"generate","namespace":"dynamo","instance_id":16120226738037499568,"transport":{"tcp":"127.0.0.1:34139/dfb68ccf437aa6b0/dynamo/prefill/generate"},"device_type":"cuda","request_plane_codec":"msgpack"},{"component":"prefill","endpoint":"worker_kv_query_source_28391fd11b44f","namespace":"dynamo","instance_id":16120226738037499568,"transport":{"tcp":"127.0.0.1:34139/dfb68ccf437aa6b0/dynamo/prefill/worker_kv_query_source_28391fd11b44f"},"device_type":"cuda","request_plane_codec":"msgpack"}]}"#;
        assert_eq!(
            parse(WorkersVia::Dynamo, body).unwrap(),
            Reported {
                prefill: 1,
                decode: 2
            }
        );
        // Before any worker registered: still 200 and `healthy`, with no instances.
        let empty = br#"{"status":"healthy","endpoints":[],"instances":[]}"#;
        assert_eq!(
            parse(WorkersVia::Dynamo, empty).unwrap(),
            Reported::default()
        );
    }

    #[test]
    fn the_dynamo_health_counts_generate_instances_by_component() {
        // The older documented /health (docs/guides/health_check.md), with P and D workers.
        let body = br#"{"endpoints":["dyn://dynamo.backend.generate"],"instances":[
            {"component":"prefill","endpoint":"generate","instance_id":1,"namespace":"dynamo"},
            {"component":"prefill","endpoint":"clear_kv_blocks","instance_id":1,"namespace":"dynamo"},
            {"component":"backend","endpoint":"generate","instance_id":2,"namespace":"dynamo"},
            {"component":"backend","endpoint":"load_metrics","instance_id":2,"namespace":"dynamo"},
            {"component":"decode","endpoint":"generate","instance_id":3,"namespace":"dynamo"}],
            "status":"healthy"}"#;
        assert_eq!(
            parse(WorkersVia::Dynamo, body).unwrap(),
            Reported {
                prefill: 1,
                decode: 2
            }
        );
        let unhealthy =
            br#"{"instances":[],"message":"No endpoints available","status":"unhealthy"}"#;
        assert_eq!(
            parse(WorkersVia::Dynamo, unhealthy).unwrap(),
            Reported::default()
        );
    }

    /// A server answering every request with `body` (status 200), on a free port.
    async fn answering(body: &'static str) -> u16 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = stream.read(&mut buf).await;
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(reply.as_bytes()).await;
                });
            }
        });
        port
    }

    const TWO_TWO: Expected = Expected {
        prefill: 2,
        decode: 2,
        via: WorkersVia::Router,
    };

    fn timing(ms: u64) -> Timing {
        Timing {
            interval: Duration::from_millis(100),
            timeout: Duration::from_millis(ms),
        }
    }

    #[tokio::test]
    async fn a_router_short_of_workers_times_out_naming_reported_and_expected() {
        let port =
            answering(r#"{"stats":{"prefill_count":1,"decode_count":2,"regular_count":0}}"#).await;
        let router =
            super::super::server::tests::launch(&["echo router up", "sleep 30"], port).await;
        let mut never: ExitWatch<'_> = Box::pin(futures_util::future::pending());
        let err = wait(
            router.as_ref(),
            "router",
            &TWO_TWO,
            timing(600),
            &CancellationToken::new(),
            &mut never,
        )
        .await
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("reports 1 prefill and 2 decode workers (GET /workers), expected at least 2 prefill and 2 decode workers"),
            "{text}"
        );
        assert!(
            text.contains("`readiness.workers` of role `router`") && text.contains("router up"),
            "{text}"
        );
        router.stop().await.unwrap();
    }

    #[tokio::test]
    async fn a_router_reporting_every_worker_is_ready() {
        let port =
            answering(r#"{"stats":{"prefill_count":2,"decode_count":2,"regular_count":0}}"#).await;
        let router = super::super::server::tests::launch(&["sleep 30"], port).await;
        let mut never: ExitWatch<'_> = Box::pin(futures_util::future::pending());
        let reported = wait(
            router.as_ref(),
            "router",
            &TWO_TWO,
            timing(5000),
            &CancellationToken::new(),
            &mut never,
        )
        .await
        .unwrap();
        assert_eq!(
            reported,
            Reported {
                prefill: 2,
                decode: 2
            }
        );
        router.stop().await.unwrap();
    }

    #[tokio::test]
    async fn a_worker_exiting_during_the_wait_fails_it_at_once() {
        let port = answering(r#"{"stats":{"prefill_count":0,"decode_count":0}}"#).await;
        let router = super::super::server::tests::launch(&["sleep 30"], port).await;
        let worker = super::super::server::tests::launch(
            &["echo worker dies >&2", "sleep 0.3", "exit 3"],
            9,
        )
        .await;
        let mut exited: ExitWatch<'_> = Box::pin(async {
            let exit = worker.exited().await;
            ("decode-0".to_string(), exit, worker.log().tail(5))
        });
        let started = Instant::now();
        let err = wait(
            router.as_ref(),
            "router",
            &TWO_TWO,
            timing(30_000),
            &CancellationToken::new(),
            &mut exited,
        )
        .await
        .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(5));
        let text = err.to_string();
        assert!(
            text.contains("decode-0 exited (exit code 3)") && text.contains("worker dies"),
            "{text}"
        );
        drop(exited);
        router.stop().await.unwrap();
        worker.stop().await.unwrap();
    }

    #[test]
    fn fewer_workers_than_expected_do_not_cover() {
        let expected = Expected {
            prefill: 2,
            decode: 2,
            via: WorkersVia::Router,
        };
        let short = Reported {
            prefill: 1,
            decode: 2,
        };
        assert!(!short.covers(&expected));
        assert!(
            Reported {
                prefill: 2,
                decode: 3
            }
            .covers(&expected)
        );
    }
}
