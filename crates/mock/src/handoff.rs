//! The KV handoff between a prefill and a decode mock worker (prefill/decode
//! disaggregation): the prefill side keeps a registry of "rooms" (one per request whose KV
//! a decode worker will fetch) and answers on its bootstrap listener, the decode side asks
//! that listener until the room's prefill has finished, then spends the transfer time.
//!
//! Room keys: `s:<bootstrap_room>` for SGLang's protocol (the router sends the same room to
//! both workers), `n:<request id>` for vLLM's NIXL protocol (the prefill answer carries the
//! id in `kv_transfer_params.remote_request_id`). The bootstrap listener's route is the
//! mock's own: `GET /mock/kv/<key>?wait_ms=N` long-polls until the room is done (200
//! `{"prompt_tokens":N}`), failed (410), or N ms passed without either (404). A room is
//! handed out once, then forgotten. Not here: which request fields name a room
//! (`protocol.rs`), the roles and their settings (`disagg.rs`).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use orchestrate_base::fetch::{self, Origin};

/// Rooms nobody collected are forgotten after this long (vLLM frees unread prefill blocks
/// after `VLLM_NIXL_ABORT_REQUEST_TIMEOUT`, 480 s by default).
const FORGET_AFTER: Duration = Duration::from_secs(600);

/// Where a room's prefill stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RoomState {
    /// Known to a waiting decode worker, or prefilling.
    Pending,
    /// The prefill finished; its prompt had this many tokens.
    Done { prompt_tokens: u32 },
    /// The prefill was cancelled or the server stopped before it finished.
    Failed,
}

#[derive(Debug)]
struct Room {
    state: watch::Sender<RoomState>,
    since: Instant,
}

/// The prefill side's registry of rooms.
#[derive(Debug, Default)]
pub(crate) struct Rooms {
    rooms: Mutex<HashMap<String, Room>>,
}

/// What a wait for a room ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Waited {
    Done { prompt_tokens: u32 },
    Failed,
    TimedOut,
}

impl Rooms {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Room>> {
        self.rooms.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn receiver(&self, key: &str) -> watch::Receiver<RoomState> {
        let mut rooms = self.lock();
        rooms
            .entry(key.to_owned())
            .or_insert_with(|| Room {
                state: watch::channel(RoomState::Pending).0,
                since: Instant::now(),
            })
            .state
            .subscribe()
    }

    /// A prefill for `key` started; forgets rooms left uncollected for too long.
    pub(crate) fn open(&self, key: &str) {
        let now = Instant::now();
        let mut rooms = self.lock();
        rooms.retain(|_, r| now.duration_since(r.since) < FORGET_AFTER);
        let room = rooms.entry(key.to_owned()).or_insert_with(|| Room {
            state: watch::channel(RoomState::Pending).0,
            since: now,
        });
        room.since = now;
        room.state.send_replace(RoomState::Pending);
    }

    /// The prefill for `key` ended (callable from any thread).
    pub(crate) fn finish(&self, key: &str, state: RoomState) {
        if let Some(room) = self.lock().get(key) {
            room.state.send_replace(state);
        }
    }

    /// Wait at most `timeout` for `key`'s prefill to end; a finished room is forgotten.
    pub(crate) async fn wait(&self, key: &str, timeout: Duration) -> Waited {
        let mut rx = self.receiver(key);
        let ended =
            tokio::time::timeout(timeout, rx.wait_for(|s| !matches!(s, RoomState::Pending))).await;
        let state = match ended {
            Ok(Ok(s)) => *s,
            Ok(Err(_)) => RoomState::Failed,
            Err(_) => return Waited::TimedOut,
        };
        self.lock().remove(key);
        match state {
            RoomState::Done { prompt_tokens } => Waited::Done { prompt_tokens },
            _ => Waited::Failed,
        }
    }

