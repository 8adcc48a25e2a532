//! Each point over time (`points/<point>/timeseries.json`, its first repetition): one figure
//! per point of panels stacked on one time axis (seconds since the load started), with the
//! warm-up, the measured window and the cool-down shaded in each. The client's panels: requests
//! (in flight, scheduled, sent, completed and failed per second), output tokens per second,
//! TTFT and ITL p50/p99; the servers' panels: running and waiting requests, KV-cache usage and
//! prefix-cache hit rate, one curve per scraped server (`entry`, then each instance). A panel
//! with nothing to draw is left out. Reads only those files of the archive; drawing is `svg`.

use super::charts::RenderedChart;
use super::data::{Run, first_repetitions, point_chart_file};
use super::svg::{self, Axis, Band, Chart, Point, Scale, Series};
use crate::metrics::{ClientBin, ServerSample, TimeSeries};

/// The time-series figures of these runs, in run and point order.
pub fn timeseries_charts(runs: &[Run]) -> Vec<RenderedChart> {
    let mut out = Vec::new();
    for run in runs {
        for (n, point, dir) in first_repetitions(run) {
            let Some(series) = crate::archive::read_timeseries(&dir) else {
                continue;
            };
            let panels = panels(&series);
            if panels.is_empty() {
                continue;
            }
            let title = format!("{} {} over time", run.label, point.id);
            out.push(RenderedChart {
                svg: svg::stack(&title, &panels),
                title,
                file: point_chart_file("timeseries", run, point, n),
            });
        }
    }
    out
}

/// A curve of `name` from `(x, y)` pairs (`None` values are left out).
fn curve(name: &str, style: usize, points: impl Iterator<Item = (f64, Option<f64>)>) -> Series {
    Series {
        name: name.to_string(),
        style,
        points: points
            .filter_map(|(x, y)| {
                y.filter(|y| y.is_finite()).map(|y| Point {
                    x,
                    y,
                    valid: true,
                    label: format!("{x:.1} s"),
                })
            })
            .collect(),
    }
}

/// The bands every panel shares: warm-up, measured, cool-down (each when not empty), the
/// last reaching the latest time drawn so every panel has the same time axis.
fn bands(ts: &TimeSeries, t_max: f64) -> Vec<Band> {
    let (from, to) = (ts.window.from_s, ts.window.to_s);
    let mut out = Vec::new();
    let mut band = |from: f64, to: f64, label: &str, fill: &'static str| {
        if to > from {
            out.push(Band {
                from,
                to,
                label: label.to_string(),
                fill,
            });
        }
    };
    band(0.0, from, "warm-up", "#ececec");
    band(from, to, "measured", "#e3eef9");
    let tail = if to < ts.run_end_s { "cool-down" } else { "" };
    band(to, t_max.max(to), tail, "#ececec");
    out
}

