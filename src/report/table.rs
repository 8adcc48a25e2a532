//! Result tables in the shape of the Dynamo seed: one table per run, deployment and ISL:OSL,
//! one row per point (concurrency, request and output token throughput, mean/P99 E2E, TTFT,
//! TPOT, request goodput when the points had SLOs, the time to first output token when a
//! model reasoned, the prefix cache's hit rates when they were measured, and the GPU
//! telemetry figures when the points have them). Builds the table data (also handed to
//! templates) and renders it as aligned terminal text or GitHub markdown. Does not read files
//! (data) or draw charts (svg).

use std::fmt::Write as _;

use serde::Serialize;

use super::data::{Row, Run, value_text};
pub use crate::units::number;

/// The metric columns: header and summary field (vllm bench serve names).
pub const METRIC_COLUMNS: &[(&str, &str)] = &[
    ("Request Throughput (req/s)", "request_throughput"),
    ("Output Token Throughput (tok/s)", "output_throughput"),
    ("Mean E2E Latency (ms)", "mean_e2el_ms"),
    ("P99 E2E Latency (ms)", "p99_e2el_ms"),
    ("Mean TTFT (ms)", "mean_ttft_ms"),
    ("P99 TTFT (ms)", "p99_ttft_ms"),
    ("Mean TPOT (ms)", "mean_tpot_ms"),
    ("P99 TPOT (ms)", "p99_tpot_ms"),
];

/// Short headers for the terminal, same order as `METRIC_COLUMNS`.
const TERMINAL_HEADERS: &[&str] = &[
    "req/s",
    "out tok/s",
    "E2E mean",
    "E2E p99",
    "TTFT mean",
    "TTFT p99",
    "TPOT mean",
    "TPOT p99",
];

/// The goodput column, added when some point of the table has `request_goodput`.
pub const GOODPUT_COLUMN: (&str, &str, &str) =
    ("Request Goodput (req/s)", "goodput/s", "request_goodput");

/// GPU telemetry columns (`run --telemetry`), each added when some point of the table has it.
pub const GPU_COLUMNS: &[(&str, &str, &str)] = &[
    ("GPU Energy (J/output token)", "J/tok", "joules_per_token"),
    ("Mean Power per GPU (W)", "GPU W", "gpu_mean_power_w"),
    ("Mean GPU Utilization (%)", "GPU util%", "gpu_mean_util_pct"),
    (
        "Cost ($/1M output tokens)",
        "$/Mtok",
        "cost_per_million_output_tokens",
    ),
    ("Output Tokens per $", "tok/$", "output_tokens_per_dollar"),
];

/// Columns added when some point of the table has their figure: (header, short header,
/// summary field). The time to first output token (reasoning models), the prefix cache's
/// achieved (client-side, else the server's) and ideal hit rates and achieved over ideal.
pub const OPTIONAL_COLUMNS: &[(&str, &str, &str)] = &[
    ("Mean TTFOT (ms)", "TTFOT mean", "mean_ttfot_ms"),
    ("P99 TTFOT (ms)", "TTFOT p99", "p99_ttfot_ms"),
    (
        "Prefix Cache Hit Rate",
        "cache hit",
        "prefix_cache_hit_rate",
    ),
    (
        "Server Prefix Cache Hit Rate",
        "srv hit",
        "server_prefix_cache_hit_rate",
    ),
    (
        "Ideal Prefix Cache Hit Rate",
        "ideal hit",
        "ideal_prefix_cache_hit_rate",
    ),
    ("Hit Rate / Ideal", "hit/ideal", "prefix_cache_hit_vs_ideal"),
];

/// The optional columns some of `rows` have a value of. The prefix cache's only when some
/// row measured an achieved rate (every point of the embedded client has an ideal one).
pub fn optional_columns(rows: &[&Row]) -> Vec<(&'static str, &'static str, &'static str)> {
    let has = |field: &str| rows.iter().any(|r| r.metric(field).is_some());
    let cache = has("prefix_cache_hit_rate") || has("server_prefix_cache_hit_rate");
    OPTIONAL_COLUMNS
        .iter()
        .filter(|(_, _, field)| has(field) && (cache || !field.contains("prefix_cache")))
        .copied()
        .collect()
}

/// One table: the points of one run and deployment at one ISL:OSL.
#[derive(Debug, Clone, Serialize)]
pub struct Table {
    /// `ISL:OSL=1000:1000`, followed by the run and deployment when there are several.
    pub title: String,
    pub run: String,
    pub deployment: String,
    pub group: String,
    pub headers: Vec<String>,
    /// Short headers for narrow output.
    pub short_headers: Vec<String>,
    pub rows: Vec<TableRow>,
    /// True when some row has several repetitions: cells show `median ±spread%`.
    pub repeated: bool,
    /// Which window the figures show, when some point trimmed a warm-up or cool-down.
    pub window: Option<String>,
    /// What the goodput column counts (the SLOs), when the table has one.
    pub goodput: Option<String>,
}

