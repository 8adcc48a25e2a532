//! Deployments side by side: for a run with several deployments (split by a deployment axis
//! such as `image`, or named `deployments:` picked by a `deployment` axis), one table per
//! ISL:OSL in the shape of the Dynamo-vs-vLLM seed: one row per load point (concurrency and
//! other load axes), and for each metric one column per deployment. Owns building these
//! tables; rendering is `table::render_markdown` and the templates.

use super::data::{Row, Run, value_text};
use super::table::{
    GOODPUT_COLUMN, METRIC_COLUMNS, Table, TableRow, extra_axes, goodput_note, number,
    optional_columns,
};

/// The name of a row's deployment in headers: the value of a lone `deployment` axis, else
/// the deployment's axes (`image=x,tp=8`), else its id.
fn deployment_name(row: &Row) -> String {
    if row.deployment_axes.len() == 1
        && let Some(v) = row.deployment_axes.get("deployment")
    {
        return value_text(v);
    }
    let label = row.deployment_label();
    if label.is_empty() {
        row.deployment.clone()
    } else {
        label
    }
}

/// The deployments of a run in first-seen order: (id, name).
fn deployments(run: &Run) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for row in &run.rows {
        if !out.iter().any(|(id, _)| *id == row.deployment) {
            out.push((row.deployment.clone(), deployment_name(row)));
        }
    }
    out
}

/// A load point of a group: its load axes as a key, the concurrency for sorting, and the
/// row of each deployment (in deployment order).
struct Line<'a> {
    key: String,
    concurrency: Option<f64>,
    rows: Vec<Option<&'a Row>>,
}

/// The side-by-side tables of some runs: for every run with two or more deployments, one
/// table per ISL:OSL group, groups ascending. Runs with one deployment have none.
pub fn side_by_side_tables(runs: &[Run]) -> Vec<Table> {
    let many_runs = runs.len() > 1;
    let mut out = Vec::new();
    for run in runs {
        let deps = deployments(run);
        if deps.len() < 2 {
            continue;
        }
        let mut groups: Vec<_> = run.rows.iter().map(|r| r.group.clone()).collect();
        groups.sort();
        groups.dedup();
        for group in groups {
            let rows: Vec<&Row> = run.rows.iter().filter(|r| r.group == group).collect();
            let mut title = format!("ISL:OSL={} · deployments side by side", group.label());
            if many_runs {
                title.push_str(&format!(" · {}", run.label));
            }
            out.push(table(title, run, &deps, group.label(), &rows));
        }
    }
    out
}

fn lines<'a>(deps: &[(String, String)], rows: &[&'a Row]) -> Vec<Line<'a>> {
    let mut lines: Vec<Line<'a>> = Vec::new();
    for row in rows {
        let key = super::data::axes_label(&row.load_axes());
        let key = if key.is_empty() { row.id.clone() } else { key };
        let slot = deps
            .iter()
            .position(|(id, _)| *id == row.deployment)
            .expect("the run's deployments include every row's");
        let line = match lines.iter_mut().position(|l| l.key == key) {
            Some(i) => &mut lines[i],
            None => {
                lines.push(Line {
                    key,
                    concurrency: row.concurrency,
                    rows: vec![None; deps.len()],
                });
                lines.last_mut().expect("pushed")
            }
        };
        line.rows[slot] = Some(row);
    }
    lines.sort_by(|a, b| {
        a.concurrency
            .unwrap_or(f64::MAX)
            .total_cmp(&b.concurrency.unwrap_or(f64::MAX))
            .then_with(|| a.key.cmp(&b.key))
    });
    lines
}

fn table(
    title: String,
    run: &Run,
    deps: &[(String, String)],
    group: String,
    rows: &[&Row],
) -> Table {
    let goodput = goodput_note(rows.iter().copied());
    let mut columns: Vec<(&str, &str)> = METRIC_COLUMNS.to_vec();
    if goodput.is_some() {
        columns.push((GOODPUT_COLUMN.0, GOODPUT_COLUMN.2));
    }
    columns.extend(optional_columns(rows).into_iter().map(|(h, _, f)| (h, f)));
    let mut headers = vec!["Concurrency".to_string()];
    let mut short_headers = vec!["conc".to_string()];
    let extra = extra_axes(rows);
    headers.extend(extra.iter().cloned());
    short_headers.extend(extra.iter().cloned());
    for (header, _) in &columns {
        for (_, name) in deps {
            headers.push(format!("{header} · {name}"));
            short_headers.push(format!("{header} · {name}"));
        }
    }
    headers.push("Valid".into());
    short_headers.push("valid".into());
    let lines = lines(deps, rows);
    let table_rows = lines
        .iter()
        .map(|line| table_row(line, deps, &extra, &columns))
        .collect();
    Table {
        title,
        run: run.label.clone(),
        deployment: deps
            .iter()
            .map(|(_, n)| n.as_str())
            .collect::<Vec<_>>()
            .join(" vs "),
        group,
        headers,
        short_headers,
        rows: table_rows,
        repeated: rows.iter().any(|r| r.summaries.len() > 1),
        window: super::table::window_note(rows.iter().copied()),
        goodput,
    }
}

fn table_row(
    line: &Line<'_>,
    deps: &[(String, String)],
    extra: &[String],
    columns: &[(&str, &str)],
) -> TableRow {
    let first = line.rows.iter().flatten().next().expect("a line has a row");
    let mut cells = vec![line.concurrency.map_or("-".to_string(), number)];
    let axes = first.load_axes();
    cells.extend(
        extra
            .iter()
            .map(|k| axes.get(k).map_or("-".to_string(), value_text)),
    );
    for (_, field) in columns {
        for row in &line.rows {
            cells.push(match row {
                None => "absent".into(),
                Some(r) => r
                    .metric(field)
                    .map_or("-".to_string(), |v| match r.spread(field) {
                        Some(spread) => format!("{} ±{:.1}%", number(v), spread * 100.0),
                        None => number(v),
                    }),
            });
        }
    }
    let mut failed_gates = Vec::new();
    let mut not_valid: Vec<&str> = Vec::new();
    let mut judged = false;
    for (row, (_, name)) in line.rows.iter().zip(deps) {
        let Some(r) = row else { continue };
        let completed = r.status == crate::archive::PointStatus::Completed;
        judged |= r.valid.is_some() || !completed;
        if !completed || r.valid == Some(false) {
            not_valid.push(name);
            failed_gates.extend(r.failed_gates.iter().map(|g| format!("{name}: {g}")));
        }
    }
    let valid = if !not_valid.is_empty() {
        format!("NO ({})", not_valid.join(", "))
    } else if judged {
        "yes".into()
    } else {
        "-".into()
    };
    cells.push(valid.clone());
    TableRow {
        point: line.key.clone(),
        cells,
        valid,
        failed_gates,
    }
}