    /// Whether no room is known (tests).
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

/// Serve the bootstrap listener (rooms and `/health`) until `cancel` fires.
pub(crate) async fn serve_bootstrap(
    listener: TcpListener,
    rooms: Arc<Rooms>,
    cancel: CancellationToken,
) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    let rooms = rooms.clone();
                    conns.spawn(async move {
                        let service = service_fn(move |req| {
                            let rooms = rooms.clone();
                            async move { Ok::<_, Infallible>(bootstrap_route(&rooms, &req).await) }
                        });
                        let _ = http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
                Err(e) => {
                    tracing::warn!("mock bootstrap server: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            },
        }
    }
    conns.shutdown().await;
}

fn reply(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

async fn bootstrap_route<B>(rooms: &Rooms, req: &Request<B>) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    if path == "/health" {
        return reply(StatusCode::OK, String::new());
    }
    let Some(key) = path.strip_prefix("/mock/kv/") else {
        return reply(
            StatusCode::NOT_FOUND,
            format!("{{\"error\":\"no route {path}\"}}"),
        );
    };
    let wait_ms = req
        .uri()
        .query()
        .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("wait_ms=")))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    match rooms.wait(key, Duration::from_millis(wait_ms)).await {
        Waited::Done { prompt_tokens } => reply(
            StatusCode::OK,
            format!("{{\"prompt_tokens\":{prompt_tokens}}}"),
        ),
        Waited::Failed => reply(
            StatusCode::GONE,
            "{\"error\":\"the prefill of this room was cancelled\"}".into(),
        ),
        Waited::TimedOut => reply(
            StatusCode::NOT_FOUND,
            "{\"error\":\"no finished prefill for this room\"}".into(),
        ),
    }
}

/// Ask the prefill worker at `host:port` for room `key`, waiting at most `timeout` for its
/// prefill to finish. `Ok(prompt tokens)` or why the KV cannot be had.
pub(crate) async fn fetch_room(
    host: &str,
    port: u16,
    key: &str,
    timeout: Duration,
) -> Result<u32, String> {
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    let origin = Origin::parse(&format!("http://{host}:{port}"))
        .map_err(|e| format!("bad bootstrap address: {e}"))?;
    let path = format!("/mock/kv/{key}?wait_ms={}", timeout.as_millis());
    let reply = fetch::get(&origin, &path, timeout + Duration::from_secs(5))
        .await
        .map_err(|e| {
            format!(
                "KV transfer from the prefill worker's bootstrap server {host}:{port} failed: {}",
                orchestrate_base::units::error_chain(&e)
            )
        })?;
    match reply.status {
        200 => serde_json::from_slice::<serde_json::Value>(&reply.body)
            .ok()
            .and_then(|v| v["prompt_tokens"].as_u64())
            .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
            .ok_or_else(|| format!("bad answer from bootstrap server {host}:{port}")),
        410 => Err(format!(
            "the prefill worker at {host}:{port} cancelled the prefill of room {key}"
        )),
        404 => Err(format!(
            "no prefill for room {key} finished on {host}:{port} within {timeout:?}"
        )),
        s => Err(format!(
            "bootstrap server {host}:{port} answered {s}: {}",
            reply.text_lossy()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wait_ends_when_the_prefill_finishes_and_the_room_is_handed_out_once() {
        let rooms = Arc::new(Rooms::default());
        // The decode side may ask before the prefill side opened the room.
        let r2 = rooms.clone();
        let waiter = tokio::spawn(async move { r2.wait("s:1", Duration::from_secs(5)).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        rooms.open("s:1");
        assert!(!waiter.is_finished());
        rooms.finish("s:1", RoomState::Done { prompt_tokens: 7 });
        assert_eq!(waiter.await.unwrap(), Waited::Done { prompt_tokens: 7 });
        assert!(rooms.is_empty());
        assert_eq!(
            rooms.wait("s:1", Duration::from_millis(30)).await,
            Waited::TimedOut
        );
        rooms.open("n:x");
        rooms.finish("n:x", RoomState::Failed);
        assert_eq!(
            rooms.wait("n:x", Duration::from_secs(1)).await,
            Waited::Failed
        );
    }

    #[tokio::test]
    async fn the_bootstrap_listener_answers_over_http() {
        let rooms = Arc::new(Rooms::default());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cancel = CancellationToken::new();
        let server = tokio::spawn(serve_bootstrap(listener, rooms.clone(), cancel.clone()));
        rooms.open("s:9");
        let r2 = rooms.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            r2.finish("s:9", RoomState::Done { prompt_tokens: 12 });
        });
        let got = fetch_room("127.0.0.1", port, "s:9", Duration::from_secs(5)).await;
        assert_eq!(got, Ok(12));
        let err = fetch_room("127.0.0.1", port, "s:10", Duration::from_millis(50))
            .await
            .unwrap_err();
        assert!(err.contains("no prefill for room s:10"), "{err}");
        cancel.cancel();
        server.await.unwrap();
        let err = fetch_room("127.0.0.1", port, "s:9", Duration::from_millis(50))
            .await
            .unwrap_err();
        assert!(err.contains("bootstrap server 127.0.0.1"), "{err}");
    }
}