/// One row of a table.
#[derive(Debug, Clone, Serialize)]
pub struct TableRow {
    pub point: String,
    pub cells: Vec<String>,
    /// `yes`, `NO` or `-` (not judged).
    pub valid: String,
    pub failed_gates: Vec<String>,
}

/// A point that failed a validity gate or did not complete, for the "invalid points" list.
#[derive(Debug, Clone, Serialize)]
pub struct Flagged {
    pub run: String,
    pub point: String,
    pub group: String,
    pub status: String,
    pub reasons: Vec<String>,
}

/// Every table of some runs: run order, then deployment order, then ISL:OSL ascending.
pub fn build_tables(runs: &[Run]) -> Vec<Table> {
    let many_runs = runs.len() > 1;
    let mut tables = Vec::new();
    for run in runs {
        let mut deployments: Vec<&str> = Vec::new();
        for row in &run.rows {
            if !deployments.contains(&row.deployment.as_str()) {
                deployments.push(&row.deployment);
            }
        }
        for deployment in deployments {
            let rows: Vec<&Row> = run
                .rows
                .iter()
                .filter(|r| r.deployment == deployment)
                .collect();
            let mut groups: Vec<_> = rows.iter().map(|r| r.group.clone()).collect();
            groups.sort();
            groups.dedup();
            for group in groups {
                let mut members: Vec<&Row> =
                    rows.iter().copied().filter(|r| r.group == group).collect();
                members.sort_by(|a, b| {
                    a.concurrency
                        .unwrap_or(f64::MAX)
                        .total_cmp(&b.concurrency.unwrap_or(f64::MAX))
                        .then_with(|| a.id.cmp(&b.id))
                });
                let dep_label = members[0].deployment_label();
                let mut title = format!("ISL:OSL={}", group.label());
                if many_runs {
                    title.push_str(&format!(" · {}", run.label));
                }
                if !dep_label.is_empty() {
                    title.push_str(&format!(" · {dep_label}"));
                }
                tables.push(table(title, run, dep_label, group.label(), &members));
            }
        }
    }
    tables
}

fn table(title: String, run: &Run, deployment: String, group: String, rows: &[&Row]) -> Table {
    let extra = extra_axes(rows);
    let mut headers = vec!["Concurrency".to_string()];
    let mut short_headers = vec!["conc".to_string()];
    headers.extend(extra.iter().cloned());
    short_headers.extend(extra.iter().cloned());
    let goodput = goodput_note(rows.iter().copied());
    let mut columns: Vec<(&str, &str, &str)> = METRIC_COLUMNS
        .iter()
        .zip(TERMINAL_HEADERS)
        .map(|((h, f), short)| (*h, *short, *f))
        .collect();
    if goodput.is_some() {
        columns.push(GOODPUT_COLUMN);
    }
    columns.extend(
        GPU_COLUMNS
            .iter()
            .filter(|c| rows.iter().any(|r| r.metric(c.2).is_some())),
    );
    columns.extend(optional_columns(rows));
    headers.extend(columns.iter().map(|c| c.0.to_string()));
    short_headers.extend(columns.iter().map(|c| c.1.to_string()));
    headers.push("Valid".into());
    short_headers.push("valid".into());
    let repeated = rows.iter().any(|r| r.summaries.len() > 1);
    let window = window_note(rows.iter().copied());
    let rows = rows
        .iter()
        .map(|row| {
            let mut cells = vec![row.concurrency.map_or("-".to_string(), number)];
            let axes = row.load_axes();
            cells.extend(
                extra
                    .iter()
                    .map(|k| axes.get(k).map_or("-".to_string(), value_text)),
            );
            for (_, _, field) in &columns {
                let mut cell = row.metric(field).map_or("-".to_string(), number);
                if let Some(spread) = row.spread(field) {
                    let _ = write!(cell, " ±{:.1}%", spread * 100.0);
                }
                cells.push(cell);
            }
            let valid = validity_cell(row);
            cells.push(valid.clone());
            TableRow {
                point: row.id.clone(),
                cells,
                valid,
                failed_gates: row.failed_gates.clone(),
            }
        })
        .collect();
    Table {
        title,
        run: run.label.clone(),
        deployment,
        group,
        headers,
        short_headers,
        rows,
        repeated,
        window,
        goodput,
    }
}

/// `Request goodput: completed requests per second that met TTFT <= 200 ms, TPOT <= 50 ms
/// (the whole point).` when some row has SLOs; distinct SLO sets joined with ` or `.
pub fn goodput_note<'a>(rows: impl IntoIterator<Item = &'a Row>) -> Option<String> {
    let mut sets: Vec<String> = Vec::new();
    for row in rows {
        for s in &row.summaries {
            if s.metric("request_goodput").is_none() {
                continue;
            }
            let text = goodput_slos(s).map_or_else(
                || "the SLOs of the point".to_string(),
                |slos| crate::load::describe_slos(&slos),
            );
            if !sets.contains(&text) {
                sets.push(text);
            }
        }
    }
    (!sets.is_empty()).then(|| {
        format!(
            "Request goodput: completed requests per second that met {} (the whole point).",
            sets.join(" or ")
        )
    })
}

