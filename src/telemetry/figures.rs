//! The figures of one point's measured window from its GPU samples: energy per GPU (from the
//! cumulative counter where every bracketing sample has one, else the trapezoid integral of
//! power with the window edges interpolated, and which of the two is said), joules per
//! output token and per request, mean and peak power per GPU and per role, utilization and
//! memory; and the price of the window (cost per million output tokens, tokens per dollar).

use std::collections::BTreeMap;

use super::{GpuId, Sample};

/// The largest gap between two power samples the integral accepts (InferenceX and
/// srt-slurm use the same 3 s).
pub const MAX_SAMPLE_GAP_S: f64 = 3.0;

/// Where an energy figure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnergySource {
    /// The difference of the cumulative energy counter (NVML/DCGM, amd-smi), interpolated
    /// linearly at the window edges.
    Counter,
    /// The trapezoid integral of the sampled power, interpolated linearly at the edges.
    IntegratedPower,
    /// Some GPUs of the point from the counter, others from power.
    Mixed,
}

impl EnergySource {
    pub fn name(self) -> &'static str {
        match self {
            EnergySource::Counter => "counter",
            EnergySource::IntegratedPower => "integrated_power",
            EnergySource::Mixed => "mixed",
        }
    }
}

/// One GPU over the window.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuFigures {
    pub gpu: GpuId,
    pub role: Option<String>,
    pub energy_j: f64,
    pub source: EnergySource,
    /// Energy over the window length.
    pub mean_power_w: f64,
    /// The highest power sampled in the window (or at its interpolated edges).
    pub peak_power_w: f64,
    /// Means of the samples inside the window; `None` where none reported it.
    pub mean_util_pct: Option<f64>,
    pub mean_mem_used_mib: Option<f64>,
    pub peak_mem_used_mib: Option<f64>,
    /// Samples inside the window with the power cap, or a thermal/hardware slowdown, active.
    pub power_capped_samples: usize,
    pub thermal_samples: usize,
    pub samples_in_window: usize,
}

/// A role's GPUs together (prefill, decode, aggregated, ...).
#[derive(Debug, Clone, PartialEq)]
pub struct RoleFigures {
    pub gpus: usize,
    pub energy_j: f64,
    /// Per GPU: the role's energy over the window length and its GPU count.
    pub mean_power_w: f64,
    pub peak_power_w: f64,
}

/// The point's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct PointFigures {
    pub window_s: f64,
    pub gpus: usize,
    pub energy_j: f64,
    pub source: EnergySource,
    pub joules_per_output_token: Option<f64>,
    pub joules_per_request: Option<f64>,
    /// All GPUs together: energy over the window length.
    pub mean_power_w: f64,
    /// Per GPU, the mean of the GPUs' figures.
    pub mean_power_per_gpu_w: f64,
    pub peak_power_per_gpu_w: f64,
    pub mean_util_pct: Option<f64>,
    pub mean_mem_used_mib: Option<f64>,
    pub per_gpu: Vec<GpuFigures>,
    pub per_role: BTreeMap<String, RoleFigures>,
}

/// Linear interpolation of `f` between two samples at `t`.
fn lerp(a: (f64, f64), b: (f64, f64), t: f64) -> f64 {
    if b.0 == a.0 {
        return a.1;
    }
    a.1 + (b.1 - a.1) * (t - a.0) / (b.0 - a.0)
}

/// The value of a time-ordered series at `t`, interpolated between the samples around it;
/// `None` when no sample is at or before `t`, or none at or after it.
fn at(series: &[(f64, f64)], t: f64) -> Option<f64> {
    let after = series.iter().position(|&(ts, _)| ts >= t)?;
    if series[after].0 == t {
        return Some(series[after].1);
    }
    let before = after.checked_sub(1)?;
    Some(lerp(series[before], series[after], t))
}

