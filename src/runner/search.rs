//! A deployment's capacity search (`benchmark.search`) as the runner drives it: the search's
//! state machine (`crate::search::Search`) picks each level; each measurement becomes a point
//! of the run, planned from the deployment's one point with the level as its concurrency or
//! request rate, appended to the manifest and measured like a sweep's; its archived request
//! records are judged; the result is rewritten in the archive after every measurement. When
//! the search wants a level measured on a fresh deployment, [`Next::Redeploy`] tells
//! `deployment` to stop the server and start it again.

use std::collections::BTreeMap;
use std::time::Instant;

use super::bookkeeping::RunError;
use crate::archive::{Archive, PointRecord, PointStatus, SearchEntry, read_requests};
use crate::load::Rate;
use crate::plan::{DeploymentPlan, PointPlan};
use crate::search::{Axis, Measurement, Probe, Search, SearchSpec};

/// What to do next on the running deployment.
pub(super) enum Next {
    /// Measure the manifest's point at this index.
    Point(usize),
    /// Stop the deployment and start it again, then ask again.
    Redeploy,
    /// The search is over.
    Done,
}

/// One deployment's search in progress.
pub(super) struct SearchRun {
    search: Search,
    entry: SearchEntry,
    template: PointPlan,
    started: Instant,
    /// The probe being measured: the probe, its point's plan and manifest index.
    current: Option<(Probe, PointPlan, usize)>,
    /// The levels measured on the deployment as it was last started.
    here: Vec<f64>,
    redeploy: bool,
}

impl SearchRun {
    /// The search of `deployment`, from its one point's load; `None` without a point (the
    /// plan refuses that).
    pub(super) fn new(spec: &SearchSpec, deployment: &DeploymentPlan) -> Option<SearchRun> {
        Some(SearchRun {
            search: Search::new(spec.clone()),
            entry: SearchEntry::new(&deployment.id),
            template: deployment.points.first()?.clone(),
            started: Instant::now(),
            current: None,
            here: Vec::new(),
            redeploy: false,
        })
    }

    /// The deployment (re)started, its processes' pids `pids`.
    pub(super) fn started(
        &mut self,
        archive: &mut Archive,
        dep_index: usize,
        pids: BTreeMap<String, Option<u32>>,
    ) -> Result<(), RunError> {
        self.entry.starts.push(pids);
        self.here.clear();
        self.save(archive, dep_index)
    }

    /// Whether the search stopped the deployment to measure on a fresh one.
    pub(super) fn wants_redeploy(&self) -> bool {
        self.redeploy
    }

    /// The plan of the point being measured.
    pub(super) fn plan(&self) -> Option<&PointPlan> {
        self.current.as_ref().map(|(_, plan, _)| plan)
    }

    /// The next measurement: a point appended to the manifest (pending), a fresh
    /// deployment, or the end (the result is then final).
    pub(super) fn next(
        &mut self,
        archive: &mut Archive,
        dep_index: usize,
    ) -> Result<Next, RunError> {
        let Some(probe) = self.search.next_probe() else {
            self.entry.finished = true;
            self.save(archive, dep_index)?;
            return Ok(Next::Done);
        };
        // A level is measured again on a deployment that has not measured it yet: both
        // ends of the interval share each fresh deployment.
        if probe.redeploy && self.here.contains(&probe.level) {
            self.redeploy = true;
            return Ok(Next::Redeploy);
        }
        self.redeploy = false;
        let plan = probe_plan(&self.template, self.search_spec(), probe.level);
        let repetition = probe.repetition + 1;
        let deployment = archive.manifest().deployments[dep_index].id.clone();
        let record = PointRecord {
            id: plan.id.clone(),
            deployment,
            repetition,
            dir: PointRecord::dir_name(&plan.id, repetition),
            axes: plan.axes.clone(),
            load: plan.load.clone().into(),
            status: PointStatus::Pending,
            error: None,
            started_at: None,
            ended_at: None,
            validity: None,
        };
        archive.update(|m| m.points.push(record))?;
        let index = archive.manifest().points.len() - 1;
        self.current = Some((probe, plan, index));
        Ok(Next::Point(index))
    }

    /// The point of the current probe was measured: judge its archived requests.
    pub(super) fn measured(
        &mut self,
        archive: &mut Archive,
        dep_index: usize,
    ) -> Result<(), RunError> {
        let Some((probe, plan, index)) = self.current.take() else {
            return Ok(());
        };
        let dir = archive.manifest().points[index].dir.clone();
        let point_dir = archive.dir().join("points").join(&dir);
        // A point that failed before its first request has no requests file: no samples,
        // which no SLO passes.
        let records = if point_dir.join("requests.jsonl").exists() {
            read_requests(&point_dir)?
        } else {
            Vec::new()
        };
        self.search
            .record(&probe, Measurement::of(&records, &plan.load.shape));
        self.entry.points.push(dir);
        self.here.push(probe.level);
        self.save(archive, dep_index)
    }

    fn search_spec(&self) -> &SearchSpec {
        self.search.spec()
    }

    /// The result so far into the archive, and the manifest's entry.
    fn save(&self, archive: &mut Archive, dep_index: usize) -> Result<(), RunError> {
        let record = self.search.result(self.started.elapsed().as_secs_f64());
        archive.write_search(&self.entry, &record)?;
        let entry = self.entry.clone();
        archive.update(|m| m.deployments[dep_index].search = Some(entry))?;
        Ok(())
    }
}

/// The point measuring `level`: the template's load with the level as its concurrency cap
/// or request rate, the level among its axes and in its id (`concurrency=16`, after the
/// template's own id when it has axes).
fn probe_plan(template: &PointPlan, spec: &SearchSpec, level: f64) -> PointPlan {
    let burstiness = match template.load.shape.rate {
        Rate::Gamma { burstiness, .. } => burstiness,
        _ => 1.0,
    };
    let name = spec.axis.name();
    let value = match spec.axis {
        Axis::Concurrency => serde_json::json!(level as u64),
        Axis::RequestRate => serde_json::json!(level),
    };
    let mut plan = template.clone();
    plan.load.shape = spec.shape_at(&template.load.shape, level, burstiness);
    plan.axes.insert(name.to_string(), value);
    let this = format!("{name}={}", crate::units::number(level));
    plan.id = if template.id == "default" {
        this
    } else {
        format!("{},{this}", template.id)
    };
    plan.repetitions = 1;
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_is_the_template_at_the_level() {
        let yaml = "name: t\nmodel: m\ncommands: [\"true\"]\nbenchmark:\n  dataset: {kind: random, input_len: 8, output_len: 8}\n  num_prompts: 10\n  search: {axis: concurrency, slo: [\"p99:ttft:2s\"]}\n";
        let task = crate::spec::load_str(std::path::Path::new("t.yaml"), yaml.into()).unwrap();
        let plan = crate::plan::build(&task, &crate::plan::PlanContext::new()).unwrap();
        let spec = plan.search.clone().unwrap();
        let template = &plan.deployments[0].points[0];
        let p = probe_plan(template, &spec, 16.0);
        assert_eq!(p.id, "concurrency=16");
        assert_eq!(p.axes["concurrency"], serde_json::json!(16));
        assert_eq!(p.load.shape.max_concurrency, Some(16));
        // Every slot turns over twice: 32 requests, not the template's 10.
        assert_eq!(p.load.shape.limit, crate::load::Limit::Requests(32));
        assert_eq!(p.load.dataset, template.load.dataset);
    }
}
