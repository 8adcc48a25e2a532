//! Goodput SLOs written in task files (`benchmark.goodput`, or a `goodput` matrix axis):
//! validated where they are written, carried into each point's load, shown as a report
//! column with the SLOs in words, and gated by `check` like the other metrics; and the
//! prefix cache's hit rates, shown and gated the same way when a point measured them.

use std::path::Path;
use std::process::Command;

use orchestrate::load::{Slo, SloMetric};
use orchestrate::plan::{self, Plan, PlanContext};
use orchestrate::spec;

use super::fixture::*;
use crate::common;

const HEAD: &str = "name: t
model: m
commands: [\"true\"]
benchmark:
  dataset: {kind: random, input_len: 8, output_len: 8}
  num_prompts: 1
";

fn plan_yaml(yaml: &str) -> Result<Plan, String> {
    let task =
        spec::load_str(Path::new("inline.yaml"), yaml.to_string()).map_err(|e| e.to_string())?;
    plan::build(&task, &PlanContext::new()).map_err(|e| e.to_string())
}

fn slo(metric: SloMetric, ms: f64) -> Slo {
    Slo { metric, ms }
}

#[test]
fn goodput_in_a_task_file_takes_vllms_forms() {
    let want = vec![slo(SloMetric::Ttft, 200.0), slo(SloMetric::Tpot, 50.0)];
    for form in [
        "goodput: \"ttft:200 tpot:50\"",
        "goodput: [\"ttft:200\", \"tpot:50\"]",
        "goodput: {ttft: 200ms, tpot: 50ms}",
        "goodput: {ttft: 0.2s, tpot: 50}",
    ] {
        let plan = plan_yaml(&format!("{HEAD}  {form}\n")).unwrap();
        assert_eq!(plan.deployments[0].points[0].load.goodput, want, "{form}");
    }
    // No goodput: no SLOs in the load (and none in its JSON).
    let plan = plan_yaml(HEAD).unwrap();
    let load = &plan.deployments[0].points[0].load;
    assert!(load.goodput.is_empty());
    assert!(serde_json::to_value(load).unwrap().get("goodput").is_none());
}

#[test]
fn bad_goodput_names_the_file_line_and_column() {
    let cases = [
        (
            "  goodput: {ttft: 200ms, itl: 5ms}\n",
            "inline.yaml:7:",
            "must be ttft, tpot or e2el",
        ),
        (
            "  goodput: \"ttft:200 tpot=50\"\n",
            "inline.yaml:7:12",
            "`tpot=50`: write KEY:MS",
        ),
        (
            "  goodput: {ttft: soon}\n",
            "inline.yaml:7:",
            "not a number of milliseconds or a duration",
        ),
    ];
    for (line, place, says) in cases {
        let err = plan_yaml(&format!("{HEAD}{line}")).unwrap_err();
        assert!(err.starts_with(place), "{line}: {err}");
        assert!(err.contains(says), "{line}: {err}");
    }
}

#[test]
fn goodput_with_an_external_command_is_an_error() {
    let yaml = "name: t
model: m
commands: [\"true\"]
benchmark:
  external: {command: \"true\", where: host, metrics: {output_throughput: {regex: \"([0-9]+)\"}}}
  goodput: \"ttft:200\"
";
    let err = plan_yaml(yaml).unwrap_err();
    assert!(err.starts_with("inline.yaml:6:"), "{err}");
    assert!(err.contains("`goodput` needs the embedded client"), "{err}");
}

#[test]
fn a_goodput_axis_gives_each_point_its_slos() {
    let yaml = format!("{HEAD}  matrix:\n    goodput: [\"ttft:200\", \"ttft:500 tpot:50\"]\n");
    let plan = plan_yaml(&yaml).unwrap();
    assert_eq!(plan.deployments.len(), 1, "goodput is a load axis");
    let points = &plan.deployments[0].points;
    assert_eq!(points[0].load.goodput, [slo(SloMetric::Ttft, 200.0)]);
    assert_eq!(
        points[1].load.goodput,
        [slo(SloMetric::Ttft, 500.0), slo(SloMetric::Tpot, 50.0)]
    );
    let err = plan_yaml(&format!(
        "{HEAD}  matrix:\n    goodput: [\"ttft:200\", \"ttft:abc\"]\n"
    ))
    .unwrap_err();
    assert!(err.starts_with("inline.yaml:8:"), "{err}");
    assert!(err.contains("`goodput`: `ttft:abc`"), "{err}");
    // `plan` prints each point's SLOs.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.yaml");
    std::fs::write(&path, &yaml).unwrap();
    let out = Command::new(common::bin())
        .args(["plan", s(&path)])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("goodput TTFT <= 200 ms\n"), "{text}");
    assert!(
        text.contains("goodput TTFT <= 500 ms, TPOT <= 50 ms\n"),
        "{text}"
    );
}

#[test]
fn report_tables_have_a_goodput_column_and_say_what_it_counts() {
    let results = tempfile::tempdir().unwrap();
    let f = Fixture {
        goodput: Some(0.5),
        ..clean("20261122-180000", 1.0, vec![0.0])
    };
    let run = write_run(results.path(), &f);
    let md = report_md(&run);
    assert!(
        md.contains("| P99 TPOT (ms) | Request Goodput (req/s) | Valid |"),
        "{md}"
    );
    let note = "Request goodput: completed requests per second that met TTFT <= 2000 ms, TPOT <= 50 ms (the whole point).";
    assert!(md.contains(note), "{md}");
    assert!(
        std::fs::read_to_string(run.join("report.html"))
            .unwrap()
            .contains(&note.replace('<', "&lt;")),
        "the html report says it too (escaped)"
    );
    // The cell is the summary's request_goodput: half the request throughput here.
    let rps = summary(4, 1000, 1000, 1.0, 0.0, 4)["request_throughput"]
        .as_f64()
        .unwrap();
    let goodput = orchestrate::units::number(rps * 0.5);
    let row = md
        .lines()
        .find(|l| l.starts_with("| 4 |"))
        .expect("the concurrency 4 row");
    assert!(row.ends_with(&format!("| {goodput} | yes |")), "{row}");
    // A run without SLOs has no goodput column.
    let plain = write_run(results.path(), &clean("20261123-180000", 1.0, vec![0.0]));
    let md = report_md(&plain);
    assert!(!md.contains("Goodput"), "{md}");
}

#[test]
fn check_gates_on_request_goodput() {
    let results = tempfile::tempdir().unwrap();
    let with = |run_id, fraction| Fixture {
        goodput: Some(fraction),
        ..clean(run_id, 1.0, vec![0.0])
    };
    let base = write_run(results.path(), &with("20261121-180000", 0.9));
    let same = write_run(results.path(), &with("20261122-180000", 0.9));
    let worse = write_run(results.path(), &with("20261123-180000", 0.6));
    let gate = |run: &Path| {
        orchestrate(&[
            "check",
            s(run),
            "--baseline",
            s(&base),
            "--threshold",
            "request_goodput=-5%",
        ])
    };
    let out = gate(&same);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // Throughput and latencies are unchanged; only fewer requests meet the SLOs.
    let out = gate(&worse);
    let md = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{md}");
    assert!(md.contains("request_goodput"), "{md}");
    assert_eq!(md.matches("**REGRESSED**").count(), 8, "{md}");
    assert!(md.contains("| -33.3% |"), "{md}");
}

#[test]
fn compare_has_a_goodput_table_only_when_the_runs_had_slos() {
    let results = tempfile::tempdir().unwrap();
    let with = |run_id, fraction| Fixture {
        goodput: Some(fraction),
        ..clean(run_id, 1.0, vec![0.0])
    };
    let a = write_run(results.path(), &with("20261121-180000", 0.8));
    let b = write_run(results.path(), &with("20261122-180000", 0.4));
    let out = orchestrate(&["compare", s(&a), s(&b)]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("Request goodput (req/s), ISL:OSL=1000:1000"),
        "{text}"
    );
    assert!(text.contains("-50.0% worse"), "{text}");
    let plain_a = write_run(results.path(), &clean("20261123-180000", 1.0, vec![0.0]));
    let plain_b = write_run(results.path(), &clean("20261124-180000", 1.0, vec![0.0]));
    let out = orchestrate(&["compare", s(&plain_a), s(&plain_b)]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(!text.contains("goodput"), "{text}");
    assert!(text.contains("Mean TTFT (ms), ISL:OSL=1000:1000"), "{text}");
}

#[test]
fn prefix_cache_rates_are_columns_and_gated_by_check() {
    let results = tempfile::tempdir().unwrap();
    let with = |run_id, achieved| Fixture {
        prefix_cache: Some((Some(achieved), 0.8)),
        ..clean(run_id, 1.0, vec![0.0])
    };
    let base = write_run(results.path(), &with("20261121-190000", 0.8));
    let md = report_md(&base);
    assert!(
        md.contains("| Prefix Cache Hit Rate | Server Prefix Cache Hit Rate | Ideal Prefix Cache Hit Rate | Hit Rate / Ideal | Valid |"),
        "{md}"
    );
    let row = md.lines().find(|l| l.starts_with("| 4 |")).unwrap();
    assert!(row.ends_with("| 0.8 | 0.8 | 0.8 | 1 | yes |"), "{row}");
    // A run that did not measure it has no such column, even with the workload's ideal.
    let plain = write_run(results.path(), &clean("20261123-190000", 1.0, vec![0.0]));
    assert!(!report_md(&plain).contains("Prefix Cache"));
    let ideal_only = Fixture {
        prefix_cache: Some((None, 0.8)),
        ..clean("20261124-190000", 1.0, vec![0.0])
    };
    assert!(!report_md(&write_run(results.path(), &ideal_only)).contains("Prefix Cache"));
    // Half the ideal: achieved/ideal regresses by 50%.
    let worse = write_run(results.path(), &with("20261122-190000", 0.4));
    let out = orchestrate(&[
        "check",
        s(&worse),
        "--baseline",
        s(&base),
        "--threshold",
        "prefix_cache_hit_vs_ideal=-10%",
    ]);
    let md = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{md}");
    assert!(md.contains("prefix_cache_hit_vs_ideal"), "{md}");
    assert!(md.contains("| -50.0% |"), "{md}");
}

#[test]
fn prefix_block_size_in_a_task_file_sets_the_ideal_s_block() {
    let plan = plan_yaml(&format!("{HEAD}  prefix_block_size: 32\n")).unwrap();
    let load = &plan.deployments[0].points[0].load;
    assert_eq!(load.prefix_block_size, 32);
    assert_eq!(serde_json::to_value(load).unwrap()["prefix_block_size"], 32);
    // The default (16, vLLM's) is not written into the load.
    let plan = plan_yaml(HEAD).unwrap();
    let load = &plan.deployments[0].points[0].load;
    assert_eq!(load.prefix_block_size, 16);
    assert!(
        serde_json::to_value(load)
            .unwrap()
            .get("prefix_block_size")
            .is_none()
    );
    // `plan` says a block size that is not the default.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.yaml");
    for (yaml, said) in [
        (format!("{HEAD}  prefix_block_size: 32\n"), true),
        (HEAD.to_string(), false),
    ] {
        std::fs::write(&path, yaml).unwrap();
        let out = Command::new(common::bin())
            .arg("plan")
            .arg(&path)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(text.contains("prefix blocks of 32 tokens"), said, "{text}");
        assert!(!text.contains("prefix blocks of 16"), "{text}");
    }
    let err = plan_yaml(&format!("{HEAD}  prefix_block_size: 0\n")).unwrap_err();
    assert!(err.starts_with("inline.yaml:7:"), "{err}");
    assert!(
        err.contains("`prefix_block_size` must be at least 1"),
        "{err}"
    );
}
