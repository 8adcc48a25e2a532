//! A run directory read for reporting: the manifest plus every point's summary, with the
//! repetitions of a point folded into one row (medians and spread) and each row placed in
//! its ISL:OSL group. Owns reading and folding; does not render (table, svg, html) and does
//! not judge validity (crate::validity).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::archive::{self, Manifest, PointStatus};

use super::ReportError;

/// One archived run, ready to report.
#[derive(Debug, Clone)]
pub struct Run {
    pub dir: PathBuf,
    pub manifest: Manifest,
    /// One row per point (repetitions folded), in manifest order.
    pub rows: Vec<Row>,
    /// Short name of the run in legends and table titles (set by `label_runs`).
    pub label: String,
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
    pub load: Value,
    pub group: Group,
    /// The concurrency cap asked for, if any (axis, load shape or summary).
    pub concurrency: Option<f64>,
    /// Each repetition's summary (repetitions without one are left out).
    pub summaries: Vec<Value>,
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

    /// Every repetition's value of a summary field.
    pub fn values(&self, name: &str) -> Vec<f64> {
        self.summaries
            .iter()
            .filter_map(|s| s.get(name).and_then(Value::as_f64))
            .collect()
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

/// `a=1,b=x`.
pub fn axes_label(axes: &BTreeMap<String, Value>) -> String {
    axes.iter()
        .map(|(k, v)| format!("{k}={}", value_text(v)))
        .collect::<Vec<_>>()
        .join(",")
}

/// A JSON scalar as plain text (strings without quotes).
pub fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

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

/// Read a run directory.
pub fn load_run(dir: &Path) -> Result<Run, ReportError> {
    let manifest = archive::read_manifest(dir).map_err(|source| ReportError::Archive {
        dir: dir.to_path_buf(),
        source,
    })?;
    let deployment_axes: BTreeMap<&str, &BTreeMap<String, Value>> = manifest
        .deployments
        .iter()
        .map(|d| (d.id.as_str(), &d.axes))
        .collect();
    let mut rows: Vec<Row> = Vec::new();
    for point in &manifest.points {
        let summary = read_summary(dir, &point.dir);
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
                    load: point.load.clone(),
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
        if let Some(validity) = &point.validity {
            let valid = validity["valid"].as_bool();
            row.valid = match (row.valid, valid) {
                (Some(false), _) | (_, Some(false)) => Some(false),
                (_, Some(true)) => Some(true),
                (old, None) => old,
            };
            for gate in validity["gates"].as_array().into_iter().flatten() {
                if gate["verdict"] == "fail" {
                    let text = format!(
                        "{} (observed {}, needs {})",
                        value_text(&gate["name"]),
                        gate["observed"]
                            .as_f64()
                            .map_or_else(|| value_text(&gate["observed"]), super::table::number),
                        value_text(&gate["threshold"])
                    );
                    if !row.failed_gates.contains(&text) {
                        row.failed_gates.push(text);
                    }
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
    Ok(Run {
        dir: dir.to_path_buf(),
        label: manifest.run_id.clone(),
        manifest,
        rows,
    })
}

fn read_summary(dir: &Path, point_dir: &str) -> Option<Value> {
    let text =
        std::fs::read_to_string(dir.join("points").join(point_dir).join("summary.json")).ok()?;
    serde_json::from_str(&text).ok()
}

fn worse(a: PointStatus, b: PointStatus) -> PointStatus {
    let rank = |s| match s {
        PointStatus::Completed => 0,
        PointStatus::Pending | PointStatus::Running => 1,
        PointStatus::Skipped => 2,
        PointStatus::Failed => 3,
    };
    if rank(b) > rank(a) { b } else { a }
}

/// The ISL:OSL group of a point: from the planned dataset, else its axes, else the means.
pub fn group_of(load: &Value, axes: &BTreeMap<String, Value>, summaries: &[Value]) -> Group {
    let (input, output, note) = planned_lengths(load);
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
    let mean = |field: &str| {
        let per: Vec<f64> = summaries
            .iter()
            .filter_map(|s| {
                let total = s.get(field)?.as_f64()?;
                let done = s.get("completed")?.as_f64()?;
                (done > 0.0).then(|| total / done)
            })
            .collect();
        median(&per).map(|m| m.round() as u64)
    };
    let input = mean("total_input_tokens");
    let output = mean("total_output_tokens");
    Group {
        achieved: input.is_some() || output.is_some(),
        input_len: input,
        output_len: output,
        note,
    }
}

/// Input and output lengths the plan asked for, and a note for special datasets.
pub fn planned_lengths(load: &Value) -> (Option<u64>, Option<u64>, Option<String>) {
    let Some(dataset) = load.get("dataset").and_then(Value::as_object) else {
        return (None, None, None);
    };
    let Some((kind, spec)) = dataset.iter().next() else {
        return (None, None, None);
    };
    let get = |k: &str| spec.get(k).and_then(Value::as_u64);
    match kind.as_str() {
        "shared_prefix" => {
            let input = match (get("system_prompt_len"), get("question_len")) {
                (Some(a), Some(b)) => Some(a + b),
                _ => None,
            };
            (input, get("output_len"), Some("shared prefix".into()))
        }
        "random" => {
            let note = get("prefix_len")
                .filter(|p| *p > 0)
                .map(|p| format!("prefix {p}"));
            (get("input_len"), get("output_len"), note)
        }
        _ => (get("input_len"), get("output_len"), None),
    }
}

fn concurrency_of(
    axes: &BTreeMap<String, Value>,
    load: &Value,
    summaries: &[Value],
) -> Option<f64> {
    axes.get("concurrency")
        .or_else(|| axes.get("max_concurrency"))
        .and_then(Value::as_f64)
        .or_else(|| {
            load.pointer("/shape/max_concurrency")
                .and_then(Value::as_f64)
        })
        .or_else(|| {
            let v: Vec<f64> = summaries
                .iter()
                .filter_map(|s| s.get("max_concurrency").and_then(Value::as_f64))
                .collect();
            median(&v)
        })
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn groups_come_from_the_dataset_then_axes_then_means() {
        let load = json!({"dataset": {"random": {"input_len": 1000, "output_len": 150, "range_ratio": 0.0, "prefix_len": 0}}});
        assert_eq!(group_of(&load, &BTreeMap::new(), &[]).label(), "1000:150");
        let shared = json!({"dataset": {"shared_prefix": {"num_groups": 10, "prompts_per_group": 50, "system_prompt_len": 2000, "question_len": 1200, "output_len": 800}}});
        assert_eq!(
            group_of(&shared, &BTreeMap::new(), &[]).label(),
            "3200:800 shared prefix"
        );
        let axes = BTreeMap::from([
            ("input_len".to_string(), json!(500)),
            ("output_len".to_string(), json!(1000)),
        ]);
        assert_eq!(group_of(&json!({}), &axes, &[]).label(), "500:1000");
        let summaries =
            [json!({"completed": 10, "total_input_tokens": 9980, "total_output_tokens": 10000})];
        assert_eq!(
            group_of(&json!({}), &BTreeMap::new(), &summaries).label(),
            "~998:1000 (achieved)"
        );
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
