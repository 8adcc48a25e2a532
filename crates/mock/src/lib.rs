//! The built-in OpenAI-compatible mock inference server with a continuous-batching latency
//! model: the only stand-in for a GPU inference server in this project (tests, demo, and the
//! target of the load generator's own benchmark). `orchestrate mock-server` runs it; the
//! behaviour and file formats are documented in docs/mock-server.md.
//!
//! A crate of its own (`orchestrate-mock`), so that it builds without the rest of
//! `orchestrate` and a change elsewhere does not rebuild it; it shares only the leaf tools of
//! `orchestrate-base` (`fetch`, `units`, `chat_template`).
//!
//! Files, lowest first; a module names only modules before it (orchestrate's
//! tests/it/layers.rs checks that the imports run one way): `error` (`MockError`), `latency`
//! (model parameters, presets), `tokens` (counting and filler text), `prefix` (the prefix cache: chained block
//! hashes, LRU in tokens), `truth` (ground-truth
//! chunk log), `prom` (Prometheus metrics with vLLM's names), `gang` (one instance over several
//! ranks), `handoff` (rooms and the bootstrap listener between prefill and decode workers),
//! `scheduler` (pure batching state machine), `simulate` (virtual-clock runs for
//! calibration), `engine` (the wall-clock step loop on its own thread), `config` (`MockConfig`,
//! the prefill/decode `Role`), `protocol` (OpenAI request parsing, errors), `render` (response
//! JSON and SSE chunks), `stream` (response bodies), `app` (the state every request shares),
//! `disagg` (what a prefill or decode worker does with a request), `routes` (HTTP handlers),
//! `server` (accept loop, `serve`).

mod app;
mod config;
mod disagg;
mod engine;
mod error;
mod gang;
mod handoff;
mod latency;
mod prefix;
mod prom;
mod protocol;
mod render;
mod routes;
mod scheduler;
mod server;
mod simulate;
mod stream;
mod tokens;
mod truth;

pub use config::{Disaggregation, MockConfig, Role};
pub use error::MockError;
pub use gang::{GangConfig, member as join_gang};
pub use latency::{Curve, LatencyModel, Preset};
pub use prefix::PrefixCacheConfig;
pub use protocol::DEFAULT_MAX_TOKENS;
pub use scheduler::{Progress, Scheduler, StepPlan};
pub use server::{Sockets, serve, serve_on};
pub use simulate::{ClosedLoop, SimSummary, simulate};
pub use tokens::TokenCounter;