/// The SLOs a summary's goodput was counted against (`goodput.slos`).
pub fn goodput_slos(s: &crate::archive::PointSummary) -> Option<Vec<crate::load::Slo>> {
    let slos = s.other.get("goodput")?.get("slos")?;
    serde_json::from_value(slos.clone()).ok()
}

/// Load axes other than concurrency that vary among `rows`: the tables' leading columns.
pub fn extra_axes(rows: &[&Row]) -> Vec<String> {
    let mut extra: Vec<String> = Vec::new();
    for row in rows {
        for key in row.load_axes().keys() {
            if key != "concurrency" && key != "max_concurrency" && !extra.contains(key) {
                extra.push(key.clone());
            }
        }
    }
    extra
}

/// `Output token throughput and latencies: trimmed window (warm-up 30 s, cool-down 10 s);
/// request throughput: the whole point.` when some row trimmed a window.
pub fn window_note<'a>(rows: impl IntoIterator<Item = &'a Row>) -> Option<String> {
    crate::archive::trimmed_windows(rows).map(|windows| {
        format!(
            "Output token throughput and latencies: {windows}; request throughput: the whole point."
        )
    })
}

fn validity_cell(row: &Row) -> String {
    match (row.status, row.valid) {
        (_, Some(false)) => "NO".into(),
        (crate::archive::PointStatus::Completed, Some(true)) => "yes".into(),
        (crate::archive::PointStatus::Completed, None) => "-".into(),
        (status, _) => format!("NO ({})", status_text(status)),
    }
}

fn status_text(status: crate::archive::PointStatus) -> String {
    status.to_string()
}

/// Points that did not complete or failed a validity gate.
pub fn flagged_points(runs: &[Run]) -> Vec<Flagged> {
    let mut out = Vec::new();
    for run in runs {
        for row in &run.rows {
            let completed = row.status == crate::archive::PointStatus::Completed;
            if completed && row.valid != Some(false) {
                continue;
            }
            let mut reasons = row.failed_gates.clone();
            if let Some(error) = &row.error {
                reasons.push(error.clone());
            }
            out.push(Flagged {
                run: run.label.clone(),
                point: if row.deployment_label().is_empty() {
                    row.id.clone()
                } else {
                    format!("{} ({})", row.id, row.deployment_label())
                },
                group: row.group.label(),
                status: status_text(row.status),
                reasons,
            });
        }
    }
    out
}

/// GitHub markdown: `### title` then the table, columns centred like the seed's.
pub fn render_markdown(table: &Table) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "| {} |", table.headers.join(" | "));
    let _ = writeln!(
        out,
        "|{}|",
        table
            .headers
            .iter()
            .map(|_| ":---:")
            .collect::<Vec<_>>()
            .join("|")
    );
    for row in &table.rows {
        let _ = writeln!(out, "| {} |", row.cells.join(" | "));
    }
    if let Some(window) = &table.window {
        let _ = write!(out, "\n_{window}_\n");
    }
    if let Some(goodput) = &table.goodput {
        let _ = write!(out, "\n_{goodput}_\n");
    }
    out
}

/// A markdown table of plain cells, every column centred.
pub fn markdown_grid(headers: &[String], rows: &[Vec<String>]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "| {} |", headers.join(" | "));
    let _ = writeln!(
        out,
        "|{}|",
        headers
            .iter()
            .map(|_| ":---:")
            .collect::<Vec<_>>()
            .join("|")
    );
    for row in rows {
        let _ = writeln!(out, "| {} |", row.join(" | "));
    }
    out
}

/// Aligned plain text for a terminal: title line, header, one line per point.
pub fn render_terminal(tables: &[Table]) -> String {
    let mut out = String::new();
    for (i, table) in tables.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let _ = writeln!(out, "{}", table.title);
        let mut widths: Vec<usize> = table.short_headers.iter().map(|h| h.len()).collect();
        for row in &table.rows {
            for (w, cell) in widths.iter_mut().zip(&row.cells) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |cells: &[String]| {
            cells
                .iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c:>w$}"))
                .collect::<Vec<_>>()
                .join("  ")
        };
        let _ = writeln!(out, "{}", line(&table.short_headers));
        for row in &table.rows {
            let _ = writeln!(out, "{}", line(&row.cells));
        }
        if let Some(window) = &table.window {
            let _ = writeln!(out, "{window}");
        }
        if let Some(goodput) = &table.goodput {
            let _ = writeln!(out, "{goodput}");
        }
    }
    if !tables.is_empty() {
        out.push_str("(latencies in ms; throughput in requests or output tokens per second)\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_like_the_seed_tables() {
        assert_eq!(number(1.0), "1");
        assert_eq!(number(42.30), "42.3");
        assert_eq!(number(7922.634), "7922.63");
        assert_eq!(number(0.0), "0");
        assert_eq!(number(f64::NAN), "-");
    }
}
