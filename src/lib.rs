//! `orchestrate` benchmarks LLM inference servers end to end from one declarative task file.
//!
//! The flow, one module boundary per arrow:
//!
//! ```text
//! task file --spec (parse + validate)--> Task --plan (matrix x templates x hosts)--> Plan
//! Plan --provider--> running instances (local processes, Docker containers, SSH hosts)
//! instances --readiness--> ready endpoint --client, per point--> request records
//! records --metrics--> summaries --archive--> results/<task>/<run>/ --report--> md/html/svg
//! (or, with `benchmark.external`: instance --exec--> another tool's output --external-->
//! summaries)
//! always: teardown through the shutdown token (also on error, Ctrl-C, SIGTERM)
//! ```
//!
//! Data flows one way. Only `runner`, `provider`, `readiness`, `client`, `mock`, `ssh` and
//! `shutdown` are async; everything else is synchronous and pure.

pub mod archive;
pub mod check;
pub mod cli;
pub mod client;
pub mod client_agent;
pub mod dataset;
pub mod deploy;
pub mod external;
pub mod fetch;
pub mod hosts;
pub mod interop;
pub mod load;
pub mod matrix;
pub mod metrics;
pub mod mock;
pub mod plan;
pub mod provider;
pub mod readiness;
pub mod report;
pub mod runner;
pub mod runs;
pub mod shutdown;
pub mod spec;
pub mod ssh;
pub mod template;
pub mod units;
pub mod validity;
