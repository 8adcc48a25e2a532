//! Hand-written SVG line charts: labelled axes with units, one curve per series, a legend,
//! and styles that stay readable without colour (each series has its own marker shape and
//! dash pattern as well as a colour-blind-safe colour). Points that failed validity are
//! drawn hollow and listed under the plot; a curve of many points (a time series) is drawn as
//! a line without markers. Shaded bands mark spans of the x axis (a point's warm-up, measured
//! window and cool-down), and panels can be stacked on one x axis. Owns drawing only; which
//! charts exist and what they plot is `charts`.

pub use super::scale::Scale;
use super::scale::{Range, tick_text};
use std::fmt::Write as _;

/// A chart to draw.
#[derive(Debug, Clone)]
pub struct Chart {
    pub title: String,
    pub x: Axis,
    pub y: Axis,
    pub series: Vec<Series>,
    /// Spans of the x axis shaded behind the curves (their edges count in the x range).
    pub bands: Vec<Band>,
}

/// A shaded span of the x axis, labelled at its top.
#[derive(Debug, Clone)]
pub struct Band {
    pub from: f64,
    pub to: f64,
    pub label: String,
    /// A fill colour, e.g. `#f0f0f0`.
    pub fill: &'static str,
}

/// One axis: its label (with the unit) and scale.
#[derive(Debug, Clone)]
pub struct Axis {
    pub label: String,
    pub scale: Scale,
}

/// One curve.
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    /// Index of the colour/marker/dash style, so a run keeps its look across charts.
    pub style: usize,
    pub points: Vec<Point>,
}

/// One point of a curve.
#[derive(Debug, Clone)]
pub struct Point {
    pub x: f64,
    pub y: f64,
    /// False draws a hollow marker and lists the point under the plot.
    pub valid: bool,
    /// Shown in the point's tooltip and in the invalid list, e.g. `concurrency=64`.
    pub label: String,
}

/// Okabe-Ito colours (distinguishable with the common colour-vision deficiencies).
const COLOURS: &[&str] = &[
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#8C6D1F",
];
const DASHES: &[&str] = &["", "8 4", "2 4", "10 4 2 4", "14 5", "4 2 4 2 10 2"];
const MARKERS: &[Marker] = &[
    Marker::Circle,
    Marker::Square,
    Marker::Triangle,
    Marker::Diamond,
    Marker::Cross,
    Marker::TriangleDown,
];

#[derive(Debug, Clone, Copy)]
enum Marker {
    Circle,
    Square,
    Triangle,
    Diamond,
    Cross,
    TriangleDown,
}

const WIDTH: f64 = 760.0;
const PLOT_LEFT: f64 = 80.0;
const PLOT_RIGHT: f64 = 560.0;
const PLOT_TOP: f64 = 48.0;
const PLOT_BOTTOM: f64 = 348.0;
/// A curve with more points than this is drawn without markers (but its invalid points).
const MARKERS_UP_TO: usize = 60;

/// The chart as a standalone SVG document (also inlined as-is into report.html).
pub fn render(chart: &Chart) -> String {
    render_sized(chart).0
}

/// Panels stacked top to bottom under one title, as one SVG document (each panel keeps its
/// own axes; give them the same bands or x values to share the x range).
pub fn stack(title: &str, panels: &[Chart]) -> String {
    let mut body = String::new();
    let mut y = 36.0;
    for panel in panels {
        let (svg, height) = render_sized(panel);
        let _ = write!(
            body,
            "{}",
            svg.replacen("<svg ", &format!(r#"<svg y="{y}" "#), 1)
        );
        y += height;
    }
    let mut out = open(y, title, (WIDTH / 2.0, 16));
    out.push_str(&body);
    out.push_str("</svg>\n");
    out
}

/// An SVG document's opening: the root element `height` high, its title (drawn bold at the
/// top, centred on `x`, in `size` px), a white background.
fn open(height: f64, title: &str, (x, size): (f64, u32)) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" role="img" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, "<title>{}</title>", esc(title));
    let _ = writeln!(
        out,
        r##"<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#ffffff"/>"##
    );
    let _ = writeln!(
        out,
        r#"<text x="{x}" y="24" font-size="{size}" font-weight="bold" text-anchor="middle">{}</text>"#,
        esc(title)
    );
    out
}

/// The chart and its height.
fn render_sized(chart: &Chart) -> (String, f64) {
    let xs: Vec<f64> = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.x))
        .chain(chart.bands.iter().flat_map(|b| [b.from, b.to]))
        .collect();
    let ys: Vec<f64> = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.y))
        .collect();
    let xr = Range::new(&xs, chart.x.scale);
    let yr = Range::new(&ys, chart.y.scale);
    let invalid: Vec<String> = chart
        .series
        .iter()
        .flat_map(|s| {
            s.points
                .iter()
                .filter(|p| !p.valid)
                .map(move |p| format!("{}: {}", s.name, p.label))
        })
        .collect();
    let height = PLOT_BOTTOM + 70.0 + 16.0 * invalid.len() as f64;
    let mut out = open(height, &chart.title, ((PLOT_LEFT + PLOT_RIGHT) / 2.0, 15));
    bands(&mut out, &chart.bands, &xr);
    axes(&mut out, chart, &xr, &yr);
    for (i, series) in chart.series.iter().enumerate() {
        curve(&mut out, chart, series, &xr, &yr);
        legend_entry(&mut out, i, series);
    }
    invalid_list(&mut out, &invalid);
    out.push_str("</svg>\n");
    (out, height)
}

