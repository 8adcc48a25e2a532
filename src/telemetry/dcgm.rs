//! The DCGM exporter's `/metrics` page (Prometheus text format): one scrape read into one
//! sample per GPU. Both the legacy names (`DCGM_FI_DEV_POWER_USAGE`,
//! `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` in mJ), the new ones (`..._BOARD_POWER_WATTS`,
//! `..._GPU_ENERGY_JOULES_TOTAL` in J, `..._SM_CLOCK_HERTZ` in Hz) and the 1.x `dcgm_*`
//! names (`-o`) are read, each in the unit its name says. MIG instance series are skipped
//! (their parent GPU carries the board), and DCGM's blank sentinels read as absent.

use std::collections::BTreeMap;

use super::{GpuId, Sample, Throttle};

/// What a series name reads into, and the divisor to its unit in `Sample`.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Quantity {
    Power,
    Energy(f64),
    Util,
    MemUsed,
    MemFree,
    Temp,
    SmClock(f64),
    Throttle,
}

fn quantity_of(name: &str) -> Option<Quantity> {
    Some(match name {
        "DCGM_FI_DEV_POWER_USAGE" | "DCGM_FI_DEV_BOARD_POWER_WATTS" | "dcgm_power_usage" => {
            Quantity::Power
        }
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" | "dcgm_total_energy_consumption" => {
            Quantity::Energy(1e3)
        }
        "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL" => Quantity::Energy(1.0),
        "DCGM_FI_DEV_GPU_UTIL" | "dcgm_gpu_utilization" => Quantity::Util,
        "DCGM_FI_DEV_FB_USED" | "dcgm_fb_used" => Quantity::MemUsed,
        "DCGM_FI_DEV_FB_FREE" | "dcgm_fb_free" => Quantity::MemFree,
        "DCGM_FI_DEV_GPU_TEMP" | "dcgm_gpu_temp" => Quantity::Temp,
        "DCGM_FI_DEV_SM_CLOCK" | "dcgm_sm_clock" => Quantity::SmClock(1.0),
        "DCGM_FI_DEV_SM_CLOCK_HERTZ" => Quantity::SmClock(1e6),
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS" | "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS" => {
            Quantity::Throttle
        }
        _ => return None,
    })
}

/// DCGM's blank values: int64 from 0x7ffffffffffffff0, fp64 from 140737488355328.0, and,
/// for every field but the 64-bit energy counter, int32 from 0x7ffffff0.
fn is_blank(q: Quantity, x: f64) -> bool {
    if x >= 1.4e14 {
        return true;
    }
    !matches!(q, Quantity::Energy(_)) && x >= f64::from(0x7fff_fff0_u32)
}

/// One scrape as samples, one per GPU, stamped `t` (a scrape carries no time). `host` is
/// the host the scrape came from (the `hostname` label is not trusted: the poller knows).
pub fn parse_scrape(text: &str, host: &str, t: f64) -> Result<Vec<Sample>, String> {
    let mut by_gpu: BTreeMap<(Option<u32>, Option<String>), Sample> = BTreeMap::new();
    let mut free: BTreeMap<(Option<u32>, Option<String>), f64> = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = |m: String| format!("line {}: {m}", n + 1);
        let (name, labels, value) = split_series(line).map_err(at)?;
        let Some(q) = quantity_of(name) else {
            continue;
        };
        if labels.contains_key("GPU_I_ID") || labels.contains_key("GPU_I_PROFILE") {
            continue;
        }
        let x: f64 = value
            .parse()
            .map_err(|_| at(format!("`{name}` value `{value}` is not a number")))?;
        if !x.is_finite() || x < 0.0 || is_blank(q, x) {
            continue;
        }
        let index = labels.get("gpu").and_then(|g| g.parse().ok());
        let uuid = labels
            .get("UUID")
            .or_else(|| labels.get("uuid"))
            .filter(|u| !u.is_empty())
            .cloned();
        let key = (index, uuid.clone());
        if q == Quantity::MemFree {
            free.insert(key, x);
            continue;
        }
        let s = by_gpu.entry(key).or_insert_with(|| Sample {
            gpu: GpuId {
                host: host.to_string(),
                index,
                uuid,
            },
            t,
            ..Sample::default()
        });
        match q {
            Quantity::Power => s.power_w = Some(x),
            Quantity::Energy(k) => s.energy_j = Some(x / k),
            Quantity::Util => s.util_pct = Some(x),
            Quantity::MemUsed => s.mem_used_mib = Some(x),
            Quantity::Temp => s.temp_c = Some(x),
            Quantity::SmClock(k) => s.sm_clock_mhz = Some(x / k),
            Quantity::Throttle => s.throttle = Some(Throttle::Nvidia(x as u64)),
            Quantity::MemFree => {}
        }
    }
    for (key, f) in free {
        if let Some(s) = by_gpu.get_mut(&key) {
            s.mem_total_mib = s.mem_used_mib.map(|u| u + f);
        }
    }
    Ok(by_gpu.into_values().collect())
}