/// The trapezoid integral of a time-ordered series over [t0, t1], with the values at the
/// edges interpolated. Errors when the window is not bracketed or a gap is too wide.
pub fn integrate(series: &[(f64, f64)], t0: f64, t1: f64, max_gap_s: f64) -> Result<f64, String> {
    let (Some(p0), Some(p1)) = (at(series, t0), at(series, t1)) else {
        return Err(format!(
            "the samples ({} of them) do not bracket the window {t0:.3}..{t1:.3} s",
            series.len()
        ));
    };
    let mut points = vec![(t0, p0)];
    points.extend(series.iter().copied().filter(|&(t, _)| t > t0 && t < t1));
    points.push((t1, p1));
    // The gaps that count are between the real samples around and inside the window.
    let first = series.iter().rposition(|&(t, _)| t <= t0).unwrap_or(0);
    let last = series
        .iter()
        .position(|&(t, _)| t >= t1)
        .unwrap_or(series.len() - 1);
    for w in series[first..=last].windows(2) {
        if w[1].0 - w[0].0 > max_gap_s {
            return Err(format!(
                "a gap of {:.3} s between samples at {:.3} and {:.3} s (at most {max_gap_s} s)",
                w[1].0 - w[0].0,
                w[0].0,
                w[1].0
            ));
        }
    }
    Ok(points
        .windows(2)
        .map(|w| (w[1].0 - w[0].0) * (w[0].1 + w[1].1) / 2.0)
        .sum())
}

