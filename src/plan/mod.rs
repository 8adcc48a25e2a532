//! The resolved plan: what a run will do, fully expanded. Built from a validated task, its
//! matrix and the hosts; holds no unexpanded template and no `Option` where a default exists.
//! `orchestrate plan` prints it; the runner executes it. Building it starts nothing.
//!
//! Owns: the plan types and the resolver (`build`, in plan/build/ and plan/point/).
//! Does not own: parsing (spec), matrix expansion (matrix), template rendering (template),
//! execution (runner).

mod build;
mod client;
mod context;
mod external;
mod point;
pub mod preflight;
mod role;
pub mod secrets;
mod sweep;
mod types;

pub use build::{VARIABLES, build, variables_table};
pub use client::{ClientHost, ClientPlan};
pub use context::{HostFacts, PlanContext};
pub use types::*;