/// The shaded bands, each labelled inside the plot's top edge.
fn bands(out: &mut String, bands: &[Band], xr: &Range) {
    for b in bands {
        let x0 = xr.map(b.from, PLOT_LEFT, PLOT_RIGHT);
        let x1 = xr.map(b.to, PLOT_LEFT, PLOT_RIGHT);
        if x1 <= x0 {
            continue;
        }
        let _ = writeln!(
            out,
            r##"<g class="band"><rect x="{x0:.1}" y="{PLOT_TOP}" width="{:.1}" height="{}" fill="{}"/><text x="{:.1}" y="{}" text-anchor="middle" fill="#555555" font-size="11">{}</text></g>"##,
            x1 - x0,
            PLOT_BOTTOM - PLOT_TOP,
            b.fill,
            (x0 + x1) / 2.0,
            PLOT_TOP + 13.0,
            esc(&b.label)
        );
    }
}

/// Grid, ticks and tick labels, the plot frame and the axis labels.
fn axes(out: &mut String, chart: &Chart, xr: &Range, yr: &Range) {
    for t in xr.ticks() {
        let x = xr.map(t, PLOT_LEFT, PLOT_RIGHT);
        let _ = writeln!(
            out,
            r##"<line x1="{x:.1}" y1="{PLOT_TOP}" x2="{x:.1}" y2="{PLOT_BOTTOM}" stroke="#e4e4e4"/><text x="{x:.1}" y="{}" text-anchor="middle">{}</text>"##,
            PLOT_BOTTOM + 16.0,
            tick_text(t)
        );
    }
    for t in yr.ticks() {
        let y = yr.map(t, PLOT_BOTTOM, PLOT_TOP);
        let _ = writeln!(
            out,
            r##"<line x1="{PLOT_LEFT}" y1="{y:.1}" x2="{PLOT_RIGHT}" y2="{y:.1}" stroke="#e4e4e4"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            PLOT_LEFT - 6.0,
            y + 4.0,
            tick_text(t)
        );
    }
    let _ = writeln!(
        out,
        r##"<rect x="{PLOT_LEFT}" y="{PLOT_TOP}" width="{}" height="{}" fill="none" stroke="#555555"/>"##,
        PLOT_RIGHT - PLOT_LEFT,
        PLOT_BOTTOM - PLOT_TOP
    );
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        (PLOT_LEFT + PLOT_RIGHT) / 2.0,
        PLOT_BOTTOM + 38.0,
        esc(&chart.x.label)
    );
    let _ = writeln!(
        out,
        r#"<text transform="translate(22 {}) rotate(-90)" text-anchor="middle">{}</text>"#,
        (PLOT_TOP + PLOT_BOTTOM) / 2.0,
        esc(&chart.y.label)
    );
}

