//! The verdict of `check` as markdown (for a CI job summary) and JUnit XML.

use std::fmt::Write as _;

use super::{CheckReport, Comparison, Verdict};
use crate::units::number;

fn pct(v: Option<f64>) -> String {
    v.map_or("-".into(), |d| format!("{:+.1}%", d * 100.0))
}

/// `[-6.1%, -3.9%]`, or `threshold only` when a side had one repetition.
fn interval_text(c: &Comparison) -> String {
    match c.interval {
        Some((lo, hi)) => format!("[{}, {}]", pct(Some(lo)), pct(Some(hi))),
        None if c.baseline.is_some() && c.current.is_some() => "threshold only".to_string(),
        None => "-".to_string(),
    }
}

fn verdict_text(v: Verdict) -> &'static str {
    match v {
        Verdict::Ok => "ok",
        Verdict::Improved => "improved",
        Verdict::Regressed => "**REGRESSED**",
        Verdict::Missing => "**MISSING**",
        Verdict::Invalid => "**INVALID**",
        Verdict::NoBaseline => "no baseline",
    }
}

/// A markdown summary fit for a CI job summary.
pub fn markdown(report: &CheckReport) -> String {
    let mut out = String::new();
    let failures = report.failures();
    let _ = writeln!(
        out,
        "## orchestrate check: {}\n",
        if failures == 0 {
            "passed"
        } else {
            "REGRESSION"
        }
    );
    let _ = writeln!(
        out,
        "Run `{}` against baseline `{}`: {} comparisons, {} failing.\n",
        report.current,
        report.baseline,
        report.comparisons.len(),
        failures
    );
    let thresholds: Vec<String> = report.thresholds.iter().map(|t| format!("`{t}`")).collect();
    let _ = writeln!(
        out,
        "Thresholds: {}. Medians over repetitions. With two or more repetitions on both sides a 95% bootstrap confidence interval of the change decides: a point regresses only when the whole interval is worse than the allowed change. With one repetition there is no noise estimate (`threshold only`): the median change decides, the threshold widened to {} x the observed spread when that is larger.\n",
        thresholds.join(", "),
        number(report.noise_k)
    );
    if let Some(window) = &report.window {
        let _ = writeln!(
            out,
            "Window: output throughput and latencies are gated on the {window}; other figures on the whole point.\n"
        );
    }
    let _ = writeln!(
        out,
        "| Point | Metric | Baseline | Current | Change | 95% CI | Allowed | Spread | Reps (cur/base) | Verdict |"
    );
    let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|---:|:---:|---|");
    // Failures first, then the rest in order.
    let mut rows: Vec<&Comparison> = report.comparisons.iter().collect();
    rows.sort_by_key(|c| !c.verdict.fails());
    for c in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | ±{:.1}% | {:.1}% | {}/{} | {} |",
            c.point,
            c.metric,
            c.baseline.map_or("-".into(), number),
            c.current.map_or("-".into(), number),
            pct(c.delta),
            interval_text(c),
            c.allowed * 100.0,
            c.noise * 100.0,
            c.repetitions.0,
            c.repetitions.1,
            verdict_text(c.verdict)
        );
    }
    if !report.new_points.is_empty() {
        let _ = writeln!(
            out,
            "\nPoints only in this run (not gated): {}",
            report.new_points.join("; ")
        );
    }
    out
}

fn xml(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

/// JUnit XML: one test case per point x metric; failures carry the numbers.
pub fn junit(report: &CheckReport) -> String {
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"orchestrate check\" tests=\"{n}\" failures=\"{f}\">\n<testsuite name=\"{}\" tests=\"{n}\" failures=\"{f}\" skipped=\"{s}\">",
        xml(&format!("{} vs {}", report.current, report.baseline)),
        n = report.comparisons.len(),
        f = report.failures(),
        s = report
            .comparisons
            .iter()
            .filter(|c| c.verdict == Verdict::NoBaseline)
            .count(),
    );
    for c in &report.comparisons {
        let _ = write!(
            out,
            "<testcase classname=\"{}\" name=\"{}\">",
            xml(&c.point),
            xml(&c.metric)
        );
        let detail = format!(
            "baseline {} current {} change {} allowed ±{:.1}% spread {:.1}%",
            c.baseline.map_or("-".into(), number),
            c.current.map_or("-".into(), number),
            pct(c.delta),
            c.allowed * 100.0,
            c.noise * 100.0
        );
        match c.verdict {
            v if v.fails() => {
                let _ = write!(
                    out,
                    "<failure message=\"{}\">{}</failure>",
                    xml(&format!("{:?}: {detail}", v).to_lowercase()),
                    xml(&detail)
                );
            }
            Verdict::NoBaseline => out.push_str("<skipped message=\"no valid baseline value\"/>"),
            _ => {}
        }
        out.push_str("</testcase>\n");
    }
    out.push_str("</testsuite>\n</testsuites>\n");
    out
}
