//! A run directory read for reporting and checking: the manifest plus every point's typed
//! summary, with the repetitions of a point folded into one row (medians and spread) and
//! each row placed in its ISL:OSL group. Owns reading and folding; does not render (report)
//! and does not judge validity (crate::validity) or regressions (crate::check).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::read::{axes_label, planned_lengths, read_point_summary, value_text};
use super::{
    ArchiveError, Manifest, PlannedLoad, PointStatus, PointSummary, TrimmedWindow, read_manifest,
};
use crate::units::number;

/// One archived run, ready to report.
#[derive(Debug, Clone)]
pub struct Run {
    pub dir: PathBuf,
    pub manifest: Manifest,
    /// One row per point (repetitions folded), in manifest order.
    pub rows: Vec<Row>,
    /// Short name of the run in legends and table titles (the run id; reports relabel).
    pub label: String,
    /// Each deployment's capacity search (`benchmark.search`), in manifest order.
    pub searches: Vec<RunSearch>,
    /// What a re-score changed (`rescore`), as text; `None`: the figures as archived.
    pub rescored: Option<String>,
}

/// A deployment's capacity search as report and check read it.
#[derive(Debug, Clone)]
pub struct RunSearch {
    pub deployment: String,
    /// Axes of the deployment (empty when the run has one deployment).
    pub deployment_axes: BTreeMap<String, Value>,
    /// Whether the search stopped by itself (its result is final).
    pub finished: bool,
    pub record: crate::search::SearchRecord,
}

impl RunSearch {
    /// `tp=8,image=x`, or empty for a run of one deployment without axes.
    pub fn label(&self) -> String {
        axes_label(&self.deployment_axes)
    }
}

/// One measured point of a run, its repetitions folded together.
#[derive(Debug, Clone)]
pub struct Row {
    /// Point id (the same across repetitions), e.g. `concurrency=4`.
    pub id: String,
    pub deployment: String,
    /// Axes of the deployment this point ran on (empty when the run has one deployment).
    pub deployment_axes: BTreeMap<String, Value>,
    /// Every matrix axis of the point.
    pub axes: BTreeMap<String, Value>,
    /// The load as planned (first repetition's).
    pub load: PlannedLoad,
    pub group: Group,
    /// The concurrency cap asked for, if any (axis, load shape or summary).
    pub concurrency: Option<f64>,
    /// Each repetition's summary (repetitions without one are left out).
    pub summaries: Vec<PointSummary>,
    /// Repetitions recorded in the manifest.
    pub repetitions: u32,
    /// Worst status over repetitions (failed > skipped > pending/running > completed).
    pub status: PointStatus,
    /// `None` when no repetition has been judged; `Some(false)` when any failed a gate.
    pub valid: Option<bool>,
    /// Names of the failed gates (over all repetitions), with observed values.
    pub failed_gates: Vec<String>,
    pub error: Option<String>,
}

/// The distinct trimmed windows of `rows`, described and joined with ` or `; `None` when no
/// row trimmed a warm-up or cool-down.
pub fn trimmed_windows<'a>(rows: impl IntoIterator<Item = &'a Row>) -> Option<String> {
    let mut windows: Vec<String> = Vec::new();
    for text in rows
        .into_iter()
        .filter_map(|r| r.window())
        .map(|w| w.describe())
    {
        if !windows.contains(&text) {
            windows.push(text);
        }
    }
    (!windows.is_empty()).then(|| windows.join(" or "))
}

/// Prompt and answer lengths of a point: the table it goes in.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Group {
    pub input_len: Option<u64>,
    pub output_len: Option<u64>,
    /// Extra words, e.g. `shared prefix` for a prefix-cached dataset.
    pub note: Option<String>,
    /// True when the lengths come from the measured means, not from the plan.
    pub achieved: bool,
}

impl Group {
    /// `3000:150`, `3200:800 shared prefix`, `~998:1000 (achieved)` or `?:?`.
    pub fn label(&self) -> String {
        let len = |v: Option<u64>| v.map_or("?".to_string(), |v| v.to_string());
        let mut out = format!("{}:{}", len(self.input_len), len(self.output_len));
        if self.achieved {
            out = format!("~{out} (achieved)");
        }
        if let Some(note) = &self.note {
            out.push(' ');
            out.push_str(note);
        }
        out
    }

    /// A file-name-safe form of the label: `3000-150`, `3200-800-shared-prefix`.
    pub fn slug(&self) -> String {
        let len = |v: Option<u64>| v.map_or("x".to_string(), |v| v.to_string());
        let mut out = format!("{}-{}", len(self.input_len), len(self.output_len));
        if let Some(note) = &self.note {
            out.push('-');
            out.push_str(&note.replace(' ', "-"));
        }
        out
    }
}

impl Row {
    /// The median of a summary field over the repetitions that report it.
    pub fn metric(&self, name: &str) -> Option<f64> {
        median(&self.values(name))
    }

