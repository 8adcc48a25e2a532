//! Unit tests of the Pareto view: the frontier (ties, invalid points), SLO membership, the
//! per-GPU normalisation and its per-deployment fallback, over rows built in memory.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Value, json};

use super::*;
use crate::archive::{Manifest, PlannedLoad, PointStatus, PointSummary};
use crate::report::slo::slo_key;

fn slo(text: &str) -> PercentileSlo {
    PercentileSlo::parse(text).unwrap()
}

/// A completed point of group 100:10 whose summary is `summary`.
fn row(dep: &str, concurrency: f64, summary: Value, valid: Option<bool>) -> Row {
    Row {
        id: format!("concurrency={concurrency}"),
        deployment: dep.into(),
        deployment_axes: BTreeMap::from([("image".to_string(), json!(dep))]),
        axes: BTreeMap::new(),
        load: PlannedLoad::from_json(&json!({})),
        group: Group {
            input_len: Some(100),
            output_len: Some(10),
            note: None,
            achieved: false,
        },
        concurrency: Some(concurrency),
        summaries: vec![PointSummary::from_json(&summary)],
        repetitions: 1,
        status: PointStatus::Completed,
        valid,
        failed_gates: Vec::new(),
        error: None,
    }
}

/// A summary with this median TPOT and output throughput (p99 TPOT 10% above the median).
fn figures(tpot: f64, throughput: f64) -> Value {
    json!({"median_tpot_ms": tpot, "mean_tpot_ms": tpot * 2.0, "p99_tpot_ms": tpot * 1.1,
           "output_throughput": throughput})
}

/// A run labelled `label` whose deployments plan these GPUs.
fn run(label: &str, deployments: &[(&str, Option<u32>)], rows: Vec<Row>) -> Run {
    let deployments: Vec<Value> = deployments
        .iter()
        .map(|(id, gpus)| {
            json!({"id": id, "axes": {"image": id}, "status": "stopped", "time_to_ready_s": null,
                   "error": null, "instances": {}, "gpus": gpus})
        })
        .collect();
    let manifest: Manifest = serde_json::from_value(json!({
        "format_version": 1, "tool": {"name": "orchestrate", "version": "0"},
        "run_id": label, "task": "t", "backend": "vllm", "model": "m", "tag": null,
        "source": "t.yaml", "spec_hash": "0", "started_at": "2026-11-22T18:00:00Z",
        "ended_at": null, "status": "completed", "resolved": {}, "hosts": {},
        "deployments": deployments, "points": []
    }))
    .unwrap();
    Run {
        dir: PathBuf::new(),
        manifest,
        rows,
        label: label.into(),
        searches: Vec::new(),
        rescored: None,
    }
}

/// Bare points at (x, y), valid unless listed in `invalid`.
fn bare(xy: &[(f64, f64)], invalid: &[usize]) -> Vec<ParetoPoint> {
    xy.iter()
        .enumerate()
        .map(|(i, &(x, y))| ParetoPoint {
            series: "s".into(),
            deployment: "d1".into(),
            point: format!("p{i}"),
            interactivity: x,
            output_throughput: y,
            gpus: None,
            throughput: y,
            valid: !invalid.contains(&i),
            meets_slo: None,
            on_frontier: false,
            on_slo_frontier: false,
            style: 0,
        })
        .collect()
}

#[test]
fn the_frontier_keeps_undominated_valid_points_in_x_order_and_both_of_a_tie() {
    // 0 and 1 trade off; 2 is dominated by 1; 3 equals 1 (a tie: both stay); 4 beats
    // everything at high x but is invalid; 5 has 1's x and less y (dominated).
    let points = bare(
        &[
            (10.0, 100.0),
            (20.0, 80.0),
            (15.0, 70.0),
            (20.0, 80.0),
            (40.0, 200.0),
            (20.0, 60.0),
        ],
        &[4],
    );
    let front = frontier(&points, |p| p.valid);
    assert_eq!(front.len(), 3, "{front:?}");
    assert_eq!(front[0], 0);
    assert!(front[1..].contains(&1) && front[1..].contains(&3));
    // Counting the invalid point, it dominates every other.
    assert_eq!(frontier(&points, |_| true), vec![4]);
    // No candidates: no frontier.
    assert!(frontier(&points, |_| false).is_empty());
}

