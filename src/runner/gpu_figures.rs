//! The figures of a point from its GPU samplers' logs (`run --telemetry`; the samplers are
//! `telemetry`'s): each host's lines read into samples on the run's clock, each GPU given
//! the role and instances it served (by the instances' pinned GPUs), every sample of the
//! deployment's GPUs written to `gpu_samples.jsonl`, and the measured window's energy,
//! power, utilization, memory and cost put into the point's summary (named figures and its
//! `telemetry` block), with a note for whatever could not be had.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Value, json};

use crate::archive::PointSummary;
use crate::plan::HostPlan;
use crate::telemetry::figures::{self, PointFigures};
use crate::telemetry::sampler::TelemetryOptions;
use crate::telemetry::{GpuId, Sample};

/// One host of a deployment and the instances it runs.
#[derive(Debug, Clone)]
pub(super) struct Host {
    /// `local`, the hosts file's name, or the Slurm node.
    pub name: String,
    pub place: HostPlan,
    /// The name its price is set under (host or Slurm cluster); none for this machine.
    pub price_key: Option<String>,
    /// `<role>-<index>` and the GPUs it pins (`container.gpu_ids`; empty: not pinned).
    pub instances: Vec<(String, String, Vec<String>)>,
}

/// What a GPU served, by its key: its role, its instances, and its host's price per GPU-hour.
type Served = (Option<String>, Vec<String>, Option<f64>);

/// The samplers' output after they stopped.
/// The samplers' output after they stopped.
pub(super) struct Collected {
    pub options: TelemetryOptions,
    pub prices: BTreeMap<String, f64>,
    pub hosts: Vec<(Host, String)>,
    pub notes: Vec<String>,
}

/// Which instances served a GPU: those that pin it, else those of its host that pin none;
/// empty when the GPU is not the deployment's (other instances pin GPUs, it is not one).
fn served_by<'h>(host: &'h Host, gpu: &GpuId) -> Vec<&'h (String, String, Vec<String>)> {
    let pinned = |ids: &[String]| {
        ids.iter().any(|id| {
            gpu.index.is_some_and(|i| id.trim() == i.to_string())
                || gpu.uuid.as_deref() == Some(id.trim())
        })
    };
    let by_pin: Vec<_> = host.instances.iter().filter(|i| pinned(&i.2)).collect();
    if !by_pin.is_empty() {
        return by_pin;
    }
    host.instances.iter().filter(|i| i.2.is_empty()).collect()
}

/// The role of a GPU: its instances' roles, `+`-joined when it serves several.
fn role_of(instances: &[&(String, String, Vec<String>)]) -> Option<String> {
    let mut roles: Vec<&str> = instances.iter().map(|i| i.0.as_str()).collect();
    roles.dedup();
    (!roles.is_empty()).then(|| roles.join("+"))
}

/// The measured window on the run's clock, with its output tokens and completed requests:
/// the trimmed window when the point had a warm-up or cool-down, else the whole load.
fn window(summary: &PointSummary) -> Option<(f64, f64, u64, u64)> {
    if let Some(t) = summary.trimmed() {
        let f = |k: &str| t.get(k).and_then(Value::as_f64);
        return Some((
            f("window_start_s")?,
            f("window_end_s")?,
            f("output_tokens")? as u64,
            f("requests_completed")? as u64,
        ));
    }
    let duration = summary.metric("duration")?;
    Some((
        0.0,
        duration,
        summary.total_output_tokens.unwrap_or(0.0) as u64,
        summary.completed.unwrap_or(0.0) as u64,
    ))
}

impl Collected {
    /// Read the samples (origin: the load's start, `started_at`), write them to
    /// `gpu_samples.jsonl` in `dir`, and put the window's figures into `summary`.
    pub(super) fn apply(
        self,
        started_at: chrono::DateTime<chrono::Utc>,
        summary: &mut PointSummary,
        dir: &Path,
    ) {
        let measured = window(summary);
        self.apply_over(started_at, measured, summary, dir);
    }

