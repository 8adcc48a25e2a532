//! The resolved plan: what a run will do, fully expanded. Built from a validated task, its
//! matrix and the hosts; holds no unexpanded template and no `Option` where a default exists.
//! `orchestrate plan` prints it; the runner executes it. Building it starts nothing.
//!
//! Owns: the plan types and the resolver (`build`, in plan/build/ and plan/point/).
//! Does not own: parsing (spec), matrix expansion (matrix), template rendering (template),
//! execution (runner).
//!
//! Inside, imports go one way, lowest first: `types` (the plan's values) and `context` (the
//! hosts and ports); `render` (the [`build`] state every step shares, and the template
//! variables' names); the parts, each on its own: `secrets`, `kubernetes` (before `role`, which uses it),
//! `role`, `external`, `client`, `preflight`, `gpu_hosts` (which uses `preflight`); `sweep` (the matrix grouped into deployments, load axes read to their
//! types); `point` (a point's load); and last `build`, which assembles the plan from all
//! of them and which nothing imports.

mod build;
mod client;
mod context;
mod external;
mod gpu_hosts;
mod kubernetes;
mod point;
pub mod preflight;
mod render;
mod role;
pub mod secrets;
mod sweep;
mod types;

pub use build::build;
pub use context::{HostFacts, PlanContext};
pub use types::*;