#[test]
fn slo_membership_is_yes_no_or_unknown_per_summary_key() {
    let r = row("d1", 4.0, figures(20.0, 100.0), Some(true));
    let mut missing = Vec::new();
    // p99 TPOT is 22 ms.
    assert_eq!(judge(&r, &[slo("p99:tpot:25ms")], &mut missing), Meets::Yes);
    assert_eq!(judge(&r, &[slo("p99:tpot:21ms")], &mut missing), Meets::No);
    assert!(missing.is_empty());
    assert_eq!(slo_key(&slo("p99.9:ttft:2s")), "p99.9_ttft_ms");
    assert_eq!(
        judge(&r, &[slo("p90:tpot:25ms")], &mut missing),
        Meets::Unknown
    );
    assert_eq!(missing, ["p90_tpot_ms"]);
    // A failed SLO beats an unknown one, in either order.
    let both = [slo("p90:tpot:25ms"), slo("p99:tpot:21ms")];
    assert_eq!(judge(&r, &both, &mut missing), Meets::No);
    let both = [slo("p99:tpot:21ms"), slo("p90:tpot:25ms")];
    assert_eq!(judge(&r, &both, &mut missing), Meets::No);
}

#[test]
fn throughput_is_per_gpu_from_telemetry_else_the_plan() {
    let mut measured = figures(10.0, 800.0);
    measured["gpu_count"] = json!(4);
    let runs = [run(
        "a",
        &[("d1", Some(8)), ("d2", Some(2))],
        vec![
            row("d1", 1.0, measured, Some(true)),
            row("d2", 1.0, figures(20.0, 300.0), Some(true)),
        ],
    )];
    let view = pareto(&runs, &[]);
    let s = &view.sections[0];
    assert!(
        s.data.per_gpu && s.data.notes.is_empty(),
        "{:?}",
        s.data.notes
    );
    let by_dep = |d: &str| s.data.points.iter().find(|p| p.deployment == d).unwrap();
    // Telemetry's 4 GPUs win over the plan's 8.
    assert_eq!(by_dep("d1").gpus, Some(4.0));
    assert_eq!(by_dep("d1").throughput, 200.0);
    assert_eq!(by_dep("d1").interactivity, 100.0);
    assert_eq!(by_dep("d2").gpus, Some(2.0));
    assert_eq!(by_dep("d2").throughput, 150.0);
    assert!(s.data.y_label.contains("per GPU"));
    // d1 is more interactive and more productive per GPU: it alone is the frontier.
    assert_eq!(s.rows.len(), 1);
    assert_eq!(s.rows[0][0], "a image=d1");
    assert!(s.chart_svg.contains("Pareto frontier"));
    assert!(s.best_line.is_none(), "no SLOs known");
}

#[test]
fn an_unknown_gpu_count_makes_the_whole_chart_per_deployment() {
    let runs = [run(
        "a",
        &[("d1", Some(8)), ("d2", None)],
        vec![
            row("d1", 1.0, figures(10.0, 800.0), Some(true)),
            row("d2", 1.0, figures(20.0, 300.0), Some(true)),
        ],
    )];
    let s = &pareto(&runs, &[]).sections[0];
    assert!(!s.data.per_gpu);
    assert!(
        s.data
            .points
            .iter()
            .all(|p| p.throughput == p.output_throughput)
    );
    assert!(s.data.y_label.contains("per deployment"));
    assert_eq!(s.data.notes.len(), 1);
    assert!(
        s.data.notes[0].starts_with("GPU count unknown for a image=d2:"),
        "{}",
        s.data.notes[0]
    );
}

