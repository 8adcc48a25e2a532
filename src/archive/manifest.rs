//! manifest.json: what ran, where, and how each part ended; the format version, the
//! statuses of the run, its deployments and points, and reading a manifest back.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::ArchiveError;
use super::gates::Validity;
use super::planned::PointLoad;

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
    /// Stopped part-way by Ctrl-C / SIGTERM (its partial results are kept, not judged);
    /// `run --resume` measures it again. Added after format 1's first archives: older ones
    /// record such a point `failed`.
    Interrupted,
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
        Interrupted => "interrupted",
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
    /// The model the entry server named at `/v1/models`, where the task names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_model: Option<String>,
    /// Its capacity search (`benchmark.search`), once it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<SearchEntry>,
    /// GPUs the plan gives it: over its roles, instances x `resources.gpu` count; `None`
    /// when no role asks for GPUs (and in archives written before this field). Reports
    /// divide throughput by it where a point's telemetry counted no GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
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
    /// The load as planned (client shape, dataset, ...): the `plan::LoadPlan`, or part of
    /// one for an imported run; readers use `planned()`.
    pub load: PointLoad,
    pub status: PointStatus,
    pub error: Option<String>,
    pub started_at: Option<DateTime<Utc>>,
    pub ended_at: Option<DateTime<Utc>>,
    /// Validity gates and their verdict, once evaluated.
    pub validity: Option<Validity>,
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
    let bytes = fs::read(&path).map_err(|source| ArchiveError::Read {
        path: path.clone(),
        source,
    })?;
    let value = json_value(&bytes).map_err(|message| ArchiveError::Invalid {
        path: path.clone(),
        message,
    })?;
    let found = value["format_version"].as_u64().unwrap_or(0) as u32;
    if found != FORMAT_VERSION {
        return Err(ArchiveError::Version { path, found });
    }
    // The typed parts of each point first, so that a bad value is an error naming the
    // point and the field, not only a line and column.
    for point in value["points"].as_array().into_iter().flatten() {
        check_point(point).map_err(|message| ArchiveError::Invalid {
            path: path.clone(),
            message,
        })?;
    }
    serde_json::from_value(value).map_err(|e| ArchiveError::Invalid {
        path: path.clone(),
        message: e.to_string(),
    })
}

/// The manifest's bytes as JSON; an error says why it is not (not UTF-8, not JSON, cut short)
/// and where (line, column and byte offset), and what to do.
fn json_value(bytes: &[u8]) -> Result<serde_json::Value, String> {
    const RESTORE: &str = "restore manifest.json from a copy of the run";
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let at = e.valid_up_to();
        let (line, column) = line_column(&bytes[..at]);
        format!(
            "not UTF-8 text at line {line}, column {column} (byte {at}, 0x{:02x}); {RESTORE}",
            bytes[at]
        )
    })?;
    serde_json::from_str(text).map_err(|e| {
        let (line, column) = (e.line(), e.column());
        // serde_json counts columns in bytes from 1; the byte offset follows.
        let offset = text
            .split_inclusive('\n')
            .take(line.saturating_sub(1))
            .map(str::len)
            .sum::<usize>()
            + column.saturating_sub(1);
        let what = e.to_string();
        let what = what
            .split(" at line ")
            .next()
            .unwrap_or_default()
            .to_string();
        let what = if e.is_eof() {
            format!("it ends early, as if cut short ({what})")
        } else {
            what
        };
        format!("not JSON at line {line}, column {column} (byte {offset}): {what}; {RESTORE}")
    })
}

/// The 1-based line and column (in characters) just after `before` (valid UTF-8).
fn line_column(before: &[u8]) -> (usize, usize) {
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let column = String::from_utf8_lossy(&before[line_start..])
        .chars()
        .count()
        + 1;
    (line, column)
}

/// Whether a point's `load` and `validity` read; the error names the point and the field.
fn check_point(point: &serde_json::Value) -> Result<(), String> {
    let at = |field: &str, e: serde_json::Error| {
        let text = |k: &str| point[k].as_str().unwrap_or("?").to_string();
        format!(
            "point `{}` (points/{}): field `{field}`: {e}",
            text("id"),
            text("dir")
        )
    };
    if let Some(load) = point.get("load") {
        PointLoad::deserialize(load).map_err(|e| at("load", e))?;
    }
    if let Some(validity) = point.get("validity").filter(|v| !v.is_null()) {
        Validity::deserialize(validity).map_err(|e| at("validity", e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_garbled_manifest_says_why_and_where() {
        let err = json_value(b"{\n  \"task\": \"d\xe9mo\"\n}").unwrap_err();
        assert!(
            err.starts_with("not UTF-8 text at line 2, column 13 (byte 14, 0xe9)"),
            "{err}"
        );
        let err = json_value(b"{\n  \"task\": demo\n}").unwrap_err();
        assert!(
            err.starts_with("not JSON at line 2, column 11 (byte 12): expected value"),
            "{err}"
        );
        let err = json_value(b"{\"points\": [").unwrap_err();
        assert!(err.contains("it ends early, as if cut short"), "{err}");
        assert!(
            err.ends_with("restore manifest.json from a copy of the run"),
            "{err}"
        );
        assert!(json_value(b"{\"a\": 1}").is_ok());
    }
}

/// The manifest's record of a deployment's search.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SearchEntry {
    /// The result so far, relative to the run directory.
    pub file: String,
    /// The search stopped by itself: its result is final. False while it runs, and when the
    /// run or the deployment ended first.
    pub finished: bool,
    /// Every start of the deployment during the search, in order: each process's pid
    /// (`<role>-<index>` -> pid; absent for a container or a remote process without one).
    /// More than one when the search re-deployed the server (`repeat_deployments`).
    pub starts: Vec<BTreeMap<String, Option<u32>>>,
    /// The point directory of each measurement, in the order of the result's `iterations`.
    pub points: Vec<String>,
}

impl SearchEntry {
    /// The entry of deployment `deployment`'s search, nothing measured yet.
    pub fn new(deployment: &str) -> SearchEntry {
        SearchEntry {
            file: format!("search/{deployment}.slo_search.json"),
            ..SearchEntry::default()
        }
    }
}
