//! summary.csv: one row per point with a summary, its axes and the main metrics.

/// Columns of summary.csv taken from each point's summary, in order.
pub const CSV_METRICS: &[&str] = &[
    "completed",
    "failed",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "mean_ttft_ms",
    "median_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "mean_itl_ms",
    "median_itl_ms",
    "p99_itl_ms",
    "mean_e2el_ms",
    "median_e2el_ms",
    "p99_e2el_ms",
    "request_goodput",
    // GPU telemetry (`run --telemetry`); empty without it.
    "joules_per_token",
    "gpu_mean_power_w",
    "cost_per_million_output_tokens",
    "output_tokens_per_dollar",
    "mean_ttfot_ms",
    "p99_ttfot_ms",
    "prefix_cache_hit_rate",
    "server_prefix_cache_hit_rate",
    "ideal_prefix_cache_hit_rate",
    "prefix_cache_hit_vs_ideal",
];

pub(super) fn summary_csv(rows: &[serde_json::Value]) -> String {
    let mut axes: Vec<String> = Vec::new();
    for row in rows {
        if let Some(map) = row["axes"].as_object() {
            for key in map.keys() {
                if !axes.contains(key) {
                    axes.push(key.clone());
                }
            }
        }
    }
    let mut out = String::new();
    let mut header = vec![
        "point".to_string(),
        "deployment".into(),
        "repetition".into(),
        "status".into(),
        "valid".into(),
    ];
    header.extend(axes.iter().cloned());
    header.extend(CSV_METRICS.iter().map(|s| s.to_string()));
    out.push_str(&header.join(","));
    out.push('\n');
    for row in rows {
        let mut cells = vec![
            csv_cell(&row["point"]),
            csv_cell(&row["deployment"]),
            csv_cell(&row["repetition"]),
            csv_cell(&row["status"]),
            csv_cell(&row["validity"]["valid"]),
        ];
        cells.extend(axes.iter().map(|a| csv_cell(&row["axes"][a])));
        cells.extend(CSV_METRICS.iter().map(|m| csv_cell(&row["summary"][m])));
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    out
}

fn csv_cell(value: &serde_json::Value) -> String {
    let text = match value {
        serde_json::Value::Null => String::new(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if text.contains([',', '"', '\n']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text
    }
}