/// The panels of one point, on one time axis.
fn panels(ts: &TimeSeries) -> Vec<Chart> {
    let half = ts.interval_s / 2.0;
    // A bin is drawn at its middle (the last one at the middle of its covered part).
    let mid = |b: &ClientBin| (b.t_s + half).min((b.t_s + ts.run_end_s) / 2.0).max(b.t_s);
    let last_scrape = ts
        .servers
        .iter()
        .flat_map(|s| s.samples.last().map(|x| x.t_s))
        .fold(0.0, f64::max);
    let t_max = ts.run_end_s.max(last_scrape);
    let bands = bands(ts, t_max);
    let panel = |label: &str, unit: &str, series: Vec<Series>| -> Option<Chart> {
        let series: Vec<Series> = series
            .into_iter()
            .filter(|s| !s.points.is_empty())
            .collect();
        (!series.is_empty()).then(|| Chart {
            title: label.to_string(),
            x: Axis {
                label: "Time since the load started (s)".into(),
                scale: Scale::Linear,
            },
            y: Axis {
                label: unit.to_string(),
                scale: Scale::Linear,
            },
            series,
            bands: bands.clone(),
        })
    };
    let client = |name: &str, style: usize, f: fn(&ClientBin) -> Option<f64>| {
        curve(name, style, ts.client.iter().map(|b| (mid(b), f(b))))
    };
    let any_failed = ts.client.iter().any(|b| b.failed_per_s > 0.0);
    let mut requests = vec![
        client("in flight", 0, |b| Some(b.in_flight)),
        client("scheduled/s", 1, |b| Some(b.scheduled_per_s)),
        client("sent/s", 2, |b| Some(b.sent_per_s)),
        client("completed/s", 3, |b| Some(b.completed_per_s)),
    ];
    if any_failed {
        requests.push(client("failed/s", 4, |b| Some(b.failed_per_s)));
    }
    let server = |what: &str, style: usize, f: fn(&ServerSample) -> Option<f64>| {
        ts.servers
            .iter()
            .enumerate()
            .map(|(i, s)| {
                curve(
                    &format!("{} {what}", s.source),
                    style + 2 * i,
                    s.samples.iter().map(|x| (x.t_s, f(x))),
                )
            })
            .collect::<Vec<_>>()
    };
    let mut queue = server("running", 0, |x| x.running);
    queue.extend(server("waiting", 1, |x| x.waiting));
    let mut cache = server("KV cache", 0, |x| x.kv_cache_usage.map(|v| v * 100.0));
    cache.extend(server("prefix hits", 1, |x| {
        x.prefix_cache_hit_rate.map(|v| v * 100.0)
    }));
    [
        panel(
            "Client: requests",
            "Requests (in flight; per second)",
            requests,
        ),
        panel(
            "Client: output tokens",
            "Output tokens per second",
            vec![client("output tok/s", 0, |b| Some(b.output_tokens_per_s))],
        ),
        panel(
            "Client: latency",
            "Latency (ms)",
            vec![
                client("TTFT p50", 0, |b| b.ttft_p50_ms),
                client("TTFT p99", 1, |b| b.ttft_p99_ms),
                client("ITL p50", 2, |b| b.itl_p50_ms),
                client("ITL p99", 3, |b| b.itl_p99_ms),
            ],
        ),
        panel("Server: requests", "Requests", queue),
        panel("Server: caches", "KV-cache usage, prefix hits (%)", cache),
    ]
    .into_iter()
    .flatten()
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{ServerSeries, Span};

    fn bin(t_s: f64, in_flight: f64) -> ClientBin {
        ClientBin {
            t_s,
            in_flight,
            scheduled_per_s: 4.0,
            sent_per_s: 4.0,
            completed_per_s: 4.0,
            failed_per_s: 0.0,
            output_tokens_per_s: 100.0,
            ttft_p50_ms: Some(20.0),
            ttft_p99_ms: Some(40.0),
            itl_p50_ms: None,
            itl_p99_ms: None,
        }
    }

    fn series(servers: Vec<ServerSeries>) -> TimeSeries {
        TimeSeries {
            interval_s: 1.0,
            window: Span {
                from_s: 1.0,
                to_s: 3.0,
            },
            run_end_s: 4.0,
            client: (0..4).map(|i| bin(f64::from(i), 2.0)).collect(),
            servers,
        }
    }

    #[test]
    fn client_and_server_panels_share_the_bands_and_the_time_axis() {
        let sample = |t_s: f64, running: f64| ServerSample {
            t_s,
            running: Some(running),
            waiting: Some(0.0),
            kv_cache_usage: Some(0.5),
            prefix_cache_hit_rate: None,
        };
        let ts = series(vec![ServerSeries {
            source: "entry".into(),
            url: "http://127.0.0.1:8000".into(),
            samples: vec![sample(0.0, 0.0), sample(2.0, 2.0), sample(4.2, 0.0)],
        }]);
        let p = panels(&ts);
        let titles: Vec<&str> = p.iter().map(|c| c.title.as_str()).collect();
        assert_eq!(
            titles,
            [
                "Client: requests",
                "Client: output tokens",
                "Client: latency",
                "Server: requests",
                "Server: caches"
            ]
        );
        for c in &p {
            let labels: Vec<(&str, f64, f64)> = c
                .bands
                .iter()
                .map(|b| (b.label.as_str(), b.from, b.to))
                .collect();
            // The last band reaches the last scrape (4.2 s), past the run's end.
            assert_eq!(
                labels,
                [
                    ("warm-up", 0.0, 1.0),
                    ("measured", 1.0, 3.0),
                    ("cool-down", 3.0, 4.2)
                ]
            );
        }
        // Bins at their middles; no failures, no failed curve; ITL absent, not zero.
        let requests = &p[0].series;
        assert_eq!(requests.len(), 4);
        assert_eq!(requests[0].points[0].x, 0.5);
        assert_eq!(p[2].series.len(), 2);
        // The server's curves: entry running and waiting; KV cache in percent.
        assert_eq!(p[3].series[0].name, "entry running");
        assert_eq!(p[4].series[0].points[0].y, 50.0);
        let svg = svg::stack("x", &p);
        assert!(svg.contains(">measured<") && svg.contains(">cool-down<"));
    }

    #[test]
    fn a_point_without_server_gauges_draws_the_client_only() {
        let p = panels(&series(Vec::new()));
        assert_eq!(p.len(), 3);
        assert!(p.iter().all(|c| c.title.starts_with("Client")));
    }
}
