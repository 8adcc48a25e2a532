//! The mock inference server end to end: `orchestrate_mock::serve` on port 0 driven by a
//! minimal hyper client (OpenAI protocol, SSE framing, usage, lengths, chunking, metrics,
//! startup delay, error injection, crash, ground-truth log, wall-clock latency behaviour,
//! the prefill/decode roles in both PD protocols, a two-rank gang),
//! and the `orchestrate mock-server` binary (listening line, signals, exit codes), plus an
//! ignored capacity benchmark. Precise latency-curve checks live in the virtual-clock unit
//! tests (crates/mock/src/simulate.rs).

mod capacity;
mod cli;
pub(crate) mod client;
mod gang;
mod latency;
mod options;
mod pd;
mod prefix;
mod protocol;
