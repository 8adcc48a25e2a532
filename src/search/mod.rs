//! Capacity search: the largest concurrency or request rate at which a deployment meets
//! its SLOs, as an interval [largest passing, smallest failing] with a confidence bound on
//! every verdict. Independent of how a level is measured: the runner and `bench` hand
//! `run` a callback that measures one level and returns its per-request samples.
//!
//! Parts: `spec` (what to search for), `sample` (a request as the SLOs see it), `verdict`
//! (order-statistic and Wilson bounds), `level` (pooled measurements of one level, the
//! bracket), `algorithm` (the state machine choosing levels), `record` (the archived
//! result, a superset of AIPerf's search_history/sla_breach). Definitions:
//! docs/metrics.md (Capacity search).

mod algorithm;
mod level;
mod record;
mod sample;
#[cfg(test)]
mod tests;
mod text;
mod verdict;

use std::future::Future;
use std::time::Instant;

pub use crate::load::search::{Attainment, Axis, PercentileSlo, SearchSpec};
pub use algorithm::{Convergence, Iteration, Probe, Search, Step};
pub use level::{Measurement, Throughput};
pub use record::{Boundary, Edge, Point, SearchRecord};
pub use sample::{Origin, RequestSample, samples};
pub use text::render_text;
pub use verdict::{Check, Verdict, normal_quantile, quantile_ranks, wilson};

/// The name of the archived result.
pub const RESULT_FILE: &str = "slo_search.json";

/// Run a search: `measure` measures one level; `on_iteration` hears each measurement's
/// pooled verdict (progress). An error from `measure` ends the search with that error.
pub async fn run<F, Fut>(
    spec: SearchSpec,
    mut measure: F,
    mut on_iteration: impl FnMut(&Iteration),
) -> anyhow::Result<SearchRecord>
where
    F: FnMut(Probe) -> Fut,
    Fut: Future<Output = anyhow::Result<Measurement>>,
{
    let started = Instant::now();
    let mut search = Search::new(spec);
    while let Some(probe) = search.next_probe() {
        let m = measure(probe).await?;
        search.record(&probe, m);
        if let Some(it) = search.history.last() {
            on_iteration(it);
        }
    }
    Ok(search.result(started.elapsed().as_secs_f64()))
}
