//! The built-in OpenAI-compatible mock inference server with a continuous-batching latency
//! model: the only stand-in for a GPU inference server in this project (tests, demo, and the
//! target of the load generator's own benchmark). `orchestrate mock-server` runs it; the
//! behaviour and file formats are documented in docs/mock-server.md.
//!
//! Files: `config` (`MockConfig`), `latency` (model parameters, presets), `scheduler` (pure
//! batching state machine), `simulate` (virtual-clock runs for calibration), `engine` (the
//! wall-clock step loop on its own thread), `protocol` (OpenAI request parsing, errors),
//! `render` (response JSON and SSE chunks), `stream` (response bodies), `tokens` (counting
//! and filler text), `prom` (Prometheus metrics with vLLM's names), `truth` (ground-truth
//! chunk log), `server` (accept loop, `serve`), `routes` (HTTP handlers), `disagg` (the
//! prefill/decode roles and their wire protocols), `handoff` (rooms and the bootstrap
//! listener between prefill and decode workers), `gang` (one instance over several ranks).

mod config;
mod disagg;
mod engine;
mod error;
mod gang;
mod handoff;
mod latency;
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

pub use config::MockConfig;
pub use disagg::{Disaggregation, Role};
pub use error::MockError;
pub use gang::{GangConfig, member as join_gang};
pub use latency::{Curve, LatencyModel, Preset};
pub use protocol::DEFAULT_MAX_TOKENS;
pub use scheduler::{Progress, Scheduler, StepPlan};
pub use server::{Sockets, serve, serve_on};
pub use simulate::{ClosedLoop, SimSummary, simulate};
pub use tokens::TokenCounter;
