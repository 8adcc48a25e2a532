//! The results archive: `results/<task>/<run-id>/`, written as the run goes so that a crash
//! loses at most the point in flight. Owns the on-disk layout, the manifest types and atomic
//! writes; does not compute metrics (metrics) or render reports (report).
//!
//! ```text
//! results/<task>/<run-id>/
//!   manifest.json                 this file's `Manifest` (FORMAT_VERSION below)
//!   logs/<role>-<i>.log           one deployment; logs/<deployment>/<role>-<i>.log for several
//!   points/<point>/requests.jsonl one line per request, streamed as requests finish
//!   points/<point>/summary.json   the point's summary (vllm bench serve field names)
//!   summary.csv, summary.json     every finished point, rewritten after each point
//! results/<task>/latest -> <run-id>
//! ```
//!
//! A point measured several times (`repetitions: N`) has one directory per repetition:
//! `points/<point>` for the first, `points/<point>.rep<k>` for k >= 2.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Version of the archive format. Changelog:
/// - 1: first version (manifest, points/<id>/{summary.json,requests.jsonl}, summary.csv/json).
pub const FORMAT_VERSION: u32 = 1;

/// The manifest file name.
pub const MANIFEST: &str = "manifest.json";

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
        "{path} has archive format {found}, this orchestrate reads format {FORMAT_VERSION}; use a matching orchestrate version"
    )]
    Version { path: PathBuf, found: u32 },
}

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

/// The tool that wrote the archive.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ToolInfo {
    pub name: String,
    pub version: String,
}

