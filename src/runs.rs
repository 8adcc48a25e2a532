//! The run index over an archive root (`results/`): every run with its task, backend, model,
//! hardware (from the manifest's host facts), date, tag and status; and resolution of a run
//! reference (`latest`, `previous`, a tag, a run id or a directory) per task. Reads manifests
//! only; does not write the archive (archive) or report (report).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use crate::archive::{self, Manifest, RunStatus};

/// One entry of the index.
#[derive(Debug, Clone, Serialize)]
pub struct RunEntry {
    pub dir: PathBuf,
    pub task: String,
    pub run_id: String,
    pub backend: String,
    pub model: String,
    pub hardware: String,
    pub started_at: String,
    pub tag: Option<String>,
    pub status: RunStatus,
    /// Distinct points (repetitions counted once).
    pub points: usize,
    /// What is wrong with each point summary of the run that does not read (the file, and
    /// the field or line where it breaks); empty for a sound run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub damaged: Vec<String>,
}

/// Failures resolving a run reference.
#[derive(Debug, thiserror::Error)]
pub enum RunsError {
    #[error("no runs of task `{task}` under {results}; run it first or pass a run directory")]
    NoRuns { task: String, results: PathBuf },
    #[error("task `{task}` has only one run, so there is no `previous` run to compare with")]
    NoPrevious { task: String },
    #[error(
        "`{reference}` is not a run directory, `latest`, `previous`, a run id or a tag of task `{task}` under {results}"
    )]
    Unknown {
        reference: String,
        task: String,
        results: PathBuf,
    },
    #[error(
        "`{reference}` is not a run directory (no manifest.json in it); pass a run directory, or `--task TASK` with `latest`, `previous`, a run id or a tag"
    )]
    NotARunDir { reference: String },
    #[error("failed to read the run in {dir}")]
    Archive {
        dir: PathBuf,
        #[source]
        source: archive::ArchiveError,
    },
}

impl RunEntry {
    fn of(dir: PathBuf, m: &Manifest) -> Self {
        Self {
            task: m.task.clone(),
            run_id: m.run_id.clone(),
            backend: m.backend.clone(),
            model: m.model.clone(),
            hardware: hardware(&m.hosts),
            started_at: m.started_at.format("%Y-%m-%d %H:%M").to_string(),
            tag: m.tag.clone(),
            status: m.status,
            points: {
                let mut ids: Vec<(&str, &str)> = m
                    .points
                    .iter()
                    .map(|p| (p.deployment.as_str(), p.id.as_str()))
                    .collect();
                ids.sort();
                ids.dedup();
                ids.len()
            },
            damaged: m
                .points
                .iter()
                .filter_map(|p| archive::read_point_summary(&dir, &p.dir).err())
                .map(|e| e.to_string())
                .collect(),
            dir,
        }
    }
}

/// Every readable run under `results` (optionally one task, one tag), oldest first per task.
/// Unreadable run directories are skipped with a warning.
pub fn index(results: &Path, task: Option<&str>, tag: Option<&str>) -> Vec<RunEntry> {
    let mut out: Vec<(chrono::DateTime<chrono::Utc>, RunEntry)> = Vec::new();
    for dir in archive::list_runs(results, task) {
        match archive::read_manifest(&dir) {
            Ok(m) => {
                if tag.is_some_and(|t| m.tag.as_deref() != Some(t)) {
                    continue;
                }
                out.push((m.started_at, RunEntry::of(dir, &m)));
            }
            Err(e) => tracing::warn!(
                "skipping {}: {}",
                dir.display(),
                crate::units::error_chain(&e)
            ),
        }
    }
    out.sort_by(|a, b| (&a.1.task, a.0, &a.1.run_id).cmp(&(&b.1.task, b.0, &b.1.run_id)));
    out.into_iter().map(|(_, e)| e).collect()
}