/// One GPU's figures over [t0, t1] from its samples (any order).
pub fn gpu_figures(
    samples: &[&Sample],
    role: Option<String>,
    t0: f64,
    t1: f64,
) -> Result<GpuFigures, String> {
    let gpu = samples.first().map(|s| s.gpu.clone()).ok_or("no samples")?;
    let mut sorted: Vec<&Sample> = samples.to_vec();
    sorted.sort_by(|a, b| a.t.total_cmp(&b.t));
    let series = |f: &dyn Fn(&Sample) -> Option<f64>| -> Vec<(f64, f64)> {
        sorted
            .iter()
            .filter_map(|s| f(s).map(|x| (s.t, x)))
            .collect()
    };
    let power = series(&|s| s.power_w);
    let counter = series(&|s| s.energy_j);
    let from_counter = match (at(&counter, t0), at(&counter, t1)) {
        (Some(e0), Some(e1)) if e1 >= e0 => Some(e1 - e0),
        _ => None,
    };
    let (energy_j, source) = match from_counter {
        Some(e) => (e, EnergySource::Counter),
        None => (
            integrate(&power, t0, t1, MAX_SAMPLE_GAP_S)
                .map_err(|e| format!("GPU {}: {e}", gpu.key()))?,
            EnergySource::IntegratedPower,
        ),
    };
    let inside: Vec<&&Sample> = sorted.iter().filter(|s| s.t >= t0 && s.t <= t1).collect();
    let peak_power_w = inside
        .iter()
        .filter_map(|s| s.power_w)
        .chain(at(&power, t0))
        .chain(at(&power, t1))
        .fold(f64::NAN, f64::max);
    let mean = |f: &dyn Fn(&Sample) -> Option<f64>| {
        let xs: Vec<f64> = inside.iter().filter_map(|s| f(s)).collect();
        (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
    };
    Ok(GpuFigures {
        role,
        energy_j,
        source,
        mean_power_w: energy_j / (t1 - t0),
        peak_power_w,
        mean_util_pct: mean(&|s| s.util_pct),
        mean_mem_used_mib: mean(&|s| s.mem_used_mib),
        peak_mem_used_mib: inside
            .iter()
            .filter_map(|s| s.mem_used_mib)
            .reduce(f64::max),
        power_capped_samples: inside
            .iter()
            .filter(|s| s.throttle.is_some_and(|t| t.power_capped()))
            .count(),
        thermal_samples: inside
            .iter()
            .filter(|s| s.throttle.is_some_and(|t| t.thermal_or_hw()))
            .count(),
        samples_in_window: inside.len(),
        gpu,
    })
}

/// A point's figures over [t0, t1] (seconds on the run's clock) from every sample of every
/// GPU, `role` naming the role each GPU served (None: no role). Any GPU whose energy cannot
/// be had (window not bracketed, a gap over `MAX_SAMPLE_GAP_S`) fails the whole point: a
/// partial sum would read as a lower energy.
pub fn point_figures(
    samples: &[Sample],
    role: &dyn Fn(&GpuId) -> Option<String>,
    t0: f64,
    t1: f64,
    output_tokens: u64,
    requests: u64,
) -> Result<PointFigures, String> {
    if t1.partial_cmp(&t0) != Some(std::cmp::Ordering::Greater) {
        return Err(format!("an empty window {t0:.3}..{t1:.3} s"));
    }
    let mut by_gpu: BTreeMap<String, Vec<&Sample>> = BTreeMap::new();
    for s in samples {
        by_gpu.entry(s.gpu.key()).or_default().push(s);
    }
    if by_gpu.is_empty() {
        return Err("no GPU samples".into());
    }
    let per_gpu = by_gpu
        .values()
        .map(|ss| gpu_figures(ss, role(&ss[0].gpu), t0, t1))
        .collect::<Result<Vec<_>, _>>()?;
    let window_s = t1 - t0;
    let gpus = per_gpu.len();
    let energy_j: f64 = per_gpu.iter().map(|g| g.energy_j).sum();
    let source = if per_gpu.iter().all(|g| g.source == EnergySource::Counter) {
        EnergySource::Counter
    } else if per_gpu
        .iter()
        .all(|g| g.source == EnergySource::IntegratedPower)
    {
        EnergySource::IntegratedPower
    } else {
        EnergySource::Mixed
    };
    let mut per_role: BTreeMap<String, RoleFigures> = BTreeMap::new();
    for g in &per_gpu {
        let Some(r) = &g.role else { continue };
        let e = per_role.entry(r.clone()).or_insert(RoleFigures {
            gpus: 0,
            energy_j: 0.0,
            mean_power_w: 0.0,
            peak_power_w: f64::NAN,
        });
        e.gpus += 1;
        e.energy_j += g.energy_j;
        e.peak_power_w = e.peak_power_w.max(g.peak_power_w);
    }
    for r in per_role.values_mut() {
        r.mean_power_w = r.energy_j / window_s / r.gpus as f64;
    }
    let mean_of = |xs: Vec<f64>| (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64);
    Ok(PointFigures {
        window_s,
        gpus,
        energy_j,
        source,
        joules_per_output_token: (output_tokens > 0).then(|| energy_j / output_tokens as f64),
        joules_per_request: (requests > 0).then(|| energy_j / requests as f64),
        mean_power_w: energy_j / window_s,
        mean_power_per_gpu_w: energy_j / window_s / gpus as f64,
        peak_power_per_gpu_w: per_gpu
            .iter()
            .map(|g| g.peak_power_w)
            .fold(f64::NAN, f64::max),
        mean_util_pct: mean_of(per_gpu.iter().filter_map(|g| g.mean_util_pct).collect()),
        mean_mem_used_mib: mean_of(per_gpu.iter().filter_map(|g| g.mean_mem_used_mib).collect()),
        per_gpu,
        per_role,
    })
}

/// What the window cost at a price per GPU-hour.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cost {
    /// gpus x price x window hours.
    pub dollars: f64,
    /// dollars / output tokens x 1e6.
    pub per_million_output_tokens: f64,
    /// output tokens / dollars.
    pub output_tokens_per_dollar: f64,
}

/// The cost of holding `gpus` GPUs for `window_s` seconds at `price_per_gpu_hour`, per
/// million output tokens and as tokens per dollar; `None` with no tokens, no GPUs, or a
/// price that is not positive.
pub fn cost(
    gpus: usize,
    price_per_gpu_hour: f64,
    window_s: f64,
    output_tokens: u64,
) -> Option<Cost> {
    let positive = |x: f64| x.is_finite() && x > 0.0;
    if gpus == 0 || output_tokens == 0 || !positive(price_per_gpu_hour) || !positive(window_s) {
        return None;
    }
    let dollars = gpus as f64 * price_per_gpu_hour * window_s / 3600.0;
    Some(Cost {
        dollars,
        per_million_output_tokens: dollars / output_tokens as f64 * 1e6,
        output_tokens_per_dollar: output_tokens as f64 / dollars,
    })
}

