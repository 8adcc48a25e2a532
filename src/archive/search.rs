//! A deployment's capacity search in the archive (`benchmark.search`): its result,
//! `search/<deployment>.slo_search.json` (the [`SearchRecord`] `bench --search` writes,
//! rewritten after every measurement), and the manifest's [`SearchEntry`] naming it, saying
//! whether the search finished and which processes each start of the deployment ran. Each
//! measurement is a point of the run like a sweep's (`points/<point>/`).

use std::path::Path;

use super::ArchiveError;
use super::atomic::write_json_atomic;
use super::manifest::SearchEntry;
use super::run_dir::Archive;
use crate::search::SearchRecord;

impl Archive {
    /// Write a search's result (its `to_json`, each iteration with the `point_dir` it was
    /// measured in) to `entry.file`, all or nothing.
    pub fn write_search(
        &self,
        entry: &SearchEntry,
        record: &SearchRecord,
    ) -> Result<(), ArchiveError> {
        let path = self.dir().join(&entry.file);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|source| ArchiveError::Write {
                path: parent.to_path_buf(),
                source,
            })?;
        }
        let mut value = record.to_json();
        if let Some(its) = value["iterations"].as_array_mut() {
            for (it, dir) in its.iter_mut().zip(&entry.points) {
                it["point_dir"] = serde_json::json!(dir);
            }
        }
        value["finished"] = serde_json::json!(entry.finished);
        write_json_atomic(&path, &value)
    }
}

/// The search result `entry` names in the run at `run_dir`, typed.
pub fn read_search(run_dir: &Path, entry: &SearchEntry) -> Result<SearchRecord, ArchiveError> {
    let path = run_dir.join(&entry.file);
    let text = std::fs::read_to_string(&path).map_err(|source| ArchiveError::Read {
        path: path.clone(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| ArchiveError::Invalid {
        path,
        message: e.to_string(),
    })
}