/// Resolve a run reference for `task`: an existing directory, `latest` (newest run),
/// `previous` (the run before `current`, or before the newest), a run id, or a tag (newest
/// run with that tag).
pub fn resolve(
    results: &Path,
    task: &str,
    reference: &str,
    current: Option<&Path>,
) -> Result<PathBuf, RunsError> {
    let as_path = Path::new(reference);
    if as_path.join(archive::MANIFEST).is_file() {
        return Ok(as_path.to_path_buf());
    }
    let runs = index(results, Some(task), None);
    if runs.is_empty() {
        return Err(RunsError::NoRuns {
            task: task.into(),
            results: results.into(),
        });
    }
    match reference {
        "latest" => Ok(runs.last().expect("non-empty").dir.clone()),
        "previous" => {
            let current_id = current.and_then(|c| archive::read_manifest(c).ok().map(|m| m.run_id));
            let position = match current_id {
                Some(id) => runs.iter().position(|r| r.run_id == id),
                None => Some(runs.len() - 1),
            };
            // Older than the current run; a current run outside the index compares with the newest.
            let candidates = match position {
                Some(p) => &runs[..p],
                None => &runs[..],
            };
            candidates
                .iter()
                .rev()
                .find(|r| matches!(r.status, RunStatus::Completed))
                .or(candidates.last())
                .map(|r| r.dir.clone())
                .ok_or(RunsError::NoPrevious { task: task.into() })
        }
        other => runs
            .iter()
            .find(|r| r.run_id == other)
            .or_else(|| runs.iter().rev().find(|r| r.tag.as_deref() == Some(other)))
            .map(|r| r.dir.clone())
            .ok_or(RunsError::Unknown {
                reference: other.into(),
                task: task.into(),
                results: results.into(),
            }),
    }
}

/// A run reference without a task: it must be a run directory.
pub fn resolve_dir(reference: &str) -> Result<PathBuf, RunsError> {
    let dir = Path::new(reference);
    if dir.join(archive::MANIFEST).is_file() {
        Ok(dir.to_path_buf())
    } else {
        Err(RunsError::NotARunDir {
            reference: reference.into(),
        })
    }
}

/// A one-line hardware description from host facts: `8 x H200 (gpu-a)`, or the host names.
/// Host facts are free-form JSON; GPU names are looked for in `gpus` (array of strings or
/// objects with `name`), `gpu` or `gpu_name`.
pub fn hardware(hosts: &BTreeMap<String, Value>) -> String {
    if hosts.is_empty() {
        return "-".into();
    }
    hosts
        .iter()
        .map(|(name, facts)| {
            let names: Vec<String> = match facts.get("gpus") {
                Some(Value::Array(list)) => list
                    .iter()
                    .filter_map(|g| {
                        g.as_str()
                            .map(str::to_string)
                            .or_else(|| g.get("name").and_then(Value::as_str).map(str::to_string))
                    })
                    .collect(),
                _ => ["gpu", "gpu_name"]
                    .iter()
                    .find_map(|k| facts.get(*k).and_then(Value::as_str))
                    .map(|s| vec![s.to_string()])
                    .unwrap_or_default(),
            };
            if names.is_empty() {
                return name.clone();
            }
            let mut counted: Vec<(String, usize)> = Vec::new();
            for n in names {
                match counted.iter_mut().find(|(k, _)| *k == n) {
                    Some((_, c)) => *c += 1,
                    None => counted.push((n, 1)),
                }
            }
            let gpus: Vec<String> = counted.iter().map(|(n, c)| format!("{c} x {n}")).collect();
            format!("{} ({name})", gpus.join(" + "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn hardware_counts_gpus_per_host() {
        let hosts = BTreeMap::from([
            (
                "a".to_string(),
                json!({"gpus": [{"name": "H200"}, {"name": "H200"}]}),
            ),
            ("b".to_string(), json!({"os": "linux"})),
        ]);
        assert_eq!(hardware(&hosts), "2 x H200 (a), b");
        assert_eq!(hardware(&BTreeMap::new()), "-");
    }

    #[test]
    fn a_run_without_a_task_must_be_a_run_directory() {
        let fixture = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/archive-v1/demo/20261123-223731"
        );
        assert_eq!(resolve_dir(fixture).unwrap(), PathBuf::from(fixture));
        let err = resolve_dir("latest").unwrap_err().to_string();
        assert!(
            err.contains("`latest` is not a run directory") && err.contains("--task"),
            "{err}"
        );
    }
}
