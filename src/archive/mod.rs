//! The results archive: `results/<task>/<run-id>/`, written as the run goes so that a crash
//! loses at most the point in flight. Owns the on-disk layout, the manifest types and atomic
//! writes; does not compute metrics (metrics) or render reports (report).
//!
//! ```text
//! results/<task>/<run-id>/
//!   manifest.json                 `Manifest` (manifest.rs, with FORMAT_VERSION)
//!   repro.md                      how to start the same processes again (repro.rs)
//!   logs/<role>-r<R>-n<N>.log     one deployment; logs/<deployment>/<role>-r<R>-n<N>.log for several
//!   points/<point>/requests.jsonl one line per request, streamed as requests finish
//!   points/<point>/summary.json   the point's summary (vllm bench serve field names)
//!   points/<point>/timeseries.json client and server series on the run's clock
//!   points/<point>/telemetry/, gpu_samples.jsonl   GPU samples (`run --telemetry`)
//!   summary.csv, summary.json     every finished point, rewritten after each point
//!   search/<deployment>.slo_search.json  a deployment's capacity search (`benchmark.search`)
//! results/<task>/latest -> <run-id>
//! ```
//!
//! A point measured several times (`repetitions: N`) has one directory per repetition:
//! `points/<point>` for the first, `points/<point>.rep<k>` for k >= 2.
//!
//! `manifest` holds the manifest types and reads them back, `process` the per-process and
//! invocation records in it, `repro` the reproduction text made from them, `gates` the validity verdict a
//! point record holds, `run_dir` the open run directory ([`Archive`]) and the listing of
//! runs, `requests` the streamed requests.jsonl (and reads it back), `search` a deployment's capacity search, `rescore` new goodput SLOs or trims applied to a read run, `timeseries` a point's time series,
//! `summary` the run-level summary.csv,
//! `atomic` the all-or-nothing writes. The read side: `read` gives a point's summary, load
//! and verdict typed ([`PointSummary`], `plan::LoadPlan`, [`Validity`]); `fold` reads a whole
//! run into rows, repetitions folded ([`Run`], [`Row`]), for report and check alike.

mod atomic;
mod fold;
mod gates;
mod manifest;
mod planned;
mod process;
mod read;
mod repro;
mod requests;
mod rescore;
mod run_dir;
mod search;
mod summary;
mod timeseries;

pub use fold::{
    Group, LENGTH_AXES, Row, Run, RunSearch, group_of, median, read_run, relative_spread,
    trimmed_windows,
};
pub use gates::{Gate, Validity, Verdict};
pub use manifest::{
    DeploymentRecord, DeploymentStatus, FORMAT_VERSION, MANIFEST, Manifest, PointRecord,
    PointStatus, RunStatus, SearchEntry, ToolInfo, read_manifest,
};
pub use planned::{ImportedLoad, ImportedShape, PlannedLoad, PlannedShape, PointLoad};
pub use process::{ExitRecord, ImageRecord, Invocation, ProcessRecord, ServerVersion};
pub use read::{
    PointSummary, TrimmedWindow, axes_label, planned_lengths, read_point_summary, value_text,
};
pub use repro::{REPRO, repro_text};
pub use requests::{RequestsWriter, read_requests};
pub use rescore::{Rescore, rescore};
pub use run_dir::{Archive, list_runs};
pub use search::read_search;
pub use summary::CSV_METRICS;
pub use timeseries::{TIMESERIES, read_timeseries};

use std::path::PathBuf;

/// Archive failures.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("failed to write {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a valid run manifest: {message}")]
    Invalid { path: PathBuf, message: String },
    #[error(
        "{path} does not read: {message}. It is a measured point's summary: restore it from a copy (the point's requests are in requests.jsonl beside it), or measure the point again in a new run"
    )]
    Damaged { path: PathBuf, message: String },
    #[error(
        "{path} has archive format {found}, this orchestrate reads format {FORMAT_VERSION}; use a matching orchestrate version"
    )]
    Version { path: PathBuf, found: u32 },
}
