//! GPU power over time (`run --telemetry`): one chart per measured point that has GPU
//! samples (`points/<point>/gpu_samples.jsonl`, its first repetition), one curve per GPU
//! (`<host>/<index> <role>`), power (W) against the run's clock (s, 0 = the load's start),
//! with the measured window given in the title. Reads only those files of the archive;
//! drawing is `svg`.

use std::collections::BTreeMap;

use serde_json::Value;

use super::charts::RenderedChart;
use super::data::{Run, first_repetitions, point_chart_file};
use super::svg::{self, Axis, Chart, Point, Scale, Series};

/// The power charts of these runs, in run and point order.
pub fn power_charts(runs: &[Run]) -> Vec<RenderedChart> {
    let mut out = Vec::new();
    for run in runs {
        for (n, point, dir) in first_repetitions(run) {
            let Ok(text) = std::fs::read_to_string(dir.join("gpu_samples.jsonl")) else {
                continue;
            };
            let series = series(&text);
            if series.is_empty() {
                continue;
            }
            let window = summary_window(&dir);
            let mut title = format!("GPU power over time, {} {}", run.label, point.id);
            if let Some((t0, t1)) = window {
                title.push_str(&format!(" (measured {t0:.1}..{t1:.1} s)"));
            }
            let chart = Chart {
                title: title.clone(),
                x: Axis {
                    label: "Time since the load started (s)".into(),
                    scale: Scale::Linear,
                },
                y: Axis {
                    label: "GPU power (W)".into(),
                    scale: Scale::Linear,
                },
                series,
                bands: Vec::new(),
            };
            out.push(RenderedChart {
                svg: svg::render(&chart),
                title,
                file: point_chart_file("gpu-power", run, point, n),
            });
        }
    }
    out
}

/// One curve per GPU from gpu_samples.jsonl's lines (a line that does not read is skipped).
fn series(text: &str) -> Vec<Series> {
    let mut by_gpu: BTreeMap<String, Vec<Point>> = BTreeMap::new();
    for line in text.lines() {
        let Ok(s) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let (Some(t), Some(w)) = (s["t"].as_f64(), s["power_w"].as_f64()) else {
            continue;
        };
        let gpu = format!(
            "{}/{} {}",
            s["host"].as_str().unwrap_or("?"),
            s["index"]
                .as_u64()
                .map_or("?".to_string(), |i| i.to_string()),
            s["role"].as_str().unwrap_or("")
        );
        by_gpu
            .entry(gpu.trim().to_string())
            .or_default()
            .push(Point {
                x: t,
                y: w,
                valid: true,
                label: format!("{t:.1} s"),
            });
    }
    by_gpu
        .into_iter()
        .enumerate()
        .map(|(style, (name, mut points))| {
            points.sort_by(|a, b| a.x.total_cmp(&b.x));
            Series {
                name,
                style,
                points,
            }
        })
        .collect()
}

/// The measured window the point's summary.json gives (`telemetry.window_*_s`).
fn summary_window(dir: &std::path::Path) -> Option<(f64, f64)> {
    let text = std::fs::read_to_string(dir.join("summary.json")).ok()?;
    let v: Value = serde_json::from_str(&text).ok()?;
    let t = &v["telemetry"];
    Some((t["window_start_s"].as_f64()?, t["window_end_s"].as_f64()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_curve_per_gpu_in_time_order_and_bad_lines_skipped() {
        let text = [
            r#"{"t": 1.0, "host": "h1", "index": 0, "role": "decode", "power_w": 300.0}"#,
            r#"{"t": 0.5, "host": "h1", "index": 0, "role": "decode", "power_w": 200.0}"#,
            r#"{"t": 0.5, "host": "h2", "index": 1, "role": "prefill", "power_w": 100.0}"#,
            r#"{"t": 0.7, "host": "h2", "index": 1, "role": "prefill", "power_w": null}"#,
            "not json",
        ]
        .join("\n");
        let s = series(&text);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].name, "h1/0 decode");
        let xy: Vec<(f64, f64)> = s[0].points.iter().map(|p| (p.x, p.y)).collect();
        assert_eq!(xy, vec![(0.5, 200.0), (1.0, 300.0)]);
        assert_eq!(s[1].name, "h2/1 prefill");
        assert_eq!(s[1].points.len(), 1);
        assert_ne!(s[0].style, s[1].style);
    }
}
