//! The run loop and the orchestration around it. A run of a plan: for each deployment,
//! launch its instances -> wait until ready -> measure every point -> stop; the archive is
//! updated after every step so a crash loses at most the point in flight. The runner
//! executes and emits events; it draws nothing itself (see `progress`, `board`) and computes
//! no statistics (see `metrics`).
//!
//! `run` runs one plan, `deployment` one deployment, `measure` one sweep point and
//! `external` one external command; `processes` what the manifest records of each process
//! (and of the invocation); `providers` picks the provider of each instance, `hosts`
//! owns remote hosts (pool, pre-flight, locks), `scheduler` runs several tasks at once and
//! `resume` reopens an interrupted run; `gang` starts a role's processes in their
//! `startup_order` and waits for Ray gangs' node counts; `topology` says which role is a
//! router and checks that it reports its workers once every role is ready.

mod board;
mod bookkeeping;
mod deployment;
mod events;
mod external;
mod gang;
pub mod hosts;
mod measure;
mod processes;
mod progress;
pub mod providers;
mod remote_client;
pub mod resume;
mod run;
pub mod sample;
pub mod scheduler;
mod slurm;
mod topology;

pub use board::{Board, BoardReporter};
pub use events::{Event, Reporter};
pub use progress::TerminalReporter;
pub use providers::{ProviderSet, Providers};
pub use run::{RunError, RunResult, manifest_for, run};