    /// [`Self::apply`] over a window given as (start s, end s, output tokens, requests) on
    /// the run's clock (an external command's run); `None`: no window.
    pub(super) fn apply_over(
        self,
        started_at: chrono::DateTime<chrono::Utc>,
        measured: Option<(f64, f64, u64, u64)>,
        summary: &mut PointSummary,
        dir: &Path,
    ) {
        let origin = started_at.timestamp_micros();
        let mut notes = self.notes;
        let mut samples: Vec<Sample> = Vec::new();
        let mut served: BTreeMap<String, Served> = BTreeMap::new();
        let mut lines = Vec::new();
        for (host, text) in &self.hosts {
            let (read, errors) = self.options.read_log(text, &host.name, origin);
            if let Some(first) = errors.first() {
                notes.push(format!(
                    "host {}: {} line(s) of the sampler's output did not read (line {}: {})",
                    host.name,
                    errors.len(),
                    first.line,
                    first.message
                ));
            }
            if read.is_empty() {
                notes.push(format!(
                    "host {}: no GPU samples ({} printed none)",
                    host.name,
                    self.options.tool()
                ));
            }
            let price = self.options.price_per_gpu_hour.or_else(|| {
                host.price_key
                    .as_ref()
                    .and_then(|k| self.prices.get(k).copied())
            });
            for s in read {
                let by = served_by(host, &s.gpu);
                if by.is_empty() {
                    continue;
                }
                let role = role_of(&by);
                let instances: Vec<String> = by.iter().map(|i| i.1.clone()).collect();
                lines.push(sample_line(&s, role.as_deref(), &instances));
                served
                    .entry(s.gpu.key())
                    .or_insert((role, instances, price));
                samples.push(s);
            }
        }
        if let Err(e) = write_lines(&dir.join("gpu_samples.jsonl"), &lines) {
            notes.push(format!("gpu_samples.jsonl was not written: {e}"));
        }
        let mut block =
            json!({"tool": self.options.tool(), "interval_ms": self.options.interval_ms});
        match measured {
            None => notes.push("no measured window in the summary".to_string()),
            Some(_) if samples.is_empty() => {}
            Some((t0, t1, tokens, requests)) => {
                let role = |g: &GpuId| served.get(&g.key()).and_then(|s| s.0.clone());
                match figures::point_figures(&samples, &role, t0, t1, tokens, requests) {
                    Ok(f) => {
                        let prices: Vec<Option<f64>> = f
                            .per_gpu
                            .iter()
                            .map(|g| served.get(&g.gpu.key()).and_then(|s| s.2))
                            .collect();
                        set_figures(summary, (&f, t0), &prices, tokens, &served, &mut block);
                    }
                    Err(e) => notes.push(format!("no GPU figures: {e}")),
                }
            }
        }
        for note in &notes {
            tracing::warn!("GPU telemetry: {note}");
        }
        block["notes"] = json!(notes);
        summary.other.insert("telemetry".into(), block);
    }
}

/// The figures into the summary's named fields and its `telemetry` block.
fn set_figures(
    summary: &mut PointSummary,
    (f, t0): (&PointFigures, f64),
    prices: &[Option<f64>],
    tokens: u64,
    served: &BTreeMap<String, Served>,
    block: &mut Value,
) {
    summary.gpu_count = Some(f.gpus as f64);
    summary.gpu_energy_j = Some(f.energy_j);
    summary.joules_per_token = f.joules_per_output_token;
    summary.joules_per_request = f.joules_per_request;
    summary.gpu_mean_power_w = Some(f.mean_power_per_gpu_w);
    summary.gpu_peak_power_w = Some(f.peak_power_per_gpu_w);
    summary.gpu_mean_util_pct = f.mean_util_pct;
    summary.gpu_mean_mem_used_mib = f.mean_mem_used_mib;
    // Every GPU priced: the window's cost is each GPU's price over the window.
    if let Some(prices) = prices.iter().copied().collect::<Option<Vec<f64>>>() {
        let dollars: f64 = prices
            .iter()
            .filter_map(|p| figures::cost(1, *p, f.window_s, tokens.max(1)))
            .map(|c| c.dollars)
            .sum();
        if dollars > 0.0 && tokens > 0 {
            summary.cost_per_million_output_tokens = Some(dollars / tokens as f64 * 1e6);
            summary.output_tokens_per_dollar = Some(tokens as f64 / dollars);
            block["cost_usd"] = json!(dollars);
        }
    }
    block["energy_source"] = json!(f.source.name());
    block["window_start_s"] = json!(t0);
    block["window_end_s"] = json!(t0 + f.window_s);
    block["per_gpu"] = f
        .per_gpu
        .iter()
        .map(|g| {
            let s = served.get(&g.gpu.key());
            json!({
                "gpu": g.gpu.key(),
                "host": g.gpu.host,
                "index": g.gpu.index,
                "uuid": g.gpu.uuid,
                "role": g.role,
                "instances": s.map(|s| s.1.clone()).unwrap_or_default(),
                "price_per_gpu_hour": s.and_then(|s| s.2),
                "energy_j": g.energy_j,
                "energy_source": g.source.name(),
                "mean_power_w": g.mean_power_w,
                "peak_power_w": g.peak_power_w,
                "mean_util_pct": g.mean_util_pct,
                "mean_mem_used_mib": g.mean_mem_used_mib,
                "peak_mem_used_mib": g.peak_mem_used_mib,
                "power_capped_samples": g.power_capped_samples,
                "thermal_samples": g.thermal_samples,
                "samples_in_window": g.samples_in_window,
            })
        })
        .collect();
    block["per_role"] = f
        .per_role
        .iter()
        .map(|(role, r)| {
            (
                role.clone(),
                json!({
                    "gpus": r.gpus,
                    "energy_j": r.energy_j,
                    "mean_power_w": r.mean_power_w,
                    "peak_power_w": r.peak_power_w,
                }),
            )
        })
        .collect::<serde_json::Map<String, Value>>()
        .into();
}