#[cfg(test)]
mod tests {
    use super::super::Throttle;
    use super::super::nvidia_smi::{Query, parse_timestamp};
    use super::*;

    fn trace(host: &str, uuid: &str, points: &[(f64, f64)]) -> Vec<Sample> {
        points
            .iter()
            .map(|&(t, p)| Sample {
                gpu: GpuId {
                    host: host.into(),
                    index: Some(0),
                    uuid: Some(uuid.into()),
                },
                t,
                power_w: Some(p),
                util_pct: Some(50.0),
                mem_used_mib: Some(t * 10.0),
                ..Sample::default()
            })
            .collect()
    }

    #[test]
    fn a_known_power_trace_integrates_exactly_with_interpolated_edges() {
        // 100 W at 0 s, 200 W at 1 and 2 s, 100 W at 3 s; over 0.5..2.5 s the edges read
        // 150 W: 0.5*(150+200)/2 + 1*(200+200)/2 + 0.5*(200+150)/2 = 87.5 + 200 + 87.5.
        let s = trace(
            "h",
            "GPU-a",
            &[(0.0, 100.0), (1.0, 200.0), (2.0, 200.0), (3.0, 100.0)],
        );
        let f = point_figures(&s, &|_| None, 0.5, 2.5, 50, 4).unwrap();
        assert_eq!(f.energy_j, 375.0);
        assert_eq!(f.source, EnergySource::IntegratedPower);
        assert_eq!(f.joules_per_output_token, Some(7.5));
        assert_eq!(f.joules_per_request, Some(93.75));
        assert_eq!(f.mean_power_w, 187.5);
        assert_eq!(f.peak_power_per_gpu_w, 200.0);
        assert_eq!(f.mean_util_pct, Some(50.0));
        assert_eq!(f.per_gpu[0].mean_mem_used_mib, Some(15.0));
        assert_eq!(f.per_gpu[0].peak_mem_used_mib, Some(20.0));
        // A window on the samples themselves needs no interpolation.
        assert_eq!(
            point_figures(&s, &|_| None, 0.0, 3.0, 1, 1)
                .unwrap()
                .energy_j,
            500.0
        );
    }

    #[test]
    fn the_counter_wins_where_it_brackets_the_window_and_a_reset_falls_back() {
        let mut s = trace("h", "GPU-a", &[(0.0, 100.0), (1.0, 100.0), (2.0, 100.0)]);
        for (i, x) in s.iter_mut().enumerate() {
            x.energy_j = Some(1000.0 + 90.0 * i as f64);
        }
        let f = point_figures(&s, &|_| None, 0.5, 1.5, 1, 1).unwrap();
        assert_eq!((f.energy_j, f.source), (90.0, EnergySource::Counter));
        s[2].energy_j = Some(5.0); // the driver reloaded: the counter went back
        let f = point_figures(&s, &|_| None, 0.5, 1.5, 1, 1).unwrap();
        assert_eq!(
            (f.energy_j, f.source),
            (100.0, EnergySource::IntegratedPower)
        );
    }

    #[test]
    fn unbracketed_windows_and_wide_gaps_fail_the_point() {
        let s = trace("h", "GPU-a", &[(1.0, 100.0), (2.0, 100.0), (6.0, 100.0)]);
        let e = point_figures(&s, &|_| None, 0.5, 1.5, 1, 1).unwrap_err();
        assert!(e.contains("do not bracket"), "{e}");
        let e = point_figures(&s, &|_| None, 1.5, 5.0, 1, 1).unwrap_err();
        assert!(e.contains("a gap of 4.000 s"), "{e}");
        assert!(point_figures(&s, &|_| None, 2.0, 2.0, 1, 1).is_err());
        assert!(point_figures(&[], &|_| None, 0.0, 1.0, 1, 1).is_err());
    }