#[test]
fn slos_mark_points_draw_their_frontier_and_name_the_best() {
    // Concurrency raises throughput and TPOT; an invalid point is never the best.
    let rows = vec![
        row("d1", 1.0, figures(10.0, 100.0), Some(true)),
        row("d1", 4.0, figures(20.0, 300.0), Some(true)),
        row("d1", 16.0, figures(40.0, 500.0), Some(true)),
        row("d1", 64.0, figures(30.0, 900.0), Some(false)),
    ];
    let runs = [run("a", &[("d1", Some(1))], rows)];
    // p99 TPOT: 11, 22, 44, 33 ms.
    let view = pareto(&runs, &[slo("p99:tpot:30ms")]);
    assert_eq!(view.slo_source.as_deref(), Some("--slo"));
    let s = &view.sections[0];
    let meets: Vec<Option<Meets>> = s.data.points.iter().map(|p| p.meets_slo).collect();
    use Meets::*;
    assert_eq!(meets, [Some(Yes), Some(Yes), Some(No), Some(No)]);
    let best = s.data.best_within_slo.as_ref().unwrap();
    assert_eq!(best.point, "concurrency=4");
    let line = s.best_line.as_deref().unwrap();
    assert!(line.starts_with("Most throughput per GPU within the SLO (p99 TPOT <= 30 ms): a image=d1 concurrency=4, 300 tok/s/GPU at 50 tok/s/user on 1 GPUs."), "{line}");
    assert!(s.chart_svg.contains("SLO frontier"));
    // The frontier: all three valid points trade off; the SLO frontier the first two.
    let on: Vec<(bool, bool)> = s
        .data
        .points
        .iter()
        .map(|p| (p.on_frontier, p.on_slo_frontier))
        .collect();
    assert_eq!(
        on,
        [(true, true), (true, true), (true, false), (false, false)]
    );
    // The table is in interactivity order: the slowest per user first.
    assert_eq!(s.rows.len(), 3);
    assert_eq!(
        (s.rows[0][1].as_str(), s.rows[0][5].as_str()),
        ("concurrency=16", "no")
    );
    assert_eq!(
        (s.rows[2][1].as_str(), s.rows[2][5].as_str()),
        ("concurrency=1", "yes")
    );
    // A tighter SLO: nothing meets it.
    let s = &pareto(&runs, &[slo("p99:tpot:5ms")]).sections[0];
    assert!(s.data.best_within_slo.is_none());
    assert!(
        s.best_line
            .as_deref()
            .unwrap()
            .contains("none of the 3 valid points")
    );
    assert!(!s.chart_svg.contains("SLO frontier"));
    // A percentile the summaries lack: unknown, and the note names the key.
    let s = &pareto(&runs, &[slo("p90:tpot:30ms")]).sections[0];
    assert!(s.data.points.iter().all(|p| p.meets_slo == Some(Unknown)));
    assert!(
        s.data
            .notes
            .iter()
            .any(|n| n.starts_with("`p90_tpot_ms` is missing from the summaries of 4 point(s)"))
    );
}

#[test]
fn a_group_needs_two_points_with_both_values() {
    let no_tpot = json!({"output_throughput": 100.0});
    let runs = [run(
        "a",
        &[("d1", Some(1))],
        vec![
            row("d1", 1.0, figures(10.0, 100.0), Some(true)),
            row("d1", 2.0, no_tpot, Some(true)),
        ],
    )];
    assert!(pareto(&runs, &[]).sections.is_empty());
    // The mean TPOT stands in for a missing median.
    let mean_only = json!({"mean_tpot_ms": 25.0, "output_throughput": 100.0});
    let runs = [run(
        "a",
        &[("d1", Some(1))],
        vec![
            row("d1", 1.0, figures(10.0, 100.0), Some(true)),
            row("d1", 2.0, mean_only, Some(true)),
        ],
    )];
    let view = pareto(&runs, &[]);
    assert_eq!(view.sections[0].data.points[1].interactivity, 40.0);
}
