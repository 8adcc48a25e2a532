//! Re-scoring an archived run without running it again: `report --goodput` recomputes
//! goodput from the archived request records (the counts follow exactly from the records'
//! TTFTs), the archive stays as it was, and `check --goodput` gates the re-scored figures.

use std::process::Command;

use orchestrate::archive::{self, Rescore};
use orchestrate::load::{Slo, SloMetric};

use crate::common::{bin, json, latest, mock_task, run_command};

/// Every archived request's TTFT (ms), `None` for one that did not complete.
fn ttfts(point_dir: &std::path::Path) -> Vec<Option<f64>> {
    archive::read_requests(point_dir)
        .unwrap()
        .iter()
        .map(|r| orchestrate::metrics::request_times(r).map(|t| t.ttft_ms))
        .collect()
}

#[test]
fn new_goodput_slos_rescore_from_the_records() {
    let work = tempfile::tempdir().unwrap();
    let name = "trescore";
    let task = mock_task(
        work.path(),
        name,
        5,
        "  dataset: {kind: random, input_len: 8, output_len: 8}\n  num_prompts: 40\n  concurrency: 8\n  goodput: \"ttft:100000\"\n",
    );
    let results = work.path().join("results");
    let out = run_command(&task, &results, &work.path().join("state"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = latest(&results, name);
    let manifest = json(&dir.join("manifest.json"));
    let point_dir = dir
        .join("points")
        .join(manifest["points"][0]["dir"].as_str().unwrap());
    let archived = json(&point_dir.join("summary.json"));
    assert_eq!(
        archived["goodput"]["good_request_fraction"], 1.0,
        "{archived}"
    );

    // The median TTFT as the bound: the good requests are those at or under it.
    let times = ttfts(&point_dir);
    let mut done: Vec<f64> = times.iter().flatten().copied().collect();
    done.sort_by(f64::total_cmp);
    let bound = done[done.len() / 2];
    let good = done.iter().filter(|t| **t <= bound).count();
    let mut run = archive::read_run(&dir).unwrap();
    let how = Rescore {
        goodput: Some(vec![Slo {
            metric: SloMetric::Ttft,
            ms: bound,
        }]),
        trim: None,
    };
    archive::rescore(&mut run, &how).unwrap();
    let g = &run.rows[0].summaries[0].other["goodput"];
    assert_eq!(g["good_requests"].as_u64(), Some(good as u64), "{g}");
    let fraction = g["good_request_fraction"].as_f64().unwrap();
    assert!(
        (fraction - good as f64 / times.len() as f64).abs() < 1e-9,
        "{g}"
    );
    assert!(run.rescored.as_deref().unwrap().contains("TTFT"));

    // Below every TTFT: no request is good any more, in the report and in check.
    let none = format!("ttft:{}", done[0] / 2.0);
    let report = Command::new(bin())
        .arg("report")
        .arg(&dir)
        .args(["--goodput", &none])
        .output()
        .unwrap();
    assert!(
        report.status.success(),
        "{}",
        String::from_utf8_lossy(&report.stderr)
    );
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(md.contains("re-scored"), "{md}");
    // The archive is not changed.
    assert_eq!(json(&point_dir.join("summary.json")), archived);

    let base = results.join(name).join("base");
    assert!(
        Command::new("cp")
            .arg("-r")
            .arg(&dir)
            .arg(&base)
            .status()
            .unwrap()
            .success()
    );
    let mut m = json(&base.join("manifest.json"));
    m["run_id"] = "base".into();
    std::fs::write(base.join("manifest.json"), m.to_string()).unwrap();
    let check = |extra: &[&str]| {
        let out = Command::new(bin())
            .arg("check")
            .arg(&dir)
            .arg("--baseline")
            .arg(&base)
            .args(["--threshold", "request_goodput=-5%"])
            .args(extra)
            .output()
            .unwrap();
        let md = String::from_utf8_lossy(&out.stdout).to_string();
        let line = md
            .lines()
            .find(|l| l.contains("| request_goodput |"))
            .unwrap_or_else(|| panic!("{md}"))
            .to_string();
        (out.status.code(), line)
    };
    let (code, line) = check(&[]);
    assert_eq!(code, Some(0), "{line}");
    assert!(!line.contains("| 0 | 0 |"), "{line}");
    let (code, line) = check(&["--goodput", &none]);
    assert_eq!(code, Some(0), "{line}");
    assert!(line.contains("| 0 | 0 |"), "{line}");
}
