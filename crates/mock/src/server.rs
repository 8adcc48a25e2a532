//! `serve`: the accept loop (hyper HTTP/1.1 with keep-alive, TCP_NODELAY, one task per
//! connection), the state every request shares (`App`, built here; its type is `app.rs`), and
//! the orderly stop: on cancellation or
//! the configured crash, connections are cut, the engine thread stops and the ground-truth
//! log is flushed before `serve` returns. `serve_on` also runs a prefill worker's bootstrap
//! listener (`handoff.rs`) and a gang master's rank listener (`gang.rs`). Routing and
//! handlers live in `routes.rs`.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::app::App;
use crate::config::{MockConfig, Role};
use crate::engine::{Engine, EngineSettings};
use crate::error::MockError;
use crate::gang::{self, GangState};
use crate::handoff::{self, Rooms};
use crate::prefix::PrefixCache;
use crate::prom::Metrics;
use crate::routes;
use crate::truth::{self, WallClock};

/// The listeners a server runs on.
#[derive(Debug)]
pub struct Sockets {
    /// The OpenAI HTTP API.
    pub http: TcpListener,
    /// A prefill worker's bootstrap listener (SGLang's bootstrap port, vLLM's NIXL side
    /// channel); required when the role is prefill.
    pub bootstrap: Option<TcpListener>,
    /// Rank 0 of a gang: the listener the other ranks join, and the number of ranks.
    pub gang: Option<(TcpListener, u32)>,
}

/// Run the mock server on `listener` until `cancel` fires (returns `Ok`) or the configured
/// crash happens (returns `MockError::Crashed`). Streams in flight are cut either way.
pub async fn serve(
    config: MockConfig,
    listener: TcpListener,
    cancel: CancellationToken,
) -> Result<(), MockError> {
    let sockets = Sockets {
        http: listener,
        bootstrap: None,
        gang: None,
    };
    serve_on(config, sockets, cancel).await
}

/// `serve` with a prefill worker's bootstrap listener and a gang master's rank listener.
/// Also returns `MockError::RankLost` when a rank of the gang goes away.
pub async fn serve_on(
    config: MockConfig,
    sockets: Sockets,
    cancel: CancellationToken,
) -> Result<(), MockError> {
    config.validate()?;
    if config.disaggregation.role == Role::Prefill && sockets.bootstrap.is_none() {
        return Err(MockError::Config(
            "a prefill worker needs a bootstrap listener (its bootstrap port)".into(),
        ));
    }
    let listener = sockets.http;
    let (truth_sink, truth_writer) = match &config.ground_truth {
        Some(path) => {
            let (sink, writer) = truth::start(path)?;
            (Some(sink), Some(writer))
        }
        None => (None, None),
    };
    let metrics = Arc::new(Metrics {
        prefix_cache: config.prefix_cache.enabled(),
        ..Metrics::default()
    });
    let engine = Engine::start(
        EngineSettings {
            latency: config.latency.clone(),
            speed: config.speed,
            tokens_per_chunk: config.tokens_per_chunk,
        },
        metrics.clone(),
    )?;
    let clock = WallClock::new();
    let rooms = Arc::new(Rooms::default());
    let bootstrap = match &sockets.bootstrap {
        Some(l) => Some(l.local_addr().map_err(|e| {
            MockError::Config(format!("the bootstrap listener has no address: {e}"))
        })?),
        None => None,
    };
    let gang_state = sockets
        .gang
        .as_ref()
        .map(|(_, n)| Arc::new(GangState::new(*n)));
    let stop_side = cancel.child_token();
    if let Some(l) = sockets.bootstrap {
        tokio::spawn(handoff::serve_bootstrap(
            l,
            rooms.clone(),
            stop_side.clone(),
        ));
    }
    let master_state = gang_state.clone();
    let gang_lost = async move {
        match (sockets.gang, master_state) {
            (Some((l, _)), Some(state)) => gang::master(l, state).await,
            _ => std::future::pending().await,
        }
    };
    tokio::pin!(gang_lost);
    let prefix_cache = config
        .prefix_cache
        .enabled()
        .then(|| Mutex::new(PrefixCache::new(config.prefix_cache)));
    let app = Arc::new(App {
        model_json: Arc::from(
            serde_json::to_string(&config.model).unwrap_or_else(|_| "\"mock-model\"".into()),
        ),
        id_tag: format!("{:08x}", clock.now_ns() as u32),
        ready_at: Instant::now() + config.startup_delay,
        config,
        engine,
        metrics,
        truth: truth_sink,
        clock,
        requests: AtomicU64::new(0),
        crash: CancellationToken::new(),
        crash_request: AtomicU64::new(0),
        rooms,
        bootstrap,
        engine_id: format!("mock-{:08x}", clock.now_ns() as u32),
        gang: gang_state,
        prefix_cache,
    });
    let mut conns = JoinSet::new();
    let result = loop {
        tokio::select! {
            _ = cancel.cancelled() => break Ok(()),
            _ = app.crash.cancelled() => break Err(MockError::Crashed {
                crash_after: app.config.crash_after.unwrap_or(0),
                request: app.crash_request.load(Ordering::Relaxed),
            }),
            e = &mut gang_lost => break Err(e),
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    conns.spawn(connection(app.clone(), stream));
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off, keep serving.
                    tracing::warn!("mock server: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            },
        }
    };
    drop(listener);
    stop_side.cancel();
    conns.shutdown().await;
    let stopping = app.clone();
    let _ = tokio::task::spawn_blocking(move || stopping.engine.shutdown()).await;
    drop(app);
    if let Some(writer) = truth_writer {
        match tokio::task::spawn_blocking(move || writer.finish()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("mock server: writing the ground-truth log failed: {e}"),
            Err(e) => tracing::warn!("mock server: ground-truth writer failed: {e}"),
        }
    }
    result
}

async fn connection(app: Arc<App>, stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let service = service_fn(move |req| {
        let app = app.clone();
        async move { Ok::<_, Infallible>(routes::handle(app, req).await) }
    });
    let _ = http1::Builder::new()
        .keep_alive(true)
        .header_read_timeout(None)
        .serve_connection(TokioIo::new(stream), service)
        .await;
}
