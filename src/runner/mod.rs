//! The run loop and the orchestration around it. A run of a plan: for each deployment,
//! launch its instances -> wait until ready -> measure every point -> stop; the archive is
//! updated after every step so a crash loses at most the point in flight. The runner
//! executes and emits [`Event`]s to a [`Reporter`]; it draws nothing itself (the terminal
//! reporters are `cli`'s), computes no statistics (see `metrics`), and reaches hosts,
//! providers and Slurm through `fleet`.
//!
//! `scheduler` runs several tasks at once (each: its hosts through `fleet`, then `run`);
//! `resume` reopens an interrupted run; `run` runs one plan, `deployment` one deployment:
//! its Slurm nodes (`fleet::slurm`), its roles started (`launch`; `gang`: a role's processes in their
//! `startup_order`, Ray gangs' node counts; `instances`: launching one, watching for exits,
//! stopping), the `topology` check (which role is a router, and that it reports its
//! workers), then each point: `measure` (a sweep point, through `sample`, which `bench`
//! shares) or `external` (an external command), or the deployment's capacity search
//! (`search`: its levels measured as points, the deployment started again when it asks);
//! `failure` finds and tells a running deployment's failure once (its first cause, when,
//! what was kept). `bookkeeping` records points in the archive
//! (its failure, [`RunError`](bookkeeping::RunError), stops the run); `processes` what the
//! manifest records of each process (and of the invocation); `events` what the runner tells
//! the outside world. `telemetry` runs the GPU samplers beside a point (started and stopped
//! by measure), `gpu_figures` reads their samples into the point's figures. `pod_addresses`
//! puts the IPs of Kubernetes pods already started into the commands of the next ones.
//! `escalation` says which later points escalate an over-saturated one
//! (`over_saturation: stop` skips them).
//!
//! Imports between these files are one way: events, bookkeeping, processes, instances,
//! topology, sample, gpu_figures and escalation at the bottom; then pod_addresses; then telemetry, gang,
//! external, measure, search, launch; then failure; then deployment, run, scheduler.

mod bookkeeping;
mod deployment;
mod escalation;
mod events;
mod external;
mod failure;
mod gang;
mod gpu_figures;
mod instances;
mod launch;
mod measure;
mod pod_addresses;
mod processes;
pub mod resume;
mod run;
pub mod sample;
pub mod scheduler;
mod search;
mod telemetry;
mod topology;

// `measure` names the remote client's site as `super::remote_client`.
use crate::fleet::remote_client;

pub use events::{Event, Kept, Reporter};
