//! dstack's task and service files, run unchanged: the table of every key of dstack's
//! configuration reference (honored here, or accepted and ignored because orchestrate runs
//! on the user's own hosts), the dstack-only values (probes, startup order, stop criteria,
//! `model: {name, format}`, volume maps), and the step that turns what a dstack file says
//! into orchestrate's own fields, with one [`Note`] per dstack key for `plan`.
//!
//! Owns: what each dstack key means here. Does not own: parsing the rest of the file (types,
//! load) or running anything (plan, providers).
//!
//! Layout: [`keys`] is the table of every key (and the [`Note`] a written key gives);
//! `translate` turns a parsed file into orchestrate's fields, with `launch` (what the launch
//! command says), `container` (dstack's images and container keys), `ranges` (autoscaling),
//! `replica_groups` (a service's replica groups and router as roles), `node_groups` (a
//! task's node groups as one gang) and `unsupported`
//! (ignored keys). The dstack-only value forms
//! are parsed with the rest of the file, in `spec::types`, and re-exported here.

mod container;
pub mod keys;
mod launch;
mod node_groups;
mod ranges;
mod replica_groups;
mod translate;
mod unsupported;

pub use super::types::dstack_groups::{GroupSpec, ReplicasSpec, RouterKind, RouterSpec};
pub use super::types::dstack_values::{
    ProbeSpec, Replicas, ScalingSpec, StartupOrder, StopCriteria,
};
pub use keys::{KEYS, Note, Treatment};
pub use ranges::override_replicas;
pub use translate::normalize;
