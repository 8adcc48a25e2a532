//! The load of one point: the benchmark section (merged with its profile), overridden by
//! load axes of the same name (read to their types in the sweep), templates rendered,
//! parsed into the client's types.
//!
//! `load` builds a point's [`LoadPlan`](super::LoadPlan) through the `resolver` (one value
//! of the point, axis or rendered field), which also parses the `dataset` section;
//! `settings` reads the benchmark settings that are the same for every point, and a point's
//! goodput SLOs; `search` reads `benchmark.search` and checks the deployments it searches.

mod dataset;
mod load;
mod resolver;
mod search;
mod settings;

pub(super) use load::load_plan;
pub(super) use search::{check_deployments, search};
pub(super) use settings::{repetitions, thresholds, validity};