/// A series' colour, dash attribute (empty for a solid line) and marker.
fn style(series: &Series) -> (&'static str, String, Marker) {
    let dash = DASHES[series.style % DASHES.len()];
    let dash_attr = if dash.is_empty() {
        String::new()
    } else {
        format!(r#" stroke-dasharray="{dash}""#)
    };
    (
        COLOURS[series.style % COLOURS.len()],
        dash_attr,
        MARKERS[series.style % MARKERS.len()],
    )
}

/// One series: its line and a marker per point (hollow when invalid) with a tooltip.
fn curve(out: &mut String, chart: &Chart, series: &Series, xr: &Range, yr: &Range) {
    let (colour, dash_attr, marker) = style(series);
    let _ = writeln!(
        out,
        r#"<g class="series" data-series="{}">"#,
        esc(&series.name)
    );
    let path: Vec<String> = series
        .points
        .iter()
        .map(|p| {
            format!(
                "{:.1},{:.1}",
                xr.map(p.x, PLOT_LEFT, PLOT_RIGHT),
                yr.map(p.y, PLOT_BOTTOM, PLOT_TOP)
            )
        })
        .collect();
    if path.len() > 1 {
        let _ = writeln!(
            out,
            r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"{dash_attr}/>"#,
            path.join(" ")
        );
    }
    let dense = series.points.len() > MARKERS_UP_TO;
    for p in series.points.iter().filter(|p| !dense || !p.valid) {
        let x = xr.map(p.x, PLOT_LEFT, PLOT_RIGHT);
        let y = yr.map(p.y, PLOT_BOTTOM, PLOT_TOP);
        let fill = if p.valid { colour } else { "#ffffff" };
        let tip = format!(
            "{} {}: {} = {}, {} = {}{}",
            series.name,
            p.label,
            chart.x.label,
            tick_text(p.x),
            chart.y.label,
            tick_text(p.y),
            if p.valid { "" } else { " (INVALID)" }
        );
        let _ = writeln!(
            out,
            "{}",
            marker_svg(marker, x, y, colour, fill, &esc(&tip), !p.valid)
        );
    }
    let _ = writeln!(out, "</g>");
}

/// The `i`th legend entry, right of the plot.
fn legend_entry(out: &mut String, i: usize, series: &Series) {
    let (colour, dash_attr, marker) = style(series);
    let ly = PLOT_TOP + 10.0 + 22.0 * i as f64;
    let lx = PLOT_RIGHT + 16.0;
    let _ = writeln!(
        out,
        r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{colour}" stroke-width="2"{dash_attr}/>{}<text x="{}" y="{}">{}</text>"#,
        lx + 36.0,
        marker_svg(marker, lx + 18.0, ly, colour, colour, "", false),
        lx + 44.0,
        ly + 4.0,
        esc(&series.name)
    );
}

/// The list of invalid points under the plot.
fn invalid_list(out: &mut String, invalid: &[String]) {
    if invalid.is_empty() {
        return;
    }
    let y0 = PLOT_BOTTOM + 60.0;
    let _ = writeln!(
        out,
        r#"<text x="{PLOT_LEFT}" y="{y0}" font-weight="bold">Invalid points (hollow markers):</text>"#
    );
    for (i, text) in invalid.iter().enumerate() {
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" class="invalid">{}</text>"#,
            PLOT_LEFT + 12.0,
            y0 + 16.0 * (i + 1) as f64,
            esc(text)
        );
    }
}

