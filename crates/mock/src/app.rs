//! `App`: the state every request handler of one mock server shares (its settings, engine,
//! metrics, clock, ground-truth sink, prefill rooms, gang and prefix cache). `server.rs` builds it and
//! stops it; `routes.rs` and `disagg.rs` read it.

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio_util::sync::CancellationToken;

use crate::config::MockConfig;
use crate::engine::Engine;
use crate::gang::GangState;
use crate::handoff::Rooms;
use crate::prefix::PrefixCache;
use crate::prom::Metrics;
use crate::truth::{TruthSink, WallClock};

/// What every request handler shares.
#[derive(Debug)]
pub(crate) struct App {
    pub config: MockConfig,
    pub engine: Engine,
    pub metrics: Arc<Metrics>,
    pub truth: Option<TruthSink>,
    pub clock: WallClock,
    /// `/health` is 200 and requests are served from then on.
    pub ready_at: Instant,
    /// The model name as a JSON string literal.
    pub model_json: Arc<str>,
    /// Distinguishes this server's response ids from another run's.
    pub id_tag: String,
    /// Generation requests received so far.
    pub requests: AtomicU64,
    /// Cancelled when the request after `crash_after` arrives.
    pub crash: CancellationToken,
    pub crash_request: AtomicU64,
    /// Prefill: the rooms decode workers collect.
    pub rooms: Arc<Rooms>,
    /// Prefill: where the bootstrap listener listens.
    pub bootstrap: Option<SocketAddr>,
    /// vLLM's `remote_engine_id` of this server.
    pub engine_id: String,
    /// Gang master: the ranks that joined (`/health` is 503 until all have).
    pub gang: Option<Arc<GangState>>,
    /// The prefix cache, when its capacity is not 0.
    pub prefix_cache: Option<Mutex<PrefixCache>>,
}
