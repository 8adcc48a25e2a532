//! `orchestrate` benchmarks LLM inference servers end to end from one declarative task file.
//!
//! The flow, one module boundary per arrow:
//!
//! ```text
//! task file --spec (parse + validate)--> Task --plan (matrix x templates x hosts)--> Plan
//! Plan --provider--> running instances (local processes, Docker containers, SSH hosts,
//!                     Slurm job steps)
//! instances --readiness--> ready endpoint --client, per point--> request records
//! records --metrics--> summaries --archive--> results/<task>/<run>/ --report--> md/html/svg
//! (or, with `benchmark.external`: instance --exec--> another tool's output --external-->
//! summaries)
//! always: teardown through the shutdown token (also on error, Ctrl-C, SIGTERM)
//! ```
//!
//! The module map, lowest layer first; a module imports only modules of lower layers
//! (tests/it/layers.rs checks it). Leaf tools: `units` (durations, sizes, number text),
//! `shutdown` (the cancellation token and emergency kills), `template` (minijinja) and `fetch`
//! (one small HTTP client for the cold paths: probes, scrapes, the server tokenizer); `units`
//! and `fetch` live in the `orchestrate-base` crate (crates/base), which the mock server
//! shares, and are re-exported here under their old paths. Leaf values the task file names: `load` (backend, endpoint, load shape), `deploy` (GPUs,
//! volumes, container wiring, reach), `dataset` (prompt sources and tokenizers), `matrix`
//! (sweep axes to points) and `external` (another tool's output). The inputs: `spec` (the task
//! file, errors with file:line:col) and `hosts` (the hosts file). `plan` resolves them into
//! what a run does, with its template variables and plan-side pre-flight. The parts: `ssh`
//! (sessions off the async runtime), `client` (the load generator, with its own measured
//! HTTP/1.1), `telemetry` (GPU tools' output parsed into samples, and a window's energy, power
//! and price figures); then `provider` (starts and owns instances), `metrics` (records to figures) and `client_agent` (the client on a remote host); then
//! `slurm` (allocations and job steps, started through the local provider) and `search` (the
//! capacity search: which load level next, and its verdict with a confidence bound, from
//! request samples; pure but for an async driver that awaits a caller's measure callback);
//! then `fleet`
//! (what a run runs on beyond this process: the remote host pool with its pre-flight and
//! locks, the provider set, each deployment's Slurm allocations, our client installed on a
//! remote host); then `readiness` and `archive` (the versioned run record, written as the run
//! goes and read back typed). Readers of the archive only: `runs`, `validity`, `report`,
//! `check`, `interop`. `runner` executes plans: the run loop, one deployment at a time (its
//! gangs started, its topology checked), the measure-a-point function that `bench` shares,
//! the scheduler of several tasks, and resume; it emits events to a reporter. `cli` parses
//! arguments, draws the runner's events on the terminal, calls the library and maps errors
//! to exit codes.
//!
//! Only `runner`, `fleet`, `slurm`, `provider`, `readiness`, `client`, `ssh` and `shutdown`
//! are async; everything else is synchronous and pure.
//!
//! The built-in mock inference server is its own crate, `orchestrate-mock` (crates/mock);
//! `cli` runs it as `orchestrate mock-server`.

pub use orchestrate_base::{fetch, units};

pub mod archive;
pub mod check;
pub mod cli;
pub mod client;
pub mod client_agent;
pub mod dataset;
pub mod deploy;
pub mod external;
pub mod fleet;
pub mod hosts;
pub mod interop;
pub mod load;
pub mod matrix;
pub mod metrics;
pub mod plan;
pub mod provider;
pub mod readiness;
pub mod report;
pub mod runner;
pub mod runs;
pub mod search;
pub mod shutdown;
pub mod slurm;
pub mod spec;
pub mod ssh;
pub mod telemetry;
pub mod template;
pub mod validity;
