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
    DeploymentFailed {
        id: &'a str,
        error: &'a str,
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

/// Receives runner events.
pub trait Reporter: Send + Sync {
    fn event(&self, event: &Event<'_>);
}
