//! The built-in OpenAI-compatible mock inference server with a continuous-batching latency
//! model: the only stand-in for a GPU inference server in this project (tests, demo, and the
//! target of the load generator's own benchmark). `orchestrate mock-server` runs it.
//!
//! Files: `latency` (model parameters, presets), `scheduler` (pure batching state machine),
//! `simulate` (virtual-clock runs for calibration), `engine` (the wall-clock step loop on
//! its own thread), `stream` (per-request progress and SSE bodies), `protocol` (OpenAI
//! request parsing and response rendering), `tokens` (counting and filler text), `prom`
//! (Prometheus metrics with vLLM's names), `truth` (ground-truth chunk log), `server`
//! (hyper, routing, `serve`), `config` (`MockConfig`).

mod error;
mod latency;
mod scheduler;
mod simulate;

pub use error::MockError;
pub use latency::{Curve, LatencyModel, Preset};
pub use scheduler::{Progress, Scheduler, StepPlan};
pub use simulate::{ClosedLoop, SimSummary, simulate};
