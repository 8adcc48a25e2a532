//! Reports, validity, compare, check and the run index over archives written with the real
//! `archive::Archive` (fixtures with known numbers in `report/fixture.rs`), driven through
//! the built `orchestrate` binary where the CLI is the behaviour under test.

mod across;
mod fixture;
mod gate;
mod goodput;
mod pareto;
mod side;
mod window;

use std::path::PathBuf;

use fixture::*;

use crate::common::version_1_run;

#[test]
fn report_md_has_the_seed_tables_per_isl_osl() {
    let results = tempfile::tempdir().unwrap();
    let run = write_run(results.path(), &Fixture::demo("20261122-180000"));
    let out = orchestrate(&["report", s(&run)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let md = std::fs::read_to_string(run.join("report.md")).unwrap();
    insta::assert_snapshot!("report_md", md);
}

#[test]
fn report_html_is_self_contained_and_holds_every_chart() {
    let results = tempfile::tempdir().unwrap();
    let run = write_run(results.path(), &Fixture::demo("20261122-180000"));
    let out = orchestrate(&["report", s(&run)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(run.join("report.html")).unwrap();
    let plots: Vec<PathBuf> = std::fs::read_dir(run.join("plots"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    // Per ISL:OSL: throughput vs latency, TTFT and TPOT vs concurrency, and the Pareto view.
    assert_eq!(plots.len(), 8, "{plots:?}");
    for plot in &plots {
        let svg = std::fs::read_to_string(plot).unwrap();
        let title = svg.lines().nth(1).unwrap();
        assert!(title.starts_with("<title>"), "{title}");
        assert!(
            html.contains(svg.trim()),
            "report.html inlines {}",
            plot.display()
        );
    }
    assert_eq!(html.matches("<svg ").count(), plots.len());
    assert_eq!(
        html.matches("<svg ").count(),
        html.matches("</svg>").count()
    );
    // Nothing from the network: the only URL is the SVG namespace.
    let urls = html.matches("http").count();
    assert_eq!(urls, html.matches("http://www.w3.org/2000/svg").count());
    assert!(!html.contains("<script") && !html.contains("<link"));
    // The invalid point is hollow, listed in the chart and in the page.
    assert!(html.contains("Invalid points (hollow markers):"));
    assert!(html.contains("concurrency=64,input_len=1000,output_len=1000"));
    assert!(html.contains("concurrency (observed 42, needs &gt;= 64)"));
    // Tags balance (a cheap well-formedness check).
    for tag in ["table", "tr", "figure", "ul", "g"] {
        assert_eq!(
            html.matches(&format!("<{tag}>")).count() + html.matches(&format!("<{tag} ")).count(),
            html.matches(&format!("</{tag}>")).count(),
            "<{tag}> balanced"
        );
    }
}

#[test]
fn templates_can_be_overridden() {
    let results = tempfile::tempdir().unwrap();
    let run = write_run(results.path(), &Fixture::demo("20261122-180000"));
    let templates = tempfile::tempdir().unwrap();
    std::fs::write(
        templates.path().join("report.md.j2"),
        "custom {{ runs[0].backend }}: {{ tables | length }} tables\n",
    )
    .unwrap();
    let out = orchestrate(&["report", s(&run), "--template", s(templates.path())]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let md = std::fs::read_to_string(run.join("report.md")).unwrap();
    assert_eq!(md, "custom vllm: 2 tables\n");
    // report.html still came from the built-in template.
    assert!(
        std::fs::read_to_string(run.join("report.html"))
            .unwrap()
            .contains("<svg")
    );
}

#[test]
fn report_of_a_missing_run_is_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let out = orchestrate(&["report", s(dir.path())]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is not a run directory"), "{err}");
}

#[test]
fn terminal_table_is_what_the_runner_prints() {
    let results = tempfile::tempdir().unwrap();
    let run = write_run(results.path(), &Fixture::demo("20261122-180000"));
    let text = orchestrate::report::terminal_table(&run).unwrap();
    insta::assert_snapshot!("terminal_table", text);
}

#[test]
fn report_of_two_runs_overlays_their_curves() {
    let results = tempfile::tempdir().unwrap();
    let a = write_run(results.path(), &clean("20261122-180000", 1.0, vec![0.0]));
    let b = write_run(
        results.path(),
        &Fixture {
            tag: Some("nightly"),
            ..clean("20261122-190000", 2.0, vec![0.0])
        },
    );
    let out_dir = results.path().join("both");
    let out = orchestrate(&["report", s(&a), s(&b), "--out", s(&out_dir)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let md = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    // Same backend and task: the run ids label the runs.
    assert!(
        md.contains("## Benchmark Result (ISL:OSL=1000:1000 · 20261122-190000)"),
        "{md}"
    );
    let svg =
        std::fs::read_to_string(out_dir.join("plots/tpot-vs-concurrency_3000-150.svg")).unwrap();
    assert_eq!(svg.matches("<g class=\"series\"").count(), 2);
}

#[test]
fn swept_output_lengths_and_prefix_caching_get_their_charts() {
    let results = tempfile::tempdir().unwrap();
    // The dstack seed's sweep: ISL 3200, OSL 800..3200, concurrency 4..128.
    let lengths = vec![(3200, 800), (3200, 1600), (3200, 3200)];
    let plain = write_run(
        results.path(),
        &Fixture {
            lengths: lengths.clone(),
            concurrency: vec![4, 128],
            ..clean("20261122-180000", 1.0, vec![0.0])
        },
    );
    let cached = write_run(
        results.path(),
        &Fixture {
            task: "demo-prefix",
            lengths: vec![(3200, 800)],
            concurrency: vec![4, 128],
            shared_prefix: true,
            ..clean("20261122-190000", 1.5, vec![0.0])
        },
    );
    let out_dir = results.path().join("out");
    let out = orchestrate(&["report", s(&plain), s(&cached), "--out", s(&out_dir)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plots = out_dir.join("plots");
    for m in ["throughput", "latency", "ttft", "tpot"] {
        // At the highest concurrency with several output lengths, like the seed's 128.
        let f = plots.join(format!("{m}-vs-output-length_3200_c128.svg"));
        let svg = std::fs::read_to_string(&f).unwrap_or_else(|_| panic!("{} missing", f.display()));
        assert!(svg.contains("Output length (tokens)"));
        assert_eq!(
            svg.matches("<g class=\"series\"").count(),
            1,
            "only the plain run swept OSL"
        );
    }
    for m in ["throughput", "ttft", "tpot", "latency"] {
        let f = plots.join(format!("prefix-cache-{m}_3200-800.svg"));
        let svg = std::fs::read_to_string(&f).unwrap_or_else(|_| panic!("{} missing", f.display()));
        assert!(
            svg.contains("demo · no cache") && svg.contains("demo-prefix · prefix cached"),
            "{svg}"
        );
    }
    let md = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    assert!(
        md.contains("## Benchmark Result (ISL:OSL=3200:800 shared prefix · demo-prefix)"),
        "{md}"
    );
}

#[test]
fn a_failed_point_without_summary_is_shown_and_listed_not_plotted() {
    let results = tempfile::tempdir().unwrap();
    let run = write_run(
        results.path(),
        &Fixture {
            failed_at: Some(16),
            lengths: vec![(1000, 1000)],
            ..clean("20261122-180000", 1.0, vec![0.0])
        },
    );
    let text = orchestrate::report::terminal_table(&run).unwrap();
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with("16 "))
        .unwrap();
    assert_eq!(
        row.split_whitespace().collect::<Vec<_>>(),
        [
            "16", "-", "-", "-", "-", "-", "-", "-", "-", "NO", "(failed)"
        ]
    );
    let out = orchestrate(&["report", s(&run)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let md = std::fs::read_to_string(run.join("report.md")).unwrap();
    assert!(
        md.contains("status failed · failed: server exited with status 137"),
        "{md}"
    );
    let svg = std::fs::read_to_string(run.join("plots/ttft-vs-concurrency_1000-1000.svg")).unwrap();
    assert_eq!(
        svg.matches("class=\"point\"").count(),
        3,
        "1, 4 and 64 plotted; 16 has no numbers"
    );
}

#[test]
fn several_runs_need_out() {
    let results = tempfile::tempdir().unwrap();
    let a = write_run(results.path(), &clean("20261122-180000", 1.0, vec![0.0]));
    let b = write_run(results.path(), &clean("20261122-190000", 1.0, vec![0.0]));
    let out = orchestrate(&["report", s(&a), s(&b)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("pass --out DIR"));
    assert!(!a.join("report.md").exists());
}

#[test]
fn a_version_1_archive_is_read_by_report_and_check() {
    let results = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(results.path().join("demo")).unwrap();
    let base = version_1_run(results.path(), "20261123-223731");
    let run = version_1_run(results.path(), "20261124-000000");
    let out = orchestrate(&["report", s(&run)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let md = std::fs::read_to_string(run.join("report.md")).unwrap();
    assert!(md.contains("256:32"), "{md}");
    assert!(!md.contains("not valid results"), "{md}");
    let out = orchestrate(&["check", s(&run), "--baseline", "previous"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(md.contains(&format!("against baseline `demo/{}`", "20261123-223731")));
    assert!(md.contains("8 comparisons, 0 failing"), "{md}");
    assert_eq!(md.matches("| ok |").count(), 8, "{md}");
    drop(base);
}