fn marker_svg(
    marker: Marker,
    x: f64,
    y: f64,
    colour: &str,
    fill: &str,
    tip: &str,
    invalid: bool,
) -> String {
    let r = 4.5;
    let class = match (tip.is_empty(), invalid) {
        (true, _) => "legend-marker",
        (false, true) => "point invalid",
        (false, false) => "point",
    };
    let title = if tip.is_empty() {
        String::new()
    } else {
        format!("<title>{tip}</title>")
    };
    let style = format!(r#"class="{class}" stroke="{colour}" stroke-width="1.8" fill="{fill}""#);
    match marker {
        Marker::Circle => {
            format!(r#"<circle cx="{x:.1}" cy="{y:.1}" r="{r}" {style}>{title}</circle>"#)
        }
        Marker::Square => format!(
            r#"<rect x="{:.1}" y="{:.1}" width="{}" height="{}" {style}>{title}</rect>"#,
            x - r,
            y - r,
            2.0 * r,
            2.0 * r
        ),
        Marker::Triangle => polygon(
            &[(x, y - r * 1.2), (x + r * 1.1, y + r), (x - r * 1.1, y + r)],
            &style,
            &title,
        ),
        Marker::TriangleDown => polygon(
            &[(x, y + r * 1.2), (x + r * 1.1, y - r), (x - r * 1.1, y - r)],
            &style,
            &title,
        ),
        Marker::Diamond => polygon(
            &[
                (x, y - r * 1.3),
                (x + r * 1.3, y),
                (x, y + r * 1.3),
                (x - r * 1.3, y),
            ],
            &style,
            &title,
        ),
        Marker::Cross => polygon(
            &[
                (x - r, y - r * 0.4),
                (x - r * 0.4, y - r * 0.4),
                (x - r * 0.4, y - r),
                (x + r * 0.4, y - r),
                (x + r * 0.4, y - r * 0.4),
                (x + r, y - r * 0.4),
                (x + r, y + r * 0.4),
                (x + r * 0.4, y + r * 0.4),
                (x + r * 0.4, y + r),
                (x - r * 0.4, y + r),
                (x - r * 0.4, y + r * 0.4),
                (x - r, y + r * 0.4),
            ],
            &style,
            &title,
        ),
    }
}

fn polygon(points: &[(f64, f64)], style: &str, title: &str) -> String {
    let pts: Vec<String> = points
        .iter()
        .map(|(x, y)| format!("{x:.1},{y:.1}"))
        .collect();
    format!(
        r#"<polygon points="{}" {style}>{title}</polygon>"#,
        pts.join(" ")
    )
}

/// Escape text for XML.
pub fn esc(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(valid: bool) -> Chart {
        Chart {
            title: "TTFT vs concurrency".into(),
            x: Axis {
                label: "Concurrency (requests in flight)".into(),
                scale: Scale::Log2,
            },
            y: Axis {
                label: "Mean TTFT (ms)".into(),
                scale: Scale::Linear,
            },
            series: vec![
                Series {
                    name: "vllm".into(),
                    style: 0,
                    points: vec![
                        Point {
                            x: 1.0,
                            y: 150.0,
                            valid: true,
                            label: "concurrency=1".into(),
                        },
                        Point {
                            x: 64.0,
                            y: 1035.0,
                            valid,
                            label: "concurrency=64".into(),
                        },
                    ],
                },
                Series {
                    name: "sglang <b>".into(),
                    style: 1,
                    points: vec![Point {
                        x: 8.0,
                        y: 400.0,
                        valid: true,
                        label: "c=8".into(),
                    }],
                },
            ],
            bands: Vec::new(),
        }
    }

    #[test]
    fn bands_are_shaded_and_widen_the_axis_and_dense_curves_have_no_markers() {
        let mut c = chart(true);
        c.x.scale = Scale::Linear;
        c.bands = vec![Band {
            from: 0.0,
            to: 200.0,
            label: "warm-up".into(),
            fill: "#eeeeee",
        }];
        c.series.truncate(1);
        c.series[0].points = (0..100)
            .map(|i| Point {
                x: f64::from(i),
                y: 1.0,
                valid: i != 50,
                label: format!("{i} s"),
            })
            .collect();
        let svg = render(&c);
        assert!(svg.contains(r#"class="band""#) && svg.contains(">warm-up<"));
        // The band's end (200) sets the axis, beyond the last point (99).
        assert!(svg.contains(">200<"), "{svg}");
        // 100 points: only the invalid one keeps a marker (plus the legend's).
        assert_eq!(svg.matches("class=\"point").count(), 1);
        // Stacked: one document, each panel nested below the title.
        let both = stack("Point over time", &[c.clone(), c]);
        assert_eq!(both.matches("<svg ").count(), 3);
        assert!(both.contains(r#"<svg y="36" "#));
    }

    #[test]
    fn axes_are_labelled_and_series_differ_by_shape_and_dash() {
        let svg = render(&chart(true));
        assert!(svg.contains("Concurrency (requests in flight)"));
        assert!(svg.contains("Mean TTFT (ms)"));
        assert!(svg.contains("<circle") && svg.contains("<rect x=\"5"));
        assert!(svg.contains("stroke-dasharray=\"8 4\""));
        assert!(svg.contains("sglang &lt;b&gt;"), "names are escaped");
        for tick in [">1<", ">2<", ">64<"] {
            assert!(svg.contains(tick), "log2 tick {tick}");
        }
        assert!(!svg.contains("Invalid points"));
    }

    #[test]
    fn invalid_points_are_hollow_and_listed() {
        let svg = render(&chart(false));
        assert!(svg.contains(
            r##"class="point invalid" stroke="#0072B2" stroke-width="1.8" fill="#ffffff""##
        ));
        assert!(svg.contains("Invalid points (hollow markers):"));
        assert!(svg.contains("vllm: concurrency=64"));
    }
}
