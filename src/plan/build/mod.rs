//! The resolver: task x matrix x hosts -> [`Plan`](crate::plan::Plan). Normalizes the roles
//! (roles), takes the sweep grouped into deployments (plan/sweep), places instances
//! (plan/role), renders every deployment string per instance with its variables
//! (deployment, vars, env), and builds each point's load (plan/point). Every check reports
//! the field's location.
//!
//! `builder` holds what every step shares (the task, the context, the renderer, the ports
//! handed out) and renders with located errors; `task` assembles the plan; `resolved` is
//! the task as the manifest keeps it; `named` plans each of `deployments:` and joins them.

mod container;
mod deployment;
mod env;
mod named;
mod resolved;
mod roles;
mod task;
mod vars;

pub use task::build;