    /// Every repetition's value of a summary field, from the measured window when the point
    /// trimmed a warm-up or cool-down (see [`PointSummary::window_metric`]).
    pub fn values(&self, name: &str) -> Vec<f64> {
        self.summaries
            .iter()
            .filter_map(|s| s.window_metric(name))
            .collect()
    }

    /// The trimmed window of the point's first repetition that has one.
    pub fn window(&self) -> Option<TrimmedWindow> {
        self.summaries.iter().find_map(PointSummary::window)
    }

    /// Largest relative deviation of a repetition from the median (0.03 = 3 %); `None`
    /// with fewer than two repetitions.
    pub fn spread(&self, name: &str) -> Option<f64> {
        relative_spread(&self.values(name))
    }

    /// `tp=8,image=x`: the deployment's axes, or the deployment id when it has none.
    pub fn deployment_label(&self) -> String {
        if self.deployment_axes.is_empty() {
            String::new()
        } else {
            axes_label(&self.deployment_axes)
        }
    }

    /// The axes that only change the load (not the deployment, not the lengths).
    pub fn load_axes(&self) -> BTreeMap<String, Value> {
        self.axes
            .iter()
            .filter(|(k, _)| !self.deployment_axes.contains_key(*k))
            .filter(|(k, _)| !LENGTH_AXES.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// The key that matches this point across runs: its group and load axes.
    pub fn match_key(&self) -> String {
        let load = self.load_axes();
        if load.is_empty() {
            format!("{} {}", self.group.label(), self.id)
        } else {
            format!("{} {}", self.group.label(), axes_label(&load))
        }
    }
}

/// Axes that set prompt/answer lengths: shown in the group, not as columns.
pub const LENGTH_AXES: &[&str] = &["input_len", "output_len"];

/// The median of some numbers (`None` when empty).
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// Largest |x - median| / |median|; `None` with fewer than two values or a zero median.
pub fn relative_spread(values: &[f64]) -> Option<f64> {
    if values.len() < 2 {
        return None;
    }
    let m = median(values)?;
    if m == 0.0 {
        return None;
    }
    values
        .iter()
        .map(|x| ((x - m) / m).abs())
        .max_by(f64::total_cmp)
}

/// Read a run directory: its manifest, and every point's summary folded into rows.
pub fn read_run(dir: &Path) -> Result<Run, ArchiveError> {
    let manifest = read_manifest(dir)?;
    let deployment_axes: BTreeMap<&str, &BTreeMap<String, Value>> = manifest
        .deployments
        .iter()
        .map(|d| (d.id.as_str(), &d.axes))
        .collect();
    let mut rows: Vec<Row> = Vec::new();
    for point in &manifest.points {
        let summary = read_point_summary(dir, &point.dir)?;
        let existing = rows
            .iter_mut()
            .find(|r| r.id == point.id && r.deployment == point.deployment);
        let row = match existing {
            Some(row) => row,
            None => {
                rows.push(Row {
                    id: point.id.clone(),
                    deployment: point.deployment.clone(),
                    deployment_axes: deployment_axes
                        .get(point.deployment.as_str())
                        .map(|a| (*a).clone())
                        .unwrap_or_default(),
                    axes: point.axes.clone(),
                    load: point.planned(),
                    group: Group {
                        input_len: None,
                        output_len: None,
                        note: None,
                        achieved: false,
                    },
                    concurrency: None,
                    summaries: Vec::new(),
                    repetitions: 0,
                    status: PointStatus::Completed,
                    valid: None,
                    failed_gates: Vec::new(),
                    error: None,
                });
                rows.last_mut().expect("just pushed")
            }
        };
        row.repetitions += 1;
        row.status = worse(row.status, point.status);
        if row.error.is_none() {
            row.error = point.error.clone();
        }
        if let Some(validity) = point.verdict() {
            row.valid = Some(validity.valid && row.valid != Some(false));
            for gate in validity.failures() {
                let text = format!(
                    "{} (observed {}, needs {})",
                    gate.name,
                    gate.observed
                        .as_f64()
                        .map_or_else(|| value_text(&gate.observed), number),
                    gate.threshold
                );
                if !row.failed_gates.contains(&text) {
                    row.failed_gates.push(text);
                }
            }
        }
        if let Some(summary) = summary {
            row.summaries.push(summary);
        }
    }
    for row in &mut rows {
        row.group = group_of(&row.load, &row.axes, &row.summaries);
        row.concurrency = concurrency_of(&row.axes, &row.load, &row.summaries);
    }
    let mut searches = Vec::new();
    for d in &manifest.deployments {
        if let Some(entry) = &d.search {
            searches.push(RunSearch {
                deployment: d.id.clone(),
                deployment_axes: d.axes.clone(),
                finished: entry.finished,
                record: super::read_search(dir, entry)?,
            });
        }
    }
    Ok(Run {
        dir: dir.to_path_buf(),
        label: manifest.run_id.clone(),
        manifest,
        rows,
        searches,
        rescored: None,
    })
}

fn worse(a: PointStatus, b: PointStatus) -> PointStatus {
    let rank = |s| match s {
        PointStatus::Completed => 0,
        PointStatus::Pending | PointStatus::Running => 1,
        PointStatus::Skipped | PointStatus::Interrupted => 2,
        PointStatus::Failed => 3,
    };
    if rank(b) > rank(a) { b } else { a }
}

/// The ISL:OSL group of a point: from the planned dataset, else its axes, else the means.
pub fn group_of(
    load: &PlannedLoad,
    axes: &BTreeMap<String, Value>,
    summaries: &[PointSummary],
) -> Group {
    let (input, output, note) = load
        .dataset
        .as_ref()
        .map_or((None, None, None), planned_lengths);
    let input = input.or_else(|| axes.get("input_len").and_then(Value::as_u64));
    let output = output.or_else(|| axes.get("output_len").and_then(Value::as_u64));
    if input.is_some() || output.is_some() {
        return Group {
            input_len: input,
            output_len: output,
            note,
            achieved: false,
        };
    }
    let mean = |total: fn(&PointSummary) -> Option<f64>| {
        let per: Vec<f64> = summaries
            .iter()
            .filter_map(|s| s.mean_per_request(total(s)))
            .collect();
        median(&per).map(|m| m.round() as u64)
    };
    let input = mean(|s| s.total_input_tokens);
    let output = mean(|s| s.total_output_tokens);
    Group {
        achieved: input.is_some() || output.is_some(),
        input_len: input,
        output_len: output,
        note,
    }
}

fn concurrency_of(
    axes: &BTreeMap<String, Value>,
    load: &PlannedLoad,
    summaries: &[PointSummary],
) -> Option<f64> {
    axes.get("concurrency")
        .or_else(|| axes.get("max_concurrency"))
        .and_then(Value::as_f64)
        .or_else(|| load.shape.max_concurrency.map(f64::from))
        .or_else(|| {
            let v: Vec<f64> = summaries.iter().filter_map(|s| s.max_concurrency).collect();
            median(&v)
        })
}
#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn plan(dataset: Value) -> PlannedLoad {
        PlannedLoad::from_json(&json!({"dataset": dataset}))
    }

