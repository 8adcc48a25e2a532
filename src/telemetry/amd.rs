//! AMD GPUs: `amd-smi metric -p -u -m -t -c -E --json` (a list of GPUs before amd-smi 26,
//! `{"gpu_data": [...]}` from 26 on; numbers as `{"value", "unit"}`, unsupported as `"N/A"`)
//! and the fallback `rocm-smi --showpower --showuse --showmemuse --showtemp
//! --showenergycounter --json` (`{"card0": {...}}`, every value a string). A one-shot run
//! carries no time, so the caller stamps it.

use serde_json::Value;

use super::{GpuId, Sample, Throttle, number};

/// The amd-smi command that reads what a sample holds.
pub const AMD_SMI_COMMAND: &[&str] = &[
    "amd-smi", "metric", "-p", "-u", "-m", "-t", "-c", "-E", "--json",
];

/// The rocm-smi fallback command.
pub const ROCM_SMI_COMMAND: &[&str] = &[
    "rocm-smi",
    "--showpower",
    "--showuse",
    "--showmemuse",
    "--showtemp",
    "--showenergycounter",
    "--json",
];

/// A `{"value": N, "unit": U}` number (or a bare number) at `path`, in the unit wanted;
/// `"N/A"` or a missing key is `None`.
fn value_at(gpu: &Value, path: &[&str]) -> Result<Option<(f64, String)>, String> {
    let mut v = gpu;
    for key in path {
        match v.get(key) {
            Some(x) => v = x,
            None => return Ok(None),
        }
    }
    let (n, unit) = match v {
        Value::Object(o) => (o.get("value"), o.get("unit").and_then(Value::as_str)),
        other => (Some(other), None),
    };
    match n {
        Some(Value::Number(x)) => Ok(x.as_f64().map(|x| (x, unit.unwrap_or("").to_string()))),
        Some(Value::String(s)) => Ok(number(s)
            .map_err(|e| format!("`{}`: {e}", path.join(".")))?
            .map(|x| (x, unit.unwrap_or("").to_string()))),
        None | Some(Value::Null) => Ok(None),
        Some(other) => Err(format!("`{}` is {other}, not a number", path.join("."))),
    }
}

/// amd-smi's JSON output (either envelope) as one sample per GPU, stamped `t`.
pub fn parse_amd_smi(text: &str, host: &str, t: f64) -> Result<Vec<Sample>, String> {
    let root: Value = serde_json::from_str(text).map_err(|e| format!("amd-smi output: {e}"))?;
    let gpus = match &root {
        Value::Array(list) => list,
        Value::Object(o) => match o.get("gpu_data") {
            Some(Value::Array(list)) => list,
            _ => return Err("amd-smi output: an object without a `gpu_data` list".into()),
        },
        _ => return Err("amd-smi output: neither a list nor `{\"gpu_data\": [...]}`".into()),
    };
    let mut out = Vec::new();
    for (i, gpu) in gpus.iter().enumerate() {
        let ctx = |e: String| format!("amd-smi output, GPU {i}: {e}");
        let index = gpu.get("gpu").and_then(Value::as_u64).map(|g| g as u32);
        let energy = value_at(gpu, &["energy", "total_energy_consumption"]).map_err(ctx)?;
        let energy_j = match energy {
            None => None,
            Some((x, unit)) => Some(match unit.as_str() {
                "J" | "" => x,
                "mJ" => x / 1e3,
                "uJ" | "µJ" => x / 1e6,
                other => return Err(ctx(format!("energy in unknown unit `{other}`"))),
            }),
        };
        let temp = match value_at(gpu, &["temperature", "hotspot"]).map_err(ctx)? {
            Some(x) => Some(x),
            None => value_at(gpu, &["temperature", "edge"]).map_err(ctx)?,
        };
        let throttle = match gpu
            .pointer("/power/throttle_status")
            .and_then(Value::as_str)
        {
            Some("THROTTLED") => Some(Throttle::Amd { throttled: true }),
            Some("UNTHROTTLED") => Some(Throttle::Amd { throttled: false }),
            _ => None,
        };
        let v = |p: &[&str]| value_at(gpu, p).map(|x| x.map(|(n, _)| n)).map_err(ctx);
        out.push(Sample {
            gpu: GpuId {
                host: host.to_string(),
                index,
                uuid: None,
            },
            t,
            power_w: v(&["power", "socket_power"])?,
            energy_j,
            util_pct: v(&["usage", "gfx_activity"])?,
            // "MB" in amd-smi is bytes / 2^20: MiB.
            mem_used_mib: v(&["mem_usage", "used_vram"])?,
            mem_total_mib: v(&["mem_usage", "total_vram"])?,
            temp_c: temp.map(|(x, _)| x),
            sm_clock_mhz: v(&["clock", "gfx_0", "clk"])?,
            throttle,
        });
    }
    Ok(out)
}

