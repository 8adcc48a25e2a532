//! manifest.json: what ran, where, and how each part ended; the format version, the
//! statuses of the run, its deployments and points, and reading a manifest back.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::ArchiveError;

/// Version of the archive format. Changelog:
/// - 1: first version (manifest, `points/<id>/{summary.json,requests.jsonl}`, summary.csv/json).
///   Added later, optional on reading: `tool.commit`, `invocation`, the typed per-process
///   fields of `deployments[].instances` ([`super::ProcessRecord`]) and `repro.md`.
pub const FORMAT_VERSION: u32 = 1;

/// The manifest file name.
pub const MANIFEST: &str = "manifest.json";
/// Status of a whole run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// In progress (or the runner was killed before it could say otherwise).
    Running,
    /// Every point completed.
    Completed,
    /// At least one deployment or point failed.
    Failed,
    /// Stopped by Ctrl-C / SIGTERM.
    Interrupted,
}

/// Status of one deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeploymentStatus {
    Pending,
    Starting,
    Ready,
    Failed,
    Stopped,
}

/// Status of one measured point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PointStatus {
    Pending,
    Running,
    Completed,
    Failed,
    /// Not run: its deployment failed, or the run stopped first.
    Skipped,
}

/// Each status as its manifest spelling (`completed`, `failed`, ...), for tables and reports.
macro_rules! status_text {
    ($($ty:ident { $($variant:ident => $text:literal),+ $(,)? })+) => {$(
        impl $ty {
            /// The manifest spelling of this status.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $text),+
                }
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    )+};
}

status_text! {
    RunStatus {
        Running => "running",
        Completed => "completed",
        Failed => "failed",
        Interrupted => "interrupted",
    }
    DeploymentStatus {
        Pending => "pending",
        Starting => "starting",
        Ready => "ready",
        Failed => "failed",
        Stopped => "stopped",
    }
    PointStatus {
        Pending => "pending",
        Running => "running",
        Completed => "completed",
        Failed => "failed",
        Skipped => "skipped",
    }
}

/// The tool that wrote the archive.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ToolInfo {
    pub name: String,
    pub version: String,
    /// The git commit it was built from, when the build knew it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
}

impl ToolInfo {
    pub fn current() -> Self {
        Self {
            name: env!("CARGO_PKG_NAME").to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            commit: option_env!("ORCHESTRATE_GIT_COMMIT")
                .filter(|c| !c.is_empty())
                .map(str::to_string),
        }
    }
}

/// manifest.json: what ran, where, and how each part ended.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Manifest {
    pub format_version: u32,
    pub tool: ToolInfo,
    pub run_id: String,
    pub task: String,
    pub backend: String,
    pub model: String,
    /// Free label for the run index (`orchestrate runs --tag`).
    pub tag: Option<String>,
    pub source: PathBuf,
    pub spec_hash: String,
    pub started_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
    pub status: RunStatus,
    /// The task as resolved, secrets redacted.
    pub resolved: serde_json::Value,
    /// Facts about each host used (OS, GPUs, engine versions), keyed by host name.
    pub hosts: BTreeMap<String, serde_json::Value>,
    pub deployments: Vec<DeploymentRecord>,
    pub points: Vec<PointRecord>,
    /// The command line that made the run (absent in archives of older versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invocation: Option<super::Invocation>,
}

/// One deployment's fate.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DeploymentRecord {
    pub id: String,
    pub axes: BTreeMap<String, serde_json::Value>,
    pub status: DeploymentStatus,
    /// Seconds from launch until every role was ready.
    pub time_to_ready_s: Option<f64>,
    pub error: Option<String>,
    /// Each process (argv, env, pid or container, image digest, exit...), `<role>-<index>`
    /// keyed: a [`super::ProcessRecord`] each; read them with `processes()`.
    pub instances: BTreeMap<String, serde_json::Value>,
}

impl DeploymentRecord {
    /// The processes, typed, in key order (entries that do not read are left out).
    pub fn processes(&self) -> Vec<(&str, super::ProcessRecord)> {
        self.instances
            .iter()
            .filter_map(|(k, v)| Some((k.as_str(), super::ProcessRecord::from_value(v)?)))
            .collect()
    }
}

/// One measured point (one repetition of it).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PointRecord {
    pub id: String,
    pub deployment: String,
    /// 1-based repetition number.
    pub repetition: u32,
    /// Directory under points/.
    pub dir: String,
    pub axes: BTreeMap<String, serde_json::Value>,
    /// The load as planned (client shape, dataset, ...): a serialized `plan::LoadPlan`, or
    /// part of one for an imported run; read it with `load_plan()` or `planned()`.
    pub load: serde_json::Value,
    pub status: PointStatus,
    pub error: Option<String>,
    pub started_at: Option<DateTime<Utc>>,
    pub ended_at: Option<DateTime<Utc>>,
    /// Validity gates and their verdict, once evaluated: a serialized `Validity`; read it
    /// with `verdict()`.
    pub validity: Option<serde_json::Value>,
}

impl PointRecord {
    /// The directory name of repetition `repetition` of point `id`.
    pub fn dir_name(id: &str, repetition: u32) -> String {
        if repetition <= 1 {
            id.to_string()
        } else {
            format!("{id}.rep{repetition}")
        }
    }
}
/// Read and check a run directory's manifest.
pub fn read_manifest(dir: &Path) -> Result<Manifest, ArchiveError> {
    let path = dir.join(MANIFEST);
    let text = fs::read_to_string(&path).map_err(|source| ArchiveError::Read {
        path: path.clone(),
        source,
    })?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| ArchiveError::Invalid {
            path: path.clone(),
            message: e.to_string(),
        })?;
    let found = value["format_version"].as_u64().unwrap_or(0) as u32;
    if found != FORMAT_VERSION {
        return Err(ArchiveError::Version { path, found });
    }
    let manifest: Manifest = serde_json::from_value(value).map_err(|e| ArchiveError::Invalid {
        path: path.clone(),
        message: e.to_string(),
    })?;
    for point in &manifest.points {
        point.check().map_err(|message| ArchiveError::Invalid {
            path: path.clone(),
            message,
        })?;
    }
    Ok(manifest)
}
