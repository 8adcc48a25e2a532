//! A deployment's capacity search in the archive (`benchmark.search`): its result,
//! `search/<deployment>.slo_search.json` (the [`SearchRecord`] `bench --search` writes,
//! rewritten after every measurement), and the manifest's [`SearchEntry`] naming it, saying
//! whether the search finished and which processes each start of the deployment ran. Each
//! measurement is a point of the run like a sweep's (`points/<point>/`).

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::ArchiveError;
use super::atomic::write_json_atomic;
use super::run_dir::Archive;
use crate::search::SearchRecord;

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
