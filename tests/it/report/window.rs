//! Points that trimmed a warm-up and cool-down: report tables, compare and check use the
//! trimmed window's throughput and latencies, and say so.

use super::fixture::*;

#[test]
fn check_gates_on_the_trimmed_window() {
    let results = tempfile::tempdir().unwrap();
    // Whole-point figures identical; only the measured window is 20% slower.
    let base = Fixture {
        trimmed_speed: Some(1.0),
        ..clean("20261121-180000", 1.0, vec![0.0])
    };
    let cur = Fixture {
        trimmed_speed: Some(0.8),
        ..clean("20261122-180000", 1.0, vec![0.0])
    };
    write_run(results.path(), &base);
    let run = write_run(results.path(), &cur);
    let out = orchestrate(&["check", s(&run), "--baseline", "previous"]);
    let md = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{md}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        md.contains("gated on the trimmed window (warm-up 30 s, cool-down 10 s)"),
        "{md}"
    );
    assert!(md.contains("| -20.0% |"), "throughput in the window: {md}");
}

#[test]
fn check_passes_when_only_the_trimmed_away_edges_differ() {
    let results = tempfile::tempdir().unwrap();
    // The whole point is slower (warm-up), the measured window is not.
    let base = Fixture {
        trimmed_speed: Some(1.0),
        ..clean("20261121-180000", 1.0, vec![0.0])
    };
    let cur = Fixture {
        trimmed_speed: Some(1.0),
        ..clean("20261122-180000", 0.8, vec![0.0])
    };
    write_run(results.path(), &base);
    let run = write_run(results.path(), &cur);
    let out = orchestrate(&["check", s(&run), "--baseline", "previous"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn report_and_compare_tables_show_the_trimmed_window() {
    let results = tempfile::tempdir().unwrap();
    let f = Fixture {
        trimmed_speed: Some(2.0),
        ..clean("20261122-180000", 1.0, vec![0.0])
    };
    let run = write_run(results.path(), &f);
    let out = orchestrate(&["report", s(&run)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let md = std::fs::read_to_string(run.join("report.md")).unwrap();
    let note = "Output token throughput and latencies: trimmed window (warm-up 30 s, cool-down 10 s); request throughput: the whole point.";
    assert!(md.contains(note), "{md}");
    let html = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert!(html.contains(note), "the html report says it too");
    // The window's throughput (twice the whole point's) is what the table shows.
    let whole = summary(1, 1000, 1000, 1.0, 0.0, 1)["output_throughput"]
        .as_f64()
        .unwrap();
    let window = summary(1, 1000, 1000, 2.0, 0.0, 1)["output_throughput"]
        .as_f64()
        .unwrap();
    let table_line = md
        .lines()
        .find(|l| l.starts_with("| 1 |"))
        .expect("a row for concurrency 1");
    let shown = orchestrate::units::number(window);
    assert!(table_line.contains(&shown), "{table_line} shows {shown}");
    assert!(
        !table_line.contains(&orchestrate::units::number(whole)),
        "{table_line}"
    );

    let other = write_run(
        results.path(),
        &Fixture {
            trimmed_speed: Some(2.0),
            ..clean("20261123-180000", 1.0, vec![0.0])
        },
    );
    let out = orchestrate(&["compare", s(&run), s(&other)]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains(note), "{text}");
}