/// rocm-smi's JSON output as one sample per card, stamped `t`. Power is the key ending in
/// `Graphics Package Power (W)` (its first word depends on the ASIC); energy is
/// `Accumulated Energy (uJ)`.
pub fn parse_rocm_smi(text: &str, host: &str, t: f64) -> Result<Vec<Sample>, String> {
    let root: Value = serde_json::from_str(text).map_err(|e| format!("rocm-smi output: {e}"))?;
    let Value::Object(cards) = root else {
        return Err("rocm-smi output: not an object of cards".into());
    };
    let mut out = Vec::new();
    for (card, fields) in &cards {
        let Some(index) = card
            .strip_prefix("card")
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Value::Object(fields) = fields else {
            return Err(format!("rocm-smi output: `{card}` is not an object"));
        };
        let get = |pred: &dyn Fn(&str) -> bool| -> Result<Option<f64>, String> {
            match fields.iter().find(|(k, _)| pred(k)) {
                Some((k, Value::String(s))) => {
                    number(s).map_err(|e| format!("rocm-smi output, {card} `{k}`: {e}"))
                }
                Some((_, Value::Number(n))) => Ok(n.as_f64()),
                _ => Ok(None),
            }
        };
        let junction = get(&|k| k == "Temperature (Sensor junction) (C)")?;
        out.push(Sample {
            gpu: GpuId {
                host: host.to_string(),
                index: Some(index),
                uuid: None,
            },
            t,
            power_w: get(&|k| k.ends_with("Graphics Package Power (W)"))?,
            energy_j: get(&|k| k == "Accumulated Energy (uJ)")?.map(|uj| uj / 1e6),
            util_pct: get(&|k| k == "GPU use (%)")?,
            mem_used_mib: None,
            mem_total_mib: None,
            temp_c: match junction {
                Some(x) => Some(x),
                None => get(&|k| k == "Temperature (Sensor edge) (C)")?,
            },
            sm_clock_mhz: None,
            throttle: None,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const AMD_SMI: &str =
        include_str!("../../tests/fixtures/telemetry/amd-smi-mi300x-written-v26.json");
    const ROCM_SMI: &str = include_str!("../../tests/fixtures/telemetry/rocm-smi-written.json");

    #[test]
    fn both_amd_smi_envelopes_read_the_same() {
        let new = parse_amd_smi(AMD_SMI, "mi", 3.0).unwrap();
        let root: Value = serde_json::from_str(AMD_SMI).unwrap();
        let old_text = root["gpu_data"].to_string();
        let old = parse_amd_smi(&old_text, "mi", 3.0).unwrap();
        assert_eq!(new, old);
        assert_eq!(new.len(), 1);
        let s = &new[0];
        assert_eq!(s.gpu.index, Some(0));
        assert_eq!(s.power_w, Some(742.0));
        assert_eq!(s.energy_j, Some(1843211.472));
        assert_eq!(s.util_pct, Some(100.0));
        assert_eq!(s.mem_used_mib, Some(181204.0));
        assert_eq!(s.mem_total_mib, Some(196592.0));
        // edge is N/A on Instinct: the hotspot is read.
        assert_eq!(s.temp_c, Some(71.0));
        assert_eq!(s.sm_clock_mhz, Some(1890.0));
        assert_eq!(s.throttle, Some(Throttle::Amd { throttled: false }));
    }

    #[test]
    fn a_whole_section_as_na_reads_as_absent_and_bad_json_is_an_error() {
        let text = r#"[{"gpu": 2, "usage": "N/A", "power": {"socket_power": "N/A"}}]"#;
        let s = &parse_amd_smi(text, "h", 0.0).unwrap()[0];
        assert_eq!((s.gpu.index, s.util_pct, s.power_w), (Some(2), None, None));
        assert!(parse_amd_smi("{\"cpu_data\": []}", "h", 0.0).is_err());
        assert!(parse_amd_smi("not json", "h", 0.0).is_err());
        let e = parse_amd_smi(r#"[{"power": {"socket_power": {"value": [1]}}}]"#, "h", 0.0)
            .unwrap_err();
        assert!(e.contains("power.socket_power"), "{e}");
    }

    #[test]
    fn rocm_smi_reads_strings_and_the_secondary_die_has_no_power() {
        let samples = parse_rocm_smi(ROCM_SMI, "mi", 1.0).unwrap();
        assert_eq!(samples.len(), 2);
        assert_eq!(samples[0].power_w, Some(742.0));
        assert_eq!(samples[0].energy_j, Some(1843.211472));
        assert_eq!(samples[0].util_pct, Some(100.0));
        assert_eq!(samples[0].temp_c, Some(71.0));
        assert_eq!(samples[1].gpu.index, Some(1));
        assert_eq!(samples[1].power_w, None);
    }
}