    #[test]
    fn groups_come_from_the_dataset_then_axes_then_means() {
        let random = plan(
            json!({"random": {"input_len": 1000, "output_len": 150, "range_ratio": 0.0, "prefix_len": 0}}),
        );
        assert_eq!(group_of(&random, &BTreeMap::new(), &[]).label(), "1000:150");
        let shared = plan(
            json!({"shared_prefix": {"num_groups": 10, "prompts_per_group": 50, "system_prompt_len": 2000, "question_len": 1200, "output_len": 800}}),
        );
        assert_eq!(
            group_of(&shared, &BTreeMap::new(), &[]).label(),
            "3200:800 shared prefix"
        );
        let axes = BTreeMap::from([
            ("input_len".to_string(), json!(500)),
            ("output_len".to_string(), json!(1000)),
        ]);
        assert_eq!(
            group_of(&PlannedLoad::default(), &axes, &[]).label(),
            "500:1000"
        );
        let summaries = [PointSummary::from_json(
            &json!({"completed": 10, "total_input_tokens": 9980, "total_output_tokens": 10000}),
        )];
        assert_eq!(
            group_of(&PlannedLoad::default(), &BTreeMap::new(), &summaries).label(),
            "~998:1000 (achieved)"
        );
    }

    #[test]
    fn a_version_1_archive_reads_typed() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/archive-v1/demo/20261123-223731");
        let run = read_run(&dir).unwrap();
        assert_eq!(run.manifest.format_version, 1);
        let ids: Vec<&str> = run.rows.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["concurrency=1", "concurrency=4"]);
        for (row, c) in run.rows.iter().zip([1.0, 4.0]) {
            assert_eq!(row.group.label(), "256:32");
            assert_eq!(row.concurrency, Some(c));
            assert_eq!(row.valid, Some(true));
            assert_eq!(row.metric("completed"), Some(c * 4.0));
            assert!(row.metric("p99_ttft_ms").is_some_and(|v| v > 0.0));
            assert_eq!(row.summaries[0].max_concurrency_reached, Some(c));
        }
        let point = &run.manifest.points[0];
        assert!(point.load_plan().is_some(), "{:?}", point.load);
        assert_eq!(point.verdict().map(|v| v.gates.len()), Some(7));
    }

    #[test]
    fn median_and_spread() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[1.0, 2.0, 3.0, 4.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        let s = relative_spread(&[100.0, 97.0, 103.0]).unwrap();
        assert!((s - 0.03).abs() < 1e-9, "{s}");
        assert_eq!(relative_spread(&[5.0]), None);
    }
}