    #[test]
    fn roles_sum_their_gpus_and_the_point_sums_all() {
        let mut s = trace("p", "GPU-a", &[(0.0, 100.0), (2.0, 100.0)]);
        s.extend(trace("d", "GPU-b", &[(0.0, 300.0), (2.0, 300.0)]));
        s.extend(trace("d", "GPU-c", &[(0.0, 500.0), (2.0, 500.0)]));
        let role = |g: &GpuId| Some(if g.host == "p" { "prefill" } else { "decode" }.to_string());
        let f = point_figures(&s, &role, 0.0, 2.0, 100, 10).unwrap();
        assert_eq!(f.gpus, 3);
        assert_eq!(f.energy_j, 1800.0);
        assert_eq!(f.mean_power_per_gpu_w, 300.0);
        let decode = &f.per_role["decode"];
        assert_eq!((decode.gpus, decode.energy_j), (2, 1600.0));
        assert_eq!((decode.mean_power_w, decode.peak_power_w), (400.0, 500.0));
        assert_eq!(f.per_role["prefill"].energy_j, 200.0);
    }

    #[test]
    fn the_real_h200_loop_integrates_to_the_independent_figure() {
        const LOOP: &str =
            include_str!("../../tests/fixtures/telemetry/nvidia-smi-h200-loop-500ms.csv");
        let fields = "timestamp,index,uuid,name,pci.bus_id,power.draw,power.draw.instant,power.draw.average,power.limit,enforced.power.limit,utilization.gpu,utilization.memory,memory.used,memory.total,temperature.gpu,clocks.sm,clocks.max.sm,clocks_event_reasons.active";
        let q = Query::new(&fields.split(',').collect::<Vec<_>>());
        let origin = parse_timestamp("2026/11/26 14:07:00.000").unwrap();
        let (samples, errors) = q.parse_output(LOOP, "h200", origin);
        assert!(errors.is_empty());
        // Reference values computed apart from this code (Python, the same trapezoid rule
        // with linear interpolation at the edges, over the same CSV): the whole recording
        // 45.819..59.461 s and the load widened by half a sample, 52.385..57.951 s.
        let whole = point_figures(&samples, &|_| None, 45.819, 59.461, 1000, 10).unwrap();
        assert!(
            (whole.energy_j - 3767.024545).abs() < 1e-6,
            "{}",
            whole.energy_j
        );
        let load = point_figures(&samples, &|_| None, 52.385, 57.951, 1000, 10).unwrap();
        assert!(
            (load.energy_j - 3069.15634).abs() < 1e-6,
            "{}",
            load.energy_j
        );
        let inner = point_figures(&samples, &|_| None, 53.0, 56.0, 1000, 10).unwrap();
        assert!(
            (inner.energy_j - 1940.4042164959264).abs() < 1e-6,
            "{}",
            inner.energy_j
        );
        assert_eq!(inner.peak_power_per_gpu_w, 694.62);
        assert_eq!(
            inner.per_gpu[0].power_capped_samples,
            inner.per_gpu[0].samples_in_window
        );
        assert_eq!(inner.per_gpu[0].thermal_samples, 0);
        assert_eq!(inner.mean_util_pct, Some(100.0));
        assert_eq!(samples[0].throttle, Some(Throttle::Nvidia(1)));
    }

    #[test]
    fn cost_per_million_tokens_and_tokens_per_dollar() {
        // 8 GPUs at $2/GPU-hour for 900 s: $4; 2e6 tokens: $2 per million, 500k per dollar.
        let c = cost(8, 2.0, 900.0, 2_000_000).unwrap();
        assert_eq!(c.dollars, 4.0);
        assert_eq!(c.per_million_output_tokens, 2.0);
        assert_eq!(c.output_tokens_per_dollar, 500_000.0);
        assert_eq!(cost(8, 0.0, 900.0, 1), None);
        assert_eq!(cost(8, 2.0, 900.0, 0), None);
        assert_eq!(cost(0, 2.0, 900.0, 1), None);
    }
}