/// `name{k="v",...} value [timestamp]` split into its parts.
fn split_series(line: &str) -> Result<(&str, BTreeMap<String, String>, &str), String> {
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .ok_or_else(|| format!("`{line}` has no value"))?;
    let name = &line[..name_end];
    let mut labels = BTreeMap::new();
    let mut rest = &line[name_end..];
    if let Some(body) = rest.strip_prefix('{') {
        let mut chars = body.char_indices();
        let mut key = String::new();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '}' => {
                    end = Some(i + 1);
                    break;
                }
                ',' | ' ' => {}
                '=' => {
                    if chars.next().map(|(_, c)| c) != Some('"') {
                        return Err(format!("label `{key}` of `{name}` is not quoted"));
                    }
                    let mut value = String::new();
                    loop {
                        match chars.next() {
                            Some((_, '"')) => break,
                            Some((_, '\\')) => match chars.next() {
                                Some((_, 'n')) => value.push('\n'),
                                Some((_, c)) => value.push(c),
                                None => break,
                            },
                            Some((_, c)) => value.push(c),
                            None => return Err(format!("label `{key}` of `{name}` is not closed")),
                        }
                    }
                    labels.insert(std::mem::take(&mut key), value);
                }
                c => key.push(c),
            }
        }
        let end = end.ok_or_else(|| format!("the labels of `{name}` are not closed"))?;
        rest = &body[end..];
    }
    let value = rest
        .split_whitespace()
        .next()
        .ok_or_else(|| format!("`{name}` has no value"))?;
    Ok((name, labels, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    const H200: &str = include_str!("../../tests/fixtures/telemetry/dcgm-h200-written.txt");
    const GB200: &str = include_str!("../../tests/fixtures/telemetry/dcgm-gb200-srt-slurm.txt");

    #[test]
    fn the_written_h200_scrape_reads_every_quantity_in_its_unit() {
        let samples = parse_scrape(H200, "node1", 12.5).unwrap();
        assert_eq!(samples.len(), 1);
        let s = &samples[0];
        assert_eq!(s.t, 12.5);
        assert_eq!(s.gpu.host, "node1");
        assert_eq!(s.gpu.index, Some(0));
        assert_eq!(
            s.gpu.uuid.as_deref(),
            Some("GPU-fafb1c12-674e-2915-c04b-32bd59675461")
        );
        assert_eq!(s.power_w, Some(691.12));
        assert_eq!(s.energy_j, Some(4203318.842));
        assert_eq!(s.util_pct, Some(100.0));
        assert_eq!(s.mem_used_mib, Some(1011.0));
        assert_eq!(s.temp_c, Some(58.0));
        assert_eq!(s.sm_clock_mhz, Some(1425.0));
        assert!(s.throttle.unwrap().power_capped());
    }

    #[test]
    fn the_real_gb200_scrape_has_power_and_no_energy_counter() {
        let samples = parse_scrape(GB200, "lyris0073", 0.0).unwrap();
        assert_eq!(samples.len(), 1);
        assert_eq!(samples[0].power_w, Some(170.582));
        assert_eq!(samples[0].energy_j, None);
    }

    #[test]
    fn new_names_mig_series_sentinels_and_two_gpus() {
        let text = r#"
DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL{gpu="0",UUID="GPU-a"} 5000
DCGM_FI_DEV_SM_CLOCK_HERTZ{gpu="0",UUID="GPU-a"} 1410000000
DCGM_FI_DEV_BOARD_POWER_WATTS{gpu="1",uuid="GPU-b"} 300.000000
DCGM_FI_DEV_POWER_USAGE{gpu="1",uuid="GPU-b",GPU_I_ID="1",GPU_I_PROFILE="1g.10gb"} 99
DCGM_FI_DEV_GPU_TEMP{gpu="1",uuid="GPU-b"} 9223372036854775794
DCGM_FI_DEV_FB_USED{gpu="1",uuid="GPU-b",err_msg="a \"quoted\", value"} 100
DCGM_FI_DEV_FB_FREE{gpu="1",uuid="GPU-b"} 900
"#;
        let samples = parse_scrape(text, "h", 1.0).unwrap();
        assert_eq!(samples.len(), 2);
        assert_eq!(samples[0].energy_j, Some(5000.0));
        assert_eq!(samples[0].sm_clock_mhz, Some(1410.0));
        assert_eq!(samples[1].power_w, Some(300.0));
        assert_eq!(samples[1].temp_c, None);
        assert_eq!(samples[1].mem_total_mib, Some(1000.0));
    }

    #[test]
    fn a_broken_line_is_an_error_naming_it() {
        let e =
            parse_scrape("# HELP x\nDCGM_FI_DEV_POWER_USAGE{gpu=\"0\" 5\n", "h", 0.0).unwrap_err();
        assert!(e.starts_with("line 2:"), "{e}");
        let e = parse_scrape("DCGM_FI_DEV_POWER_USAGE{gpu=\"0\"} abc\n", "h", 0.0).unwrap_err();
        assert!(e.contains("abc"), "{e}");
    }
}
