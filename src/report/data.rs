//! Runs as reports see them: the archive's folded runs (`crate::archive::read_run`) and the
//! short labels that tell several runs apart in legends and table titles. Does not read
//! files itself and does not render (table, svg, html).

use std::path::{Path, PathBuf};

pub use crate::archive::{
    Group, LENGTH_AXES, Manifest, PointRecord, Row, Run, axes_label, median, relative_spread,
    value_text,
};

use super::ReportError;

/// Read a run directory (manifest, typed summaries, rows).
pub fn load_run(dir: &Path) -> Result<Run, ReportError> {
    crate::archive::read_run(dir).map_err(|source| ReportError::Archive {
        dir: dir.to_path_buf(),
        source,
    })
}

/// The first repetition of every point of `run` (what per-point charts draw): its index in
/// the manifest, its record and its directory.
pub fn first_repetitions(run: &Run) -> impl Iterator<Item = (usize, &PointRecord, PathBuf)> {
    run.manifest
        .points
        .iter()
        .enumerate()
        .filter(|(_, p)| p.repetition == 1)
        .map(|(n, p)| (n, p, run.dir.join("points").join(&p.dir)))
}

/// A per-point chart's file name, `<kind>_<run label>_<point id>-<n>.svg`, with every
/// character of the point id other than ASCII letters and digits as `-`.
pub fn point_chart_file(kind: &str, run: &Run, point: &PointRecord, n: usize) -> String {
    let slug: String = format!("{}-{n}", point.id)
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    format!("{kind}_{}_{slug}.svg", run.label.replace('/', "-"))
}

/// Give each run a short, distinct label: the first of backend, task, tag, run id that
/// differs between all runs, else `task/run-id`.
pub fn label_runs(runs: &mut [Run]) {
    if runs.len() == 1 {
        runs[0].label = runs[0].manifest.backend.clone();
        return;
    }
    type Pick = fn(&Manifest) -> Option<String>;
    let candidates: [Pick; 4] = [
        |m| Some(m.backend.clone()),
        |m| Some(m.task.clone()),
        |m| m.tag.clone(),
        |m| Some(m.run_id.clone()),
    ];
    for pick in candidates {
        let labels: Vec<Option<String>> = runs.iter().map(|r| pick(&r.manifest)).collect();
        let mut distinct = labels.clone();
        distinct.sort();
        distinct.dedup();
        if labels.iter().all(Option::is_some) && distinct.len() == labels.len() {
            for (run, label) in runs.iter_mut().zip(labels) {
                run.label = label.expect("checked");
            }
            return;
        }
    }
    for run in runs.iter_mut() {
        run.label = format!("{}/{}", run.manifest.task, run.manifest.run_id);
    }
}