/// One archived sample: which GPU, the role and instances it served, its readings.
fn sample_line(s: &Sample, role: Option<&str>, instances: &[String]) -> String {
    json!({
        "t": s.t,
        "host": s.gpu.host,
        "index": s.gpu.index,
        "uuid": s.gpu.uuid,
        "role": role,
        "instances": instances,
        "power_w": s.power_w,
        "energy_j": s.energy_j,
        "util_pct": s.util_pct,
        "mem_used_mib": s.mem_used_mib,
        "mem_total_mib": s.mem_total_mib,
        "temp_c": s.temp_c,
        "sm_clock_mhz": s.sm_clock_mhz,
        "throttle": s.throttle.map(|t| t.names()),
    })
    .to_string()
}

fn write_lines(path: &Path, lines: &[String]) -> std::io::Result<()> {
    let mut text = lines.join("\n");
    if !text.is_empty() {
        text.push('\n');
    }
    std::fs::write(path, text)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// nvidia-smi lines of the sampler's query: `(second, gpu index, power W)` after
    /// 2026/11/26 10:00:00 UTC.
    fn log(rows: &[(u32, u32, f64)]) -> String {
        let mut text =
            String::from("[orchestrate] started process group 7: sh -e -c 'exec nvidia-smi'\n");
        for (sec, gpu, power) in rows {
            text.push_str(&format!(
                "2026/11/26 10:00:{sec:02}.000, {gpu}, GPU-{gpu}, {power:.2}, 40, 1000, 80000, 50, 1400, 0x0000000000000004\n"
            ));
        }
        text
    }

    fn pd_host() -> Host {
        Host {
            name: "h1".into(),
            place: HostPlan::Remote {
                name: "h1".into(),
                address: "10.0.0.1".into(),
            },
            price_key: Some("h1".into()),
            instances: vec![
                ("prefill".into(), "prefill-0".into(), vec!["0".into()]),
                ("decode".into(), "decode-0".into(), vec!["GPU-1".into()]),
            ],
        }
    }

    fn collected(text: String, price: Option<f64>) -> Collected {
        Collected {
            options: TelemetryOptions::default(),
            prices: price.map(|p| ("h1".to_string(), p)).into_iter().collect(),
            hosts: vec![(pd_host(), text)],
            notes: Vec::new(),
        }
    }

    fn summary(extra: Value) -> PointSummary {
        let mut v = json!({"duration": 2.0, "completed": 4, "total_output_tokens": 100});
        if let (Some(map), Some(more)) = (v.as_object_mut(), extra.as_object()) {
            map.extend(more.clone());
        }
        PointSummary::from_json(&v)
    }

    fn started() -> chrono::DateTime<chrono::Utc> {
        "2026-11-26T10:00:00Z".parse().unwrap()
    }

    /// GPU 0 (prefill, pinned by index) 100 -> 200 -> 300 W, GPU 1 (decode, pinned by UUID)
    /// 50 W, GPU 2 pinned by nobody (not the deployment's).
    fn pd_log() -> String {
        log(&[
            (0, 0, 100.0),
            (0, 1, 50.0),
            (0, 2, 999.0),
            (1, 0, 200.0),
            (1, 1, 50.0),
            (1, 2, 999.0),
            (2, 0, 300.0),
            (2, 1, 50.0),
            (2, 2, 999.0),
        ])
    }

    #[test]
    fn a_known_trace_gives_the_energy_per_token_per_role_and_the_cost_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = summary(json!({}));
        collected(pd_log(), Some(2.0)).apply(started(), &mut s, dir.path());
        // GPU 0 over 0..2 s: (100+200)/2 + (200+300)/2 = 400 J; GPU 1: 2 x 50 = 100 J.
        assert_eq!(s.gpu_energy_j, Some(500.0));
        assert_eq!(s.gpu_count, Some(2.0));
        assert_eq!(s.joules_per_token, Some(5.0));
        assert_eq!(s.joules_per_request, Some(125.0));
        assert_eq!(s.gpu_mean_power_w, Some(125.0));
        assert_eq!(s.gpu_peak_power_w, Some(300.0));
        assert_eq!(s.gpu_mean_util_pct, Some(40.0));
        assert_eq!(s.gpu_mean_mem_used_mib, Some(1000.0));
        let t = &s.other["telemetry"];
        assert_eq!(t["energy_source"], "integrated_power");
        assert_eq!(t["per_role"]["prefill"]["energy_j"], 400.0);
        assert_eq!(t["per_role"]["decode"]["mean_power_w"], 50.0);
        assert_eq!(t["per_gpu"][0]["instances"], json!(["prefill-0"]));
        assert_eq!(t["per_gpu"][0]["power_capped_samples"], 3);
        assert_eq!(t["notes"], json!([]));
        // Two GPUs at $2 per GPU-hour for 2 s, 100 output tokens.
        let dollars = 2.0 * 2.0 * 2.0 / 3600.0;
        assert_eq!(
            s.cost_per_million_output_tokens,
            Some(dollars / 100.0 * 1e6)
        );
        assert_eq!(s.output_tokens_per_dollar, Some(100.0 / dollars));
        // Every sample of the deployment's GPUs is archived with its role and instance.
        let lines = std::fs::read_to_string(dir.path().join("gpu_samples.jsonl")).unwrap();
        let lines: Vec<Value> = lines
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 6);
        assert_eq!(lines[1]["role"], "decode");
        assert_eq!(lines[1]["instances"], json!(["decode-0"]));
        assert_eq!(lines[0]["throttle"], json!(["sw_power_cap"]));
    }

    #[test]
    fn a_trimmed_window_counts_its_own_tokens_and_no_price_means_no_cost() {
        let dir = tempfile::tempdir().unwrap();
        let trimmed = json!({"trimmed": {"window_start_s": 0.5, "window_end_s": 1.5, "output_tokens": 50, "requests_completed": 2}});
        let mut s = summary(trimmed);
        collected(pd_log(), None).apply(started(), &mut s, dir.path());
        // GPU 0 over 0.5..1.5 s: 0.5 x (150+200)/2 + 0.5 x (200+250)/2 = 200 J; GPU 1: 50 J.
        assert_eq!(s.gpu_energy_j, Some(250.0));
        assert_eq!(s.joules_per_token, Some(5.0));
        assert_eq!(s.joules_per_request, Some(125.0));
        assert_eq!(s.cost_per_million_output_tokens, None);
        assert_eq!(s.other["telemetry"]["window_start_s"], 0.5);
    }

    #[test]
    fn samples_that_do_not_bracket_the_window_are_a_note_not_figures() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = summary(json!({}));
        let late = log(&[(1, 0, 100.0), (2, 0, 100.0)]);
        let mut c = collected(late, None);
        c.notes
            .push("host h2: the sampler did not start: refused".into());
        c.apply(started(), &mut s, dir.path());
        assert_eq!(s.gpu_energy_j, None);
        let notes = s.other["telemetry"]["notes"].to_string();
        assert!(
            notes.contains("no GPU figures") && notes.contains("do not bracket"),
            "{notes}"
        );
        assert!(
            notes.contains("host h2: the sampler did not start"),
            "{notes}"
        );
    }

    #[test]
    fn unpinned_instances_share_every_gpu_of_their_host() {
        let host = Host {
            instances: vec![
                ("router".into(), "router-0".into(), Vec::new()),
                ("server".into(), "server-0".into(), Vec::new()),
            ],
            ..pd_host()
        };
        let gpu = GpuId {
            host: "h1".into(),
            index: Some(3),
            uuid: Some("GPU-3".into()),
        };
        let by = served_by(&host, &gpu);
        assert_eq!(by.len(), 2);
        assert_eq!(role_of(&by).as_deref(), Some("router+server"));
        assert!(served_by(&pd_host(), &gpu).is_empty());
    }
}
