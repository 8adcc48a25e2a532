//! Runner events: the only thing the runner tells the outside world while it works.
//! Reporters (terminal progress, tests) consume them; nothing else is shared.

use std::path::Path;
use std::time::Duration;

use crate::archive::{PointStatus, RunStatus};

/// Something that happened during a run.
#[derive(Debug)]
pub enum Event<'a> {
    RunStarted {
        run_dir: &'a Path,
        deployments: usize,
        points: usize,
    },
    DeploymentStarting {
        id: &'a str,
    },
    /// A step of a deployment's start worth showing while it waits (`ray: 1/2 nodes`).
    DeploymentProgress {
        id: &'a str,
        text: &'a str,
    },
    DeploymentReady {
        id: &'a str,
        after: Duration,
    },
    /// The deployment failed; told once, with its first cause.
    DeploymentFailed {
        id: &'a str,
        /// The first cause and when it came (multi-line: the log tail follows).
        error: &'a str,
        /// `None`: it failed while starting. Else it had become ready: what its failure left.
        kept: Option<Kept>,
    },
    PointStarted {
        ordinal: usize,
        total: usize,
        id: &'a str,
        repetition: u32,
    },
    PointProgress {
        ordinal: usize,
        total: usize,
        id: &'a str,
        done: u64,
        failed: u64,
        in_flight: u64,
        output_tokens_per_s: f64,
    },
    PointFinished {
        ordinal: usize,
        total: usize,
        id: &'a str,
        status: PointStatus,
        error: Option<&'a str>,
    },
    RunFinished {
        status: RunStatus,
        run_dir: &'a Path,
    },
}

/// What a deployment that failed after it became ready left behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kept {
    /// Its points completed before the failure (their results are kept).
    pub completed: usize,
    /// Its points not begun (recorded as not run).
    pub not_run: usize,
}

impl Event<'_> {
    /// How a `DeploymentFailed` is headed: `failed to start`, or, once it was ready,
    /// `failed (2 completed point(s) kept, 1 not run)`.
    pub fn failed_headline(kept: Option<Kept>) -> String {
        match kept {
            None => "failed to start".to_string(),
            Some(k) => format!(
                "failed ({} completed point(s) kept, {} not run)",
                k.completed, k.not_run
            ),
        }
    }
}

/// Receives runner events.
pub trait Reporter: Send + Sync {
    fn event(&self, event: &Event<'_>);
}
