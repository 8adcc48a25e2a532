//! The "Capacity Search Result" block printed by `bench --search`: the interval, the binding
//! SLO, the edge's throughput and kind, the cost, and one line per level with each SLO's
//! estimate and confidence interval.

use std::fmt::Write;

use super::record::SearchRecord;
use crate::metrics::result_line as line;

fn opt(x: Option<f64>) -> String {
    x.map_or("-".into(), crate::units::number)
}

/// The result block.
pub fn render_text(r: &SearchRecord) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{:=^54}", " Capacity Search Result ");
    line(&mut out, "Axis:", r.swept_param.clone());
    line(&mut out, "Largest passing level:", opt(r.max_passing));
    line(&mut out, "Smallest failing level:", opt(r.first_failing));
    if let Some(w) = r.boundary_summary.relative_width {
        line(&mut out, "Interval width (%):", format!("{:.1}", w * 100.0));
    }
    if let Some(b) = &r.boundary_summary.binding_constraint {
        let _ = writeln!(out, "Binding SLO: {b}");
    }
    if let Some(t) = &r.boundary_summary.boundary_type {
        line(&mut out, "Edge:", t.clone());
    }
    if let Some(t) = &r.throughput_at_edge {
        line(
            &mut out,
            "Output throughput at edge (tok/s):",
            format!("{:.2}", t.output_throughput),
        );
        line(
            &mut out,
            "Request throughput at edge (req/s):",
            format!("{:.2}", t.request_throughput),
        );
    }
    line(&mut out, "Levels measured:", r.points.to_string());
    line(&mut out, "Measurements:", r.measurements.to_string());
    line(&mut out, "Search time (s):", format!("{:.2}", r.elapsed_s));
    line(
        &mut out,
        "Stopped because:",
        serde_json::to_value(r.convergence_reason)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
    );
    let _ = writeln!(out, "{:-^54}", " Levels ");
    for p in &r.all_points {
        let checks: Vec<String> = p
            .checks
            .iter()
            .map(|c| {
                let b = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.3}"));
                format!(
                    "{} {} {:.3} [{}, {}]",
                    c.stat,
                    c.metric_tag,
                    c.observed,
                    b(c.ci_low),
                    b(c.ci_high)
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "{:>10} {:<12} x{} n={} {}",
            crate::units::number(p.level),
            format!("{:?}", p.verdict).to_lowercase(),
            p.measurements,
            p.requests,
            checks.join(", ")
        );
    }
    let _ = writeln!(out, "{}", "=".repeat(54));
    out
}
