//! The regression gate: compare a run with a baseline run, point by point and metric by
//! metric, against direction-aware thresholds (`output_throughput=-5%`: a drop of more than
//! 5 % regresses; `p99_ttft_ms=+10%`: a rise of more than 10 % regresses). Noise-aware: it
//! compares medians over repetitions and widens a threshold to `k x` the observed spread
//! (largest deviation of a repetition from its median, in either run), so run-to-run noise
//! alone does not fail the gate. With two or more repetitions on both sides, a 95 % bootstrap
//! confidence interval of the change decides instead: a point regresses only when the whole
//! interval is worse than the allowed change. Renders the verdict as markdown and JUnit XML. Pure: the
//! CLI (cli/check.rs) resolves runs, writes files and maps the verdict to exit codes.
//!
//! `threshold` parses thresholds, `compare` judges the points and each deployment's
//! capacity search (`capacity=-5%`: its lower bound), `interval` bootstraps the confidence
//! interval of a change, `render` writes markdown and JUnit XML.

mod compare;
mod interval;
mod render;
mod threshold;

pub use compare::{CheckReport, Comparison, Verdict, check};
pub use render::{junit, markdown};
pub use threshold::{
    CheckError, DEFAULT_SEARCH_THRESHOLD, DEFAULT_THRESHOLDS, METRICS, SEARCH_METRICS, Threshold,
    parse_thresholds, thresholds_from_task,
};
