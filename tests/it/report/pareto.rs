//! The Pareto view end to end: a mock task with two deployments (the second serves twice as
//! fast) and a concurrency sweep, run for real. `report` and `compare` draw the chart, list
//! the frontier that the archived summaries give (recomputed here from summary.json), divide
//! by the GPUs the manifest records, and `--slo` changes which points meet the SLO.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::fixture::{orchestrate, s};
use crate::common::{json, latest, repo, run_command};

/// Run the sweep: deployments `speed=1` and `speed=2` (2 GPUs each, as planned), concurrency
/// 1, 4 and 16, short requests. The run directory.
fn run_sweep(work: &Path) -> PathBuf {
    let task = work.join("pareto.yaml");
    let text = format!(
        "name: pareto\nbackend: vllm\nmodel: mock-model\nport: auto\n\
         commands:\n  - \"{{{{ orchestrate }}}} mock-server --port {{{{ port }}}} --decode-ms 1:4,16:16 --speed {{{{ speed }}}}\"\n\
         readiness: {{http: /health, timeout: 30s}}\n\
         resources: {{gpu: 2}}\n\
         benchmark:\n  tokenizer: {}\n  ignore_eos: true\n\
         \x20 dataset: {{kind: random, input_len: 32, output_len: 16}}\n\
         \x20 num_prompts: \"{{{{ concurrency * 2 }}}}\"\n\
         \x20 matrix:\n    speed: [1, 2]\n    concurrency: [1, 4, 16]\n",
        repo().join("data/tokenizer/tokenizer.json").display()
    );
    std::fs::write(&task, text).unwrap();
    let results = work.join("results");
    let out = run_command(&task, &results, &work.join("state"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    latest(&results, "pareto")
}

/// One point as the archive has it.
#[derive(Debug)]
struct Archived {
    point: String,
    deployment: String,
    x: f64,
    y: f64,
    p99_tpot: f64,
    valid: bool,
}

/// Every point from manifest.json and its summary.json: x = 1000 / median TPOT, y = output
/// throughput / the deployment's GPUs.
fn archived(run: &Path) -> Vec<Archived> {
    let manifest = json(&run.join("manifest.json"));
    let gpus = |dep: &str| {
        manifest["deployments"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["id"] == dep)
            .and_then(|d| d["gpus"].as_f64())
            .unwrap_or_else(|| panic!("deployment {dep} records no gpus: {manifest}"))
    };
    let mut out = Vec::new();
    for p in manifest["points"].as_array().unwrap() {
        let summary = json(
            &run.join("points")
                .join(p["dir"].as_str().unwrap())
                .join("summary.json"),
        );
        let f = |k: &str| {
            summary[k]
                .as_f64()
                .unwrap_or_else(|| panic!("{k}: {summary}"))
        };
        let deployment = p["deployment"].as_str().unwrap().to_string();
        out.push(Archived {
            point: p["id"].as_str().unwrap().to_string(),
            x: 1000.0 / f("median_tpot_ms"),
            y: f("output_throughput") / gpus(&deployment),
            p99_tpot: f("p99_tpot_ms"),
            valid: p["status"] == "completed" && p["validity"]["valid"] == true,
            deployment,
        });
    }
    out
}

/// (deployment, point) of the valid points no other valid point dominates.
fn frontier(points: &[&Archived]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = points
        .iter()
        .filter(|p| {
            !points
                .iter()
                .any(|q| q.x >= p.x && q.y >= p.y && (q.x > p.x || q.y > p.y))
        })
        .map(|p| (p.deployment.clone(), p.point.clone()))
        .collect();
    out.sort();
    out
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

/// The one group of pareto.json in `dir`, checked against the archive; the (deployment,
/// point) of the points it says meet the SLO.
fn check_view(dir: &Path, points: &[Archived], limit: f64) -> Vec<(String, String)> {
    let view = json(&dir.join("pareto.json"));
    assert_eq!(view["slo_source"], "--slo", "{view}");
    let groups = view["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "{view}");
    let g = &groups[0];
    assert_eq!(g["group"], "32:16");
    assert_eq!(g["per_gpu"], true, "{g}");
    let shown = g["points"].as_array().unwrap();
    assert_eq!(shown.len(), points.len());
    let key = |p: &Value| {
        (
            p["deployment"].as_str().unwrap().to_string(),
            p["point"].as_str().unwrap().to_string(),
        )
    };
    let mut on_frontier = Vec::new();
    let mut meeting = Vec::new();
    for p in shown {
        let a = points
            .iter()
            .find(|a| (a.deployment.clone(), a.point.clone()) == key(p))
            .unwrap_or_else(|| panic!("{p} is not in the archive"));
        let (x, y) = (
            p["interactivity"].as_f64().unwrap(),
            p["throughput"].as_f64().unwrap(),
        );
        assert!(close(x, a.x) && close(y, a.y), "{p} vs {a:?}");
        assert_eq!(p["gpus"], 2.0);
        assert_eq!(p["valid"], a.valid);
        let meets = if a.p99_tpot <= limit { "yes" } else { "no" };
        assert_eq!(p["meets_slo"], meets, "{p} vs {a:?}, limit {limit}");
        if p["on_frontier"] == true {
            on_frontier.push(key(p));
        }
        if meets == "yes" {
            meeting.push(key(p));
        }
    }
    on_frontier.sort();
    let valid: Vec<&Archived> = points.iter().filter(|p| p.valid).collect();
    assert_eq!(on_frontier, frontier(&valid), "{g}");
    // The SLO frontier, and the best point within the SLO: the most throughput per GPU.
    let within: Vec<&Archived> = valid
        .iter()
        .copied()
        .filter(|p| p.p99_tpot <= limit)
        .collect();
    let mut on_slo: Vec<(String, String)> = shown
        .iter()
        .filter(|p| p["on_slo_frontier"] == true)
        .map(key)
        .collect();
    on_slo.sort();
    assert_eq!(on_slo, frontier(&within));
    let best = within.iter().max_by(|a, b| a.y.total_cmp(&b.y));
    match best {
        Some(b) => assert_eq!(g["best_within_slo"]["point"], b.point.as_str()),
        None => assert!(g["best_within_slo"].is_null()),
    }
    meeting.sort();
    meeting
}

#[test]
fn report_and_compare_draw_the_pareto_view_of_a_real_sweep() {
    let work = tempfile::tempdir().unwrap();
    let run = run_sweep(work.path());
    let points = archived(&run);
    assert_eq!(points.len(), 6);
    // An SLO between the archived p99 TPOTs: some valid points meet it, some do not.
    let mut p99: Vec<f64> = points.iter().map(|p| p.p99_tpot).collect();
    p99.sort_by(f64::total_cmp);
    p99.dedup();
    assert!(p99.len() >= 2, "{p99:?}");
    let mid = p99.len() / 2;
    let limit = (p99[mid - 1] + p99[mid]) / 2.0;
    let tight = run.join("tight");
    let out = orchestrate(&[
        "report",
        s(&run),
        "--out",
        s(&tight),
        "--slo",
        &format!("p99:tpot:{limit}ms"),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meeting = check_view(&tight, &points, limit);
    assert!(
        !meeting.is_empty() && meeting.len() < points.len(),
        "{meeting:?}"
    );
    // The page: the section, its chart with both frontiers, and the frontier table.
    let md = std::fs::read_to_string(tight.join("report.md")).unwrap();
    let section = md
        .split("## Throughput per GPU vs interactivity (Pareto)")
        .nth(1)
        .unwrap_or_else(|| panic!("no Pareto section: {md}"));
    assert!(
        section.contains(
            "![Throughput per GPU vs interactivity, ISL:OSL=32:16](plots/pareto_32-16.svg)"
        ),
        "{section}"
    );
    assert!(section.contains("| Run / deployment | Point | Interactivity (tok/s/user) | Output tok/s/GPU | GPUs | Meets SLO |"), "{section}");
    let view = json(&tight.join("pareto.json"));
    for p in view["groups"][0]["points"].as_array().unwrap() {
        let row = format!(
            "| {} | {} |",
            p["series"].as_str().unwrap(),
            p["point"].as_str().unwrap()
        );
        assert_eq!(
            section.contains(&row),
            p["on_frontier"] == true,
            "{row}\n{section}"
        );
    }
    assert!(
        section.contains("Most throughput per GPU within the SLO (p99 TPOT <= "),
        "{section}"
    );
    let svg = std::fs::read_to_string(tight.join("plots/pareto_32-16.svg")).unwrap();
    assert!(svg.contains(r#"data-series="Pareto frontier""#), "{svg}");
    assert!(svg.contains(r#"data-series="SLO frontier""#), "{svg}");
    assert_eq!(svg.matches(r#"<g class="series""#).count(), 4);
    let html = std::fs::read_to_string(tight.join("report.html")).unwrap();
    assert!(html.contains(svg.trim()));
    // A looser SLO: every point meets it, so --slo changed the verdicts.
    let loose = run.join("loose");
    let out = orchestrate(&[
        "report",
        s(&run),
        "--out",
        s(&loose),
        "--slo",
        "p99:tpot:10s",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let all = check_view(&loose, &points, 10_000.0);
    assert_eq!(all.len(), points.len());
    assert_ne!(all, meeting);
    // compare: one run with two deployments is two series; the same view and files.
    let cmp = run.join("cmp");
    let out = orchestrate(&[
        "compare",
        s(&run),
        "--out",
        s(&cmp),
        "--slo",
        &format!("p99:tpot:{limit}ms"),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(check_view(&cmp, &points, limit), meeting);
    let md = std::fs::read_to_string(cmp.join("compare.md")).unwrap();
    assert!(
        md.contains("## Throughput per GPU vs interactivity (Pareto)"),
        "{md}"
    );
    assert!(cmp.join("plots/pareto_32-16.svg").is_file());
    // A bad SLO is bad input naming the flag.
    let out = orchestrate(&["report", s(&run), "--slo", "p99:itl:5ms"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--slo"));
}
