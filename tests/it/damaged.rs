//! A damaged archive said as such, by every verb that reads it: a point's summary.json cut
//! short (or holding a figure that is not a number) and a manifest with a bad `validity` are
//! errors naming the file and the field or line, never a point silently read as missing.
//! `report`, `compare` and `check` refuse it as bad input (exit 2; for `check` not a
//! regression), `runs` lists the run marked damaged and names the file, and `run --resume`
//! refuses to go on rather than drop the measured point.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::{bin, version_1_run};

const POINT: &str = "points/concurrency=4/summary.json";

fn orchestrate(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .env("ORCHESTRATE_STATE_DIR", std::env::temp_dir())
        .output()
        .unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A baseline run and a run whose point summary is cut to 300 bytes.
fn truncated() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let results = tempfile::tempdir().unwrap();
    let base = version_1_run(results.path(), "20261123-223731");
    let run = version_1_run(results.path(), "20261124-000000");
    let path = run.join(POINT);
    let text = std::fs::read(&path).unwrap();
    std::fs::write(&path, &text[..300]).unwrap();
    (results, base, run)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// The error names the file, says where it breaks and what to do.
fn names_the_damage(err: &str, run: &Path) {
    let file = run.join(POINT);
    assert!(err.contains(s(&file)), "{err}");
    assert!(
        err.contains("EOF while parsing") && err.contains("line"),
        "{err}"
    );
    assert!(err.contains("restore it"), "{err}");
}

#[test]
fn report_refuses_a_truncated_point_summary() {
    let (_results, _base, run) = truncated();
    let out = orchestrate(&["report", s(&run)]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    names_the_damage(&stderr(&out), &run);
    assert!(!run.join("report.md").exists());
}

#[test]
fn compare_refuses_a_truncated_point_summary() {
    let (_results, base, run) = truncated();
    let out = orchestrate(&["compare", s(&base), s(&run)]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    names_the_damage(&stderr(&out), &run);
}

#[test]
fn check_calls_a_truncated_point_summary_unreadable_not_a_regression() {
    let (_results, _base, run) = truncated();
    let out = orchestrate(&["check", s(&run), "--baseline", "previous"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    names_the_damage(&stderr(&out), &run);
    assert!(!String::from_utf8_lossy(&out.stdout).contains("MISSING"));
}

#[test]
fn runs_lists_a_damaged_run_marked_and_names_the_file() {
    let (results, _base, run) = truncated();
    let out = orchestrate(&["runs", "--results", s(results.path())]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let table = String::from_utf8_lossy(&out.stdout);
    let line = table
        .lines()
        .find(|l| l.contains("20261124-000000"))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(line.contains("(1 damaged)"), "{table}");
    let sound = table
        .lines()
        .find(|l| l.contains("20261123-223731"))
        .unwrap();
    assert!(!sound.contains("damaged"), "{table}");
    names_the_damage(&stderr(&out), &run);
    let out = orchestrate(&["runs", "--json", "--results", s(results.path())]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"damaged\":["));
}

#[test]
fn resume_refuses_to_drop_a_measured_point_with_a_damaged_summary() {
    let (_results, _base, run) = truncated();
    let before = std::fs::read(run.join("manifest.json")).unwrap();
    let out = orchestrate(&["run", "--no-report", "--resume", s(&run)]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    names_the_damage(&stderr(&out), &run);
    assert_eq!(std::fs::read(run.join("manifest.json")).unwrap(), before);
}

#[test]
fn a_figure_that_is_not_a_number_is_an_error_naming_the_field() {
    let results = tempfile::tempdir().unwrap();
    let run = version_1_run(results.path(), "20261124-000000");
    let path = run.join(POINT);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replacen("\"completed\": 16", "\"completed\": \"16\"", 1),
    )
    .unwrap();
    let out = orchestrate(&["report", s(&run)]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(s(&path)) && err.contains("field `completed`"),
        "{err}"
    );
}

#[test]
fn a_bad_validity_in_the_manifest_is_an_error_naming_the_point_and_field() {
    let results = tempfile::tempdir().unwrap();
    let run = version_1_run(results.path(), "20261124-000000");
    let path = run.join("manifest.json");
    let mut manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    manifest["points"][1]["validity"]["valid"] = serde_json::json!("yes");
    std::fs::write(&path, manifest.to_string()).unwrap();
    let out = orchestrate(&["report", s(&run)]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(s(&path)) && err.contains("field `validity`") && err.contains("concurrency=4"),
        "{err}"
    );
}

/// A manifest that is not UTF-8 or not JSON (issue 29, item 4): every verb says why and
/// where (line, column, byte), not only that it failed to read the file.
#[test]
fn a_garbled_manifest_says_why_and_where() {
    for (bytes, want) in [
        (
            &b"{\"task\": \"d\xe9mo\"}"[..],
            "not UTF-8 text at line 1, column 12 (byte 11, 0xe9)",
        ),
        (
            &b"{\"task\": demo}"[..],
            "not JSON at line 1, column 10 (byte 9)",
        ),
    ] {
        let results = tempfile::tempdir().unwrap();
        let run = version_1_run(results.path(), "20261124-000000");
        let path = run.join("manifest.json");
        std::fs::write(&path, bytes).unwrap();
        let out = orchestrate(&["report", s(&run)]);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains(s(&path)) && err.contains(want), "{err}");
        let out = orchestrate(&["runs", "--results", s(results.path())]);
        let err = stderr(&out);
        assert!(err.contains(s(&path)) && err.contains(want), "runs: {err}");
    }
}
