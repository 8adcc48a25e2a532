//! `telemetry:`: GPU telemetry beside every point of the task (issue #26): on or off, which
//! tool samples the GPUs, how often, and (for tests and odd hosts) a command in its place.

use serde::{Deserialize, Serialize};
use serde_saphyr::Spanned;

use crate::spec::values::NonZeroDurationValue;

/// The tool that samples a host's GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GpuTool {
    /// nvidia-smi's CSV query loop (no energy counter: energy is integrated power).
    #[default]
    NvidiaSmi,
    /// The DCGM exporter's `/metrics` page on the host, scraped there with curl (its energy
    /// counter where the exporter exports one).
    Dcgm,
    /// amd-smi's JSON metrics, falling back to rocm-smi where amd-smi is missing (both have
    /// an energy counter).
    AmdSmi,
}

impl GpuTool {
    /// The name written in the task file and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            GpuTool::NvidiaSmi => "nvidia-smi",
            GpuTool::Dcgm => "dcgm",
            GpuTool::AmdSmi => "amd-smi",
        }
    }
}

/// `telemetry:` of a task. Present turns telemetry on (unless `enabled: false`); the flags
/// of `orchestrate run` override each key.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetrySpec {
    /// Sample the GPUs (default true when `telemetry:` is written; `false` turns it off).
    #[serde(default)]
    pub enabled: Option<bool>,
    /// `nvidia-smi` (default), `dcgm` (the DCGM exporter's `/metrics`) or `amd-smi` (with
    /// rocm-smi as its fallback).
    #[serde(default)]
    pub tool: Option<Spanned<GpuTool>>,
    /// Time between two samples (default 500ms).
    #[serde(default)]
    pub interval: Option<Spanned<NonZeroDurationValue>>,
    /// The DCGM exporter's address on each host (default `http://localhost:9400/metrics`);
    /// only with `tool: dcgm`.
    #[serde(default)]
    pub dcgm_url: Option<Spanned<String>>,
    /// A shell command run on each host in place of the tool; it must print what the
    /// sampler of `tool` prints (docs/metrics.md).
    #[serde(default)]
    pub command: Option<Spanned<String>>,
}
