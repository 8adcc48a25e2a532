//! `orchestrate check`: passes against an identical baseline, exit 3 against a faster one,
//! noise from repetitions does not fail it, invalid points fail it (also new ones), bad input
//! is exit 2 (also the run itself or a baseline with nothing valid to compare with).

use std::process::Command;

use super::fixture::*;
use crate::common;

#[test]
fn check_passes_a_run_against_an_identical_baseline() {
    let results = tempfile::tempdir().unwrap();
    let base = write_run(results.path(), &clean("20261121-180000", 1.0, vec![0.0]));
    let run = write_run(results.path(), &clean("20261122-180000", 1.0, vec![0.0]));
    let out = orchestrate(&["check", s(&run), "--baseline", s(&base)]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(md.contains("orchestrate check: passed"), "{md}");
    assert_eq!(std::fs::read_to_string(run.join("check.md")).unwrap(), md);
    let junit = std::fs::read_to_string(run.join("check.junit.xml")).unwrap();
    assert!(junit.contains("tests=\"32\" failures=\"0\""), "{junit}");
}

#[test]
fn check_fails_with_exit_3_against_a_baseline_twice_as_fast() {
    let results = tempfile::tempdir().unwrap();
    write_run(results.path(), &clean("20261121-180000", 2.0, vec![0.0]));
    let run = write_run(results.path(), &clean("20261122-180000", 1.0, vec![0.0]));
    let summary = results.path().join("step-summary.md");
    std::fs::write(&summary, "earlier step\n").unwrap();
    let out = Command::new(common::bin())
        .args(["check", s(&run), "--baseline", "previous"])
        .env("GITHUB_STEP_SUMMARY", &summary)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(md.contains("orchestrate check: REGRESSION"), "{md}");
    assert!(
        md.contains("against baseline `demo/20261121-180000`"),
        "{md}"
    );
    // Throughput halves (-50%), latencies double (+100%): every gated metric regresses.
    assert_eq!(md.matches("**REGRESSED**").count(), 32, "{md}");
    assert!(md.contains("| -50.0% |"), "{md}");
    insta::assert_snapshot!("check_regression_md", md);
    let appended = std::fs::read_to_string(&summary).unwrap();
    assert!(appended.starts_with("earlier step\n## orchestrate check: REGRESSION"));
    let junit = std::fs::read_to_string(run.join("check.junit.xml")).unwrap();
    assert!(junit.contains("failures=\"32\""), "{junit}");
    assert!(
        junit.contains("<failure message=\"regressed: baseline"),
        "{junit}"
    );
}

#[test]
fn repeated_noisy_runs_do_not_fail_check() {
    let results = tempfile::tempdir().unwrap();
    // ±3% jitter over three repetitions; the current run's median is 3% slower.
    write_run(
        results.path(),
        &clean("20261121-180000", 1.0, vec![0.0, 0.03, -0.03]),
    );
    let run = write_run(
        results.path(),
        &clean("20261122-180000", 1.0, vec![0.03, 0.06, 0.0]),
    );
    let tight = [
        "--threshold",
        "p99_ttft_ms=+2%",
        "--threshold",
        "output_throughput=-2%",
    ];
    let mut args = vec!["check", s(&run), "--baseline", "previous"];
    args.extend(tight);
    let out = orchestrate(&args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(
        md.contains("| 3/3 |"),
        "medians over three repetitions: {md}"
    );
    assert!(
        md.contains("95% CI") && md.contains("[-8.5%, +3.0%]"),
        "{md}"
    );
    // The interval decides, not the widened threshold: `--noise-k` has no say here.
    args.extend(["--noise-k", "0"]);
    let out = orchestrate(&args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // The same change measured once on each side: no noise estimate, so the threshold alone
    // decides, and the 3 % drop fails a 2 % threshold.
    let base1 = write_run(results.path(), &clean("20261119-180000", 1.0, vec![0.0]));
    let cur1 = write_run(results.path(), &clean("20261120-180000", 1.0, vec![0.03]));
    let mut once = vec!["check", s(&cur1), "--baseline", s(&base1)];
    once.extend(tight);
    let out = orchestrate(&once);
    let md = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{md}");
    assert!(md.contains("threshold only"), "{md}");
    // And the report shows the spread.
    orchestrate(&["report", s(&run)]);
    let report = std::fs::read_to_string(run.join("report.md")).unwrap();
    assert!(report.contains(" ±2.9%"), "{report}");
}

#[test]
fn a_five_percent_regression_over_repetitions_is_caught() {
    let results = tempfile::tempdir().unwrap();
    write_run(
        results.path(),
        &clean("20261121-180000", 1.0, vec![0.0, 0.01, -0.01]),
    );
    // 5 % slower (throughput -4.8 %, latencies +5 %), with the same ±1 % noise.
    let run = write_run(
        results.path(),
        &clean("20261122-180000", 1.0 / 1.05, vec![0.01, -0.01, 0.0]),
    );
    let out = orchestrate(&[
        "check",
        s(&run),
        "--baseline",
        "previous",
        "--threshold",
        "output_throughput=-2%",
        "--threshold",
        "p99_ttft_ms=+2%",
    ]);
    let md = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{md}");
    assert_eq!(
        md.matches("**REGRESSED**").count(),
        16,
        "every point x metric: {md}"
    );
    // The printed interval lies wholly past the allowed change.
    let row = md
        .lines()
        .find(|l| l.contains("concurrency=4 | output_throughput"))
        .unwrap();
    let ci = row.split('|').nth(6).unwrap().trim();
    let (lo, hi) = ci
        .trim_matches(['[', ']'])
        .split_once(", ")
        .map(|(a, b)| {
            let p = |t: &str| t.trim_end_matches('%').parse::<f64>().unwrap();
            (p(a), p(b))
        })
        .unwrap();
    assert!(lo <= -4.8 && hi < -2.0, "{row}");
}

#[test]
fn an_invalid_point_fails_check() {
    let results = tempfile::tempdir().unwrap();
    let base = write_run(results.path(), &clean("20261121-180000", 1.0, vec![0.0]));
    let run = write_run(
        results.path(),
        &Fixture {
            short_at: Some(16),
            ..clean("20261122-180000", 1.0, vec![0.0])
        },
    );
    let out = orchestrate(&["check", s(&run), "--baseline", s(&base)]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stdout).contains("**INVALID**"));
}

#[test]
fn bad_threshold_syntax_is_exit_2_with_a_clear_message() {
    let results = tempfile::tempdir().unwrap();
    let run = write_run(results.path(), &clean("20261122-180000", 1.0, vec![0.0]));
    let out = orchestrate(&[
        "check",
        s(&run),
        "--baseline",
        s(&run),
        "--threshold",
        "p99_ttft_ms=10%",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("threshold `p99_ttft_ms=10%` is not `METRIC=+N%` or `METRIC=-N%`")
            && err.contains("needs a sign"),
        "{err}"
    );
    let out = orchestrate(&["check", s(&run), "--baseline", "nightly-42"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`nightly-42` is not a run directory"), "{err}");
}

#[test]
fn an_invalid_point_fails_check_even_against_an_invalid_baseline() {
    let results = tempfile::tempdir().unwrap();
    let base = write_run(results.path(), &Fixture::demo("20261121-180000"));
    let run = write_run(results.path(), &Fixture::demo("20261122-180000"));
    let out = orchestrate(&["check", s(&run), "--baseline", s(&base)]);
    assert_eq!(out.status.code(), Some(3));
    let md = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        md.matches("**INVALID**").count(),
        8,
        "two invalid points x four metrics: {md}"
    );
}

#[test]
fn the_run_itself_is_no_baseline() {
    let results = tempfile::tempdir().unwrap();
    write_run(results.path(), &clean("20261121-180000", 1.0, vec![0.0]));
    let run = write_run(results.path(), &clean("20261122-180000", 1.0, vec![0.0]));
    let latest = results.path().join("demo/latest");
    for (current, baseline) in [
        (s(&run), "latest"),
        (s(&latest), "latest"),
        (s(&run), s(&run)),
    ] {
        let out = orchestrate(&["check", current, "--baseline", baseline]);
        assert_eq!(out.status.code(), Some(2), "{current} vs {baseline}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("the baseline is the run demo/20261122-180000 itself; pick another"),
            "{err}"
        );
    }
}

#[test]
fn a_baseline_with_nothing_valid_is_exit_2() {
    let results = tempfile::tempdir().unwrap();
    // Every baseline point failed (the server crashed at every concurrency).
    let mut broken = clean("20261121-180000", 1.0, vec![0.0]);
    broken.concurrency = vec![4];
    broken.failed_at = Some(4);
    let failed = write_run(results.path(), &broken);
    // Every baseline point is invalid.
    let mut short = clean("20261120-180000", 1.0, vec![0.0]);
    short.concurrency = vec![4];
    short.short_at = Some(4);
    let invalid = write_run(results.path(), &short);
    let mut current = clean("20261122-180000", 1.0, vec![0.0]);
    current.concurrency = vec![4];
    let run = write_run(results.path(), &current);
    for (base, what) in [(&failed, "20261121-180000"), (&invalid, "20261120-180000")] {
        let out = orchestrate(&["check", s(&run), "--baseline", s(base)]);
        assert_eq!(out.status.code(), Some(2), "{what}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!(
                "baseline demo/{what} (status completed) has no valid completed point"
            )),
            "{err}"
        );
    }
}

#[test]
fn an_invalid_point_only_in_this_run_fails_check() {
    let results = tempfile::tempdir().unwrap();
    let mut small = clean("20261121-180000", 1.0, vec![0.0]);
    small.concurrency = vec![4];
    let base = write_run(results.path(), &small);
    let mut grown = clean("20261122-180000", 1.0, vec![0.0]);
    grown.concurrency = vec![4, 16];
    grown.short_at = Some(16);
    let run = write_run(results.path(), &grown);
    let out = orchestrate(&["check", s(&run), "--baseline", s(&base)]);
    assert_eq!(out.status.code(), Some(3));
    let md = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        md.matches("**INVALID**").count(),
        8,
        "two lengths x four metrics at concurrency 16: {md}"
    );
    assert!(!md.contains("not gated"), "{md}");
}
