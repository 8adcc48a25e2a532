//! What every step of building a plan shares, below all of them: the [`Builder`] (the task,
//! the planning context, the renderer, the ports handed out) with its located rendering,
//! and the names of the template variables.
//!
//! Imported by every part of plan/ (role, secrets, sweep, external, client, point and the
//! assembling step, plan/build); imports none of them.

mod builder;
mod variables;

pub(super) use builder::Builder;
pub(super) use variables::{DEPLOYMENT_FIELD_AXES, VARIABLES, reserved_names};
