//! An open run directory, `results/<task>/<run-id>/`: created with its first manifest and
//! `latest` link, updated as the run goes; where logs and points go; and the listing of
//! every run under results/.

use std::fs;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};

use super::atomic::{write_atomic, write_json_atomic};
use super::read::{PointSummary, read_point_summary};
use super::summary::summary_csv;
use super::{
    ArchiveError, DeploymentStatus, MANIFEST, Manifest, PointStatus, RequestsWriter, RunStatus,
    read_manifest,
};

/// The file that holds disk space for the last manifest write of a run (see
/// [`Archive::fail`]).
const RESERVE: &str = ".reserve";
/// Least and most space held: twice the manifest, within these.
const RESERVE_MIN: u64 = 1 << 20;
const RESERVE_MAX: u64 = 64 << 20;

/// An open run directory.
#[derive(Debug)]
pub struct Archive {
    dir: PathBuf,
    manifest: Manifest,
    /// The reserve file, while it holds space.
    reserve: Option<PathBuf>,
}

impl Drop for Archive {
    fn drop(&mut self) {
        self.release_reserve();
    }
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
        let mut archive = Self {
            dir,
            manifest,
            reserve: None,
        };
        archive.save()?;
        archive.point_latest()?;
        archive.reserve_space()?;
        Ok(archive)
    }

    /// Open an existing run directory (report, resume).
    ///
    /// Every point's summary.json that was written must read: a damaged one (truncated,
    /// garbled, a figure that is not a number) is an error naming the file, so that resuming
    /// never drops a measured point from the run's summaries without a word.
    pub fn open(dir: &Path) -> Result<Self, ArchiveError> {
        let manifest = read_manifest(dir)?;
        for point in &manifest.points {
            read_point_summary(dir, &point.dir)?;
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            manifest,
            reserve: None,
        })
    }

    /// Hold disk space for the run's last manifest write: a file of real bytes (twice the
    /// manifest, 1 to 64 MiB) that [`Archive::fail`] removes to make room when the disk is
    /// full; removed when the archive is dropped. `create` calls it; a resumed run calls it
    /// before it writes.
    pub fn reserve_space(&mut self) -> Result<(), ArchiveError> {
        if self.reserve.is_some() {
            return Ok(());
        }
        let manifest_len = serde_json::to_vec(&self.manifest).map_or(0, |v| v.len() as u64);
        let size = (2 * manifest_len).clamp(RESERVE_MIN, RESERVE_MAX);
        let path = self.dir.join(RESERVE);
        let zeros = vec![0u8; RESERVE_MIN as usize];
        let written = fs::File::create(&path).and_then(|mut f| {
            let mut left = size;
            while left > 0 {
                let n = left.min(RESERVE_MIN) as usize;
                std::io::Write::write_all(&mut f, &zeros[..n])?;
                left -= n as u64;
            }
            f.sync_data()
        });
        match written {
            Ok(()) => {
                self.reserve = Some(path);
                Ok(())
            }
            Err(source) => {
                let _ = fs::remove_file(&path);
                Err(ArchiveError::Write { path, source })
            }
        }
    }

    /// Give the reserved space back.
    fn release_reserve(&mut self) {
        if let Some(path) = self.reserve.take() {
            let _ = fs::remove_file(path);
        }
    }

    /// The run cannot go on (the archive could not be written, say the disk is full): free the
    /// reserve, then record the end: the run `failed`, the point in flight failed with
    /// `reason`, the points not reached skipped with it. The reserve is what lets this last
    /// manifest write succeed on a full disk.
    pub fn fail(&mut self, reason: &str) -> Result<(), ArchiveError> {
        self.release_reserve();
        let m = &mut self.manifest;
        m.status = RunStatus::Failed;
        m.ended_at = Some(Utc::now());
        for p in &mut m.points {
            match p.status {
                PointStatus::Running => {
                    p.status = PointStatus::Failed;
                    p.error = Some(reason.to_string());
                    p.ended_at = Some(Utc::now());
                }
                PointStatus::Pending => {
                    p.status = PointStatus::Skipped;
                    p.error = Some(format!("not run: {reason}"));
                }
                _ => {}
            }
        }
        for d in &mut m.deployments {
            if matches!(
                d.status,
                DeploymentStatus::Starting | DeploymentStatus::Ready
            ) {
                d.status = DeploymentStatus::Failed;
                d.error.get_or_insert_with(|| reason.to_string());
            }
        }
        self.save()
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

    /// Where a process's log goes (`name` is `<role>-r<replica>-n<node_rank>`).
    pub fn log_path(&self, deployment: &str, name: &str) -> PathBuf {
        let single = self.manifest.deployments.len() <= 1;
        let name = format!("{name}.log");
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
        RequestsWriter::create(path)
    }

    /// Write a finished point's summary.json (a [`PointSummary`], or what serializes as one,
    /// such as an external tool's result object) and refresh the run-level summary files.
    /// The file is written from the [`PointSummary`] it reads back as.
    pub fn write_point_summary(
        &self,
        dir_name: &str,
        summary: &impl serde::Serialize,
    ) -> Result<(), ArchiveError> {
        let path = self.point_dir(dir_name)?.join("summary.json");
        let invalid = |message: String| ArchiveError::Invalid {
            path: path.clone(),
            message,
        };
        let value = serde_json::to_value(summary).map_err(|e| invalid(e.to_string()))?;
        let serde_json::Value::Object(object) = value else {
            return Err(invalid("a point summary must be a JSON object".into()));
        };
        let typed = PointSummary::from_object(object).map_err(invalid)?;
        write_json_atomic(&path, &typed.to_value())?;
        self.write_run_summaries()
    }

    /// summary.json (array) and summary.csv over every point that has a summary.
    pub fn write_run_summaries(&self) -> Result<(), ArchiveError> {
        let mut rows = Vec::new();
        for point in &self.manifest.points {
            let Some(summary) = read_point_summary(&self.dir, &point.dir)? else {
                continue;
            };
            rows.push(serde_json::json!({
                "point": point.id,
                "deployment": point.deployment,
                "repetition": point.repetition,
                "status": point.status,
                "axes": point.axes,
                "validity": point.validity,
                "summary": summary.to_value(),
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
#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::archive::{
        DeploymentRecord, DeploymentStatus, FORMAT_VERSION, PointRecord, PointStatus, RunStatus,
        ToolInfo,
    };

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
                served_model: None,
                search: None,
                instances: BTreeMap::new(),
                gpus: None,
            }],
            points: vec![PointRecord {
                id: "concurrency=4".into(),
                deployment: "d1".into(),
                repetition: 1,
                dir: "concurrency=4".into(),
                axes: BTreeMap::from([("concurrency".to_string(), serde_json::json!(4))]),
                load: serde_json::from_value(serde_json::json!({
                    "endpoint": "completions",
                    "dataset": {"random": {"input_len": 100, "output_len": 10,
                        "range_ratio": 0.0, "prefix_len": 0}},
                    "tokenizer": null, "ignore_eos": true, "seed": 0, "extra_body": {},
                    "request_timeout": null,
                    "shape": {"max_concurrency": 4, "rate": "unlimited", "ramp_up": null,
                        "limit": {"requests": 8}, "warmup": "0s", "cooldown": "0s"}
                }))
                .unwrap(),
                status: PointStatus::Pending,
                error: None,
                started_at: None,
                ended_at: None,
                validity: None,
            }],
            invocation: None,
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