impl ToolInfo {
    pub fn current() -> Self {
        Self {
            name: env!("CARGO_PKG_NAME").to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
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
    /// Facts about each instance (pid, container id, image digest...), `<role>-<index>` keyed.
    pub instances: BTreeMap<String, serde_json::Value>,
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
    /// The load as planned (client shape, dataset, ...).
    pub load: serde_json::Value,
    pub status: PointStatus,
    pub error: Option<String>,
    pub started_at: Option<DateTime<Utc>>,
    pub ended_at: Option<DateTime<Utc>>,
    /// Validity gates and their verdict, once evaluated.
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

/// An open run directory.
#[derive(Debug)]
pub struct Archive {
    dir: PathBuf,
    manifest: Manifest,
}

impl Archive {
    /// Create `<results>/<task>/<run-id>/`, write the first manifest and point `latest` at it.
    pub fn create(results: &Path, manifest: Manifest) -> Result<Self, ArchiveError> {
        let task_dir = results.join(&manifest.task);
        let dir = task_dir.join(&manifest.run_id);
        fs::create_dir_all(dir.join("logs")).map_err(|source| ArchiveError::Write {
            path: dir.clone(),
            source,
        })?;
        fs::create_dir_all(dir.join("points")).map_err(|source| ArchiveError::Write {
            path: dir.clone(),
            source,
        })?;
        let archive = Self { dir, manifest };
        archive.save()?;
        archive.point_latest()?;
        Ok(archive)
    }

    /// Open an existing run directory (report, resume).
    pub fn open(dir: &Path) -> Result<Self, ArchiveError> {
        let manifest = read_manifest(dir)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            manifest,
        })
    }

    /// A fresh, sortable run id: `YYYYMMDD-HHMMSS`, suffixed when taken.
    pub fn new_run_id(results: &Path, task: &str, now: DateTime<Utc>) -> String {
        let base = now.format("%Y%m%d-%H%M%S").to_string();
        let task_dir = results.join(task);
        if !task_dir.join(&base).exists() {
            return base;
        }
        (2..)
            .map(|n| format!("{base}-{n}"))
            .find(|id| !task_dir.join(id).exists())
            .expect("an unused run id")
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Change the manifest and write it to disk at once (atomically).
    pub fn update(&mut self, change: impl FnOnce(&mut Manifest)) -> Result<(), ArchiveError> {
        change(&mut self.manifest);
        self.save()
    }

    /// Where an instance's log goes.
    pub fn log_path(&self, deployment: &str, role: &str, index: usize) -> PathBuf {
        let single = self.manifest.deployments.len() <= 1;
        let name = format!("{role}-{index}.log");
        if single {
            self.dir.join("logs").join(name)
        } else {
            self.dir.join("logs").join(deployment).join(name)
        }
    }

    /// The directory of a point's repetition (created).
    pub fn point_dir(&self, dir_name: &str) -> Result<PathBuf, ArchiveError> {
        let dir = self.dir.join("points").join(dir_name);
        fs::create_dir_all(&dir).map_err(|source| ArchiveError::Write {
            path: dir.clone(),
            source,
        })?;
        Ok(dir)
    }

    /// A streaming writer for a point's requests.jsonl (truncates an earlier attempt).
    pub fn requests_writer(&self, dir_name: &str) -> Result<RequestsWriter, ArchiveError> {
        let path = self.point_dir(dir_name)?.join("requests.jsonl");
        let file = File::create(&path).map_err(|source| ArchiveError::Write {
            path: path.clone(),
            source,
        })?;
        Ok(RequestsWriter {
            path,
            out: BufWriter::with_capacity(256 * 1024, file),
            lines: 0,
        })
    }

    /// Write a finished point's summary.json and refresh the run-level summary files.
    pub fn write_point_summary(
        &self,
        dir_name: &str,
        summary: &serde_json::Value,
    ) -> Result<(), ArchiveError> {
        let path = self.point_dir(dir_name)?.join("summary.json");
        write_json_atomic(&path, summary)?;
        self.write_run_summaries()
    }

    /// Read a point's summary.json, if it was written.
    pub fn point_summary(&self, dir_name: &str) -> Option<serde_json::Value> {
        let text =
            fs::read_to_string(self.dir.join("points").join(dir_name).join("summary.json")).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// summary.json (array) and summary.csv over every point that has a summary.
    pub fn write_run_summaries(&self) -> Result<(), ArchiveError> {
        let mut rows = Vec::new();
        for point in &self.manifest.points {
            let Some(summary) = self.point_summary(&point.dir) else {
                continue;
            };
            rows.push(serde_json::json!({
                "point": point.id,
                "deployment": point.deployment,
                "repetition": point.repetition,
                "status": point.status,
                "axes": point.axes,
                "validity": point.validity,
                "summary": summary,
            }));
        }
        write_json_atomic(
            &self.dir.join("summary.json"),
            &serde_json::Value::Array(rows.clone()),
        )?;
        let csv = summary_csv(&rows);
        write_atomic(&self.dir.join("summary.csv"), csv.as_bytes())
    }

    fn save(&self) -> Result<(), ArchiveError> {
        let value = serde_json::to_value(&self.manifest).expect("manifest serializes");
        write_json_atomic(&self.dir.join(MANIFEST), &value)
    }

    fn point_latest(&self) -> Result<(), ArchiveError> {
        let Some(task_dir) = self.dir.parent() else {
            return Ok(());
        };
        let link = task_dir.join("latest");
        let tmp = task_dir.join(format!(".latest.{}", std::process::id()));
        let _ = fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&self.manifest.run_id, &tmp)
            .and_then(|()| fs::rename(&tmp, &link))
            .map_err(|source| ArchiveError::Write { path: link, source })
    }
}

/// Columns of summary.csv taken from each point's summary, in order.
pub const CSV_METRICS: &[&str] = &[
    "completed",
    "failed",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "mean_ttft_ms",
    "median_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "mean_itl_ms",
    "median_itl_ms",
    "p99_itl_ms",
    "mean_e2el_ms",
    "median_e2el_ms",
    "p99_e2el_ms",
];

fn summary_csv(rows: &[serde_json::Value]) -> String {
    let mut axes: Vec<String> = Vec::new();
    for row in rows {
        if let Some(map) = row["axes"].as_object() {
            for key in map.keys() {
                if !axes.contains(key) {
                    axes.push(key.clone());
                }
            }
        }
    }
    let mut out = String::new();
    let mut header = vec![
        "point".to_string(),
        "deployment".into(),
        "repetition".into(),
        "status".into(),
        "valid".into(),
    ];
    header.extend(axes.iter().cloned());
    header.extend(CSV_METRICS.iter().map(|s| s.to_string()));
    out.push_str(&header.join(","));
    out.push('\n');
    for row in rows {
        let mut cells = vec![
            csv_cell(&row["point"]),
            csv_cell(&row["deployment"]),
            csv_cell(&row["repetition"]),
            csv_cell(&row["status"]),
            csv_cell(&row["validity"]["valid"]),
        ];
        cells.extend(axes.iter().map(|a| csv_cell(&row["axes"][a])));
        cells.extend(CSV_METRICS.iter().map(|m| csv_cell(&row["summary"][m])));
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    out
}

fn csv_cell(value: &serde_json::Value) -> String {
    let text = match value {
        serde_json::Value::Null => String::new(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if text.contains([',', '"', '\n']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text
    }
}

/// Streams requests.jsonl; flushed on `flush` and when dropped.
pub struct RequestsWriter {
    path: PathBuf,
    out: BufWriter<File>,
    lines: u64,
}

impl RequestsWriter {
    /// Append one JSON line.
    pub fn write<T: Serialize>(&mut self, record: &T) -> Result<(), ArchiveError> {
        let map = |source| ArchiveError::Write {
            path: self.path.clone(),
            source,
        };
        serde_json::to_writer(&mut self.out, record).map_err(|e| map(e.into()))?;
        self.out.write_all(b"\n").map_err(map)?;
        self.lines += 1;
        Ok(())
    }

    /// Lines written so far.
    pub fn lines(&self) -> u64 {
        self.lines
    }

    /// Push buffered lines to the file.
    pub fn flush(&mut self) -> Result<(), ArchiveError> {
        self.out.flush().map_err(|source| ArchiveError::Write {
            path: self.path.clone(),
            source,
        })
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
    serde_json::from_value(value).map_err(|e| ArchiveError::Invalid {
        path,
        message: e.to_string(),
    })
}

/// Every run directory under `results/` (or under one task), oldest first.
pub fn list_runs(results: &Path, task: Option<&str>) -> Vec<PathBuf> {
    let mut runs = Vec::new();
    let Ok(tasks) = fs::read_dir(results) else {
        return runs;
    };
    for task_dir in tasks.flatten() {
        let name = task_dir.file_name().to_string_lossy().to_string();
        if task.is_some_and(|t| t != name) {
            continue;
        }
        let Ok(entries) = fs::read_dir(task_dir.path()) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let is_link = entry.file_type().map(|t| t.is_symlink()).unwrap_or(true);
            if !is_link && path.join(MANIFEST).is_file() {
                runs.push(path);
            }
        }
    }
    runs.sort_by(|a, b| (a.file_name(), a.parent()).cmp(&(b.file_name(), b.parent())));
    runs
}

fn write_json_atomic(path: &Path, value: &serde_json::Value) -> Result<(), ArchiveError> {
    let mut text = serde_json::to_string_pretty(value).expect("json serializes");
    text.push('\n');
    write_atomic(path, text.as_bytes())
}

/// Write to a temporary file beside `path`, fsync, rename: readers never see half a file.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ArchiveError> {
    let map = |source| ArchiveError::Write {
        path: path.to_path_buf(),
        source,
    };
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let mut file = File::create(&tmp).map_err(map)?;
    file.write_all(bytes).map_err(map)?;
    file.sync_data().map_err(map)?;
    fs::rename(&tmp, path).map_err(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest() -> Manifest {
        Manifest {
            format_version: FORMAT_VERSION,
            tool: ToolInfo::current(),
            run_id: "20261122-180000".into(),
            task: "demo".into(),
            backend: "vllm".into(),
            model: "m".into(),
            tag: None,
            source: "tasks/demo.yaml".into(),
            spec_hash: "abc".into(),
            started_at: "2026-11-22T18:00:00Z".parse().unwrap(),
            ended_at: None,
            status: RunStatus::Running,
            resolved: serde_json::json!({"name": "demo"}),
            hosts: BTreeMap::new(),
            deployments: vec![DeploymentRecord {
                id: "d1".into(),
                axes: BTreeMap::new(),
                status: DeploymentStatus::Pending,
                time_to_ready_s: None,
                error: None,
                instances: BTreeMap::new(),
            }],
            points: vec![PointRecord {
                id: "concurrency=4".into(),
                deployment: "d1".into(),
                repetition: 1,
                dir: "concurrency=4".into(),
                axes: BTreeMap::from([("concurrency".to_string(), serde_json::json!(4))]),
                load: serde_json::json!({}),
                status: PointStatus::Pending,
                error: None,
                started_at: None,
                ended_at: None,
                validity: None,
            }],
        }
    }

    #[test]
    fn manifest_round_trips_and_is_written_as_the_run_goes() {
        let results = tempfile::tempdir().unwrap();
        let mut archive = Archive::create(results.path(), manifest()).unwrap();
        let dir = archive.dir().to_path_buf();
        assert_eq!(read_manifest(&dir).unwrap(), manifest());
        archive
            .update(|m| m.points[0].status = PointStatus::Completed)
            .unwrap();
        assert_eq!(
            read_manifest(&dir).unwrap().points[0].status,
            PointStatus::Completed
        );
        let latest = results.path().join("demo/latest");
        assert_eq!(
            fs::read_link(&latest).unwrap(),
            PathBuf::from("20261122-180000")
        );
        assert_eq!(list_runs(results.path(), Some("demo")), vec![dir]);
    }

    #[test]
    fn point_summaries_feed_the_run_csv() {
        let results = tempfile::tempdir().unwrap();
        let archive = Archive::create(results.path(), manifest()).unwrap();
        let mut writer = archive.requests_writer("concurrency=4").unwrap();
        writer.write(&serde_json::json!({"i": 0})).unwrap();
        writer.flush().unwrap();
        archive
            .write_point_summary(
                "concurrency=4",
                &serde_json::json!({"completed": 8, "mean_ttft_ms": 12.5}),
            )
            .unwrap();
        let csv = fs::read_to_string(archive.dir().join("summary.csv")).unwrap();
        let mut lines = csv.lines();
        let header = lines.next().unwrap();
        assert!(
            header.starts_with(
                "point,deployment,repetition,status,valid,concurrency,completed,failed"
            )
        );
        let row = lines.next().unwrap();
        assert!(
            row.starts_with("concurrency=4,d1,1,pending,,4,8,,"),
            "{row}"
        );
        let jsonl =
            fs::read_to_string(archive.dir().join("points/concurrency=4/requests.jsonl")).unwrap();
        assert_eq!(jsonl, "{\"i\":0}\n");
    }

    #[test]
    fn a_newer_format_is_refused_with_a_clear_error() {
        let results = tempfile::tempdir().unwrap();
        let mut m = manifest();
        m.format_version = FORMAT_VERSION + 1;
        let archive = Archive::create(results.path(), m).unwrap();
        let err = read_manifest(archive.dir()).unwrap_err().to_string();
        assert!(err.contains("archive format 2"), "{err}");
    }

    #[test]
    fn run_ids_do_not_collide() {
        let results = tempfile::tempdir().unwrap();
        let now: DateTime<Utc> = "2026-11-22T18:00:00Z".parse().unwrap();
        let first = Archive::new_run_id(results.path(), "demo", now);
        fs::create_dir_all(results.path().join("demo").join(&first)).unwrap();
        assert_eq!(
            Archive::new_run_id(results.path(), "demo", now),
            format!("{first}-2")
        );
    }
}
