//! nvidia-smi's CSV query mode (`--query-gpu=... --format=csv[,noheader][,nounits]`): the
//! command we ask for, and its lines read by position in the field list we asked for (the
//! header prints canonical names, not the aliases asked for, so it is never trusted).

use super::{GpuId, Sample, Throttle, number};

/// A field of the query we know how to read. Other fields may be asked for and are skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Timestamp,
    Index,
    Uuid,
    PowerDraw,
    Utilization,
    MemoryUsed,
    MemoryTotal,
    Temperature,
    SmClock,
    ThrottleReasons,
    /// Asked for but not read into the sample (name, bus id, limits, ...).
    Other,
}

impl Field {
    /// The field a `--query-gpu` name (or alias) reads into.
    pub fn of_name(name: &str) -> Field {
        match name.trim() {
            "timestamp" => Field::Timestamp,
            "index" => Field::Index,
            "uuid" | "gpu_uuid" => Field::Uuid,
            "power.draw" => Field::PowerDraw,
            "utilization.gpu" => Field::Utilization,
            "memory.used" => Field::MemoryUsed,
            "memory.total" => Field::MemoryTotal,
            "temperature.gpu" => Field::Temperature,
            "clocks.sm" | "clocks.current.sm" => Field::SmClock,
            "clocks_event_reasons.active" | "clocks_throttle_reasons.active" => {
                Field::ThrottleReasons
            }
            _ => Field::Other,
        }
    }
}

/// The fields the sampler asks for, in order. `clocks_throttle_reasons.active` is the
/// spelling older drivers accept too (580 accepts both).
pub const DEFAULT_FIELDS: &[&str] = &[
    "timestamp",
    "index",
    "uuid",
    "power.draw",
    "utilization.gpu",
    "memory.used",
    "memory.total",
    "temperature.gpu",
    "clocks.sm",
    "clocks_throttle_reasons.active",
];

/// A query: the field names asked for, in the order nvidia-smi prints them.
#[derive(Debug, Clone)]
pub struct Query {
    names: Vec<String>,
    fields: Vec<Field>,
}

/// Why one line of output could not be read.
#[derive(Debug, Clone, PartialEq)]
pub struct LineError {
    /// 1-based line number in the output.
    pub line: usize,
    pub message: String,
}

impl Query {
    pub fn new<S: AsRef<str>>(names: &[S]) -> Query {
        let names: Vec<String> = names
            .iter()
            .map(|n| n.as_ref().trim().to_string())
            .collect();
        let fields = names.iter().map(|n| Field::of_name(n)).collect();
        Query { names, fields }
    }

    /// The sampler's default query.
    pub fn default_fields() -> Query {
        Query::new(DEFAULT_FIELDS)
    }

    /// The command line (program first) that samples every `interval_ms` milliseconds.
    pub fn command(&self, interval_ms: u64) -> Vec<String> {
        vec![
            "nvidia-smi".to_string(),
            format!("--query-gpu={}", self.names.join(",")),
            "--format=csv,noheader,nounits".to_string(),
            "-lms".to_string(),
            interval_ms.to_string(),
        ]
    }

    /// Read one line. `origin` is the host-local time (microseconds, read as if UTC; see
    /// `parse_timestamp`) that is 0 on the run's clock; a query without `timestamp` gets
    /// time 0 and must be stamped by the caller.
    pub fn parse_line(&self, line: &str, host: &str, origin: i64) -> Result<Sample, String> {
        let cells: Vec<&str> = line.split(", ").collect();
        if cells.len() != self.fields.len() {
            return Err(format!(
                "{} fields where the query asked for {}",
                cells.len(),
                self.fields.len()
            ));
        }
        let mut s = Sample {
            gpu: GpuId {
                host: host.to_string(),
                index: None,
                uuid: None,
            },
            ..Sample::default()
        };
        for ((field, name), raw) in self.fields.iter().zip(&self.names).zip(cells) {
            let cell = strip_unit(raw.trim());
            let absent = cell.starts_with('[');
            let num = || number(cell).map_err(|e| format!("field `{name}`: {e}"));
            match field {
                Field::Timestamp => {
                    let us = parse_timestamp(cell).ok_or_else(|| {
                        format!("field `{name}`: `{cell}` is not YYYY/MM/DD HH:MM:SS.mmm")
                    })?;
                    // Subtracted as integers: seconds since 1970 in an f64 lose the
                    // microseconds.
                    s.t = (us - origin) as f64 / 1e6;
                }
                Field::Index => {
                    s.gpu.index =
                        if absent {
                            None
                        } else {
                            Some(cell.parse().map_err(|_| {
                                format!("field `{name}`: `{cell}` is not a GPU index")
                            })?)
                        }
                }
                Field::Uuid => s.gpu.uuid = (!absent).then(|| cell.to_string()),
                Field::PowerDraw => s.power_w = num()?,
                Field::Utilization => s.util_pct = num()?,
                Field::MemoryUsed => s.mem_used_mib = num()?,
                Field::MemoryTotal => s.mem_total_mib = num()?,
                Field::Temperature => s.temp_c = num()?,
                Field::SmClock => s.sm_clock_mhz = num()?,
                Field::ThrottleReasons => {
                    s.throttle = if absent {
                        None
                    } else {
                        let hex = cell.trim_start_matches("0x");
                        Some(Throttle::Nvidia(u64::from_str_radix(hex, 16).map_err(
                            |_| format!("field `{name}`: `{cell}` is not a hex bitmask"),
                        )?))
                    }
                }
                Field::Other => {}
            }
        }
        Ok(s)
    }

    /// Read a whole output: a header line (from `--format=csv`) is skipped, blank lines are
    /// skipped, and a line that does not read (a truncated last line of a killed loop) is
    /// returned as an error beside the samples, never failing the rest.
    pub fn parse_output(
        &self,
        text: &str,
        host: &str,
        origin: i64,
    ) -> (Vec<Sample>, Vec<LineError>) {
        let mut samples = Vec::new();
        let mut errors = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() || (i == 0 && line.starts_with("timestamp,")) {
                continue;
            }
            match self.parse_line(line, host, origin) {
                Ok(s) => samples.push(s),
                Err(message) => errors.push(LineError {
                    line: i + 1,
                    message,
                }),
            }
        }
        (samples, errors)
    }
}

/// A cell without the unit `--format=csv` appends (`79.41 W`, `0 %`, `143771 MiB`).
fn strip_unit(cell: &str) -> &str {
    for unit in [" W", " %", " MiB", " MHz"] {
        if let Some(x) = cell.strip_suffix(unit) {
            return x;
        }
    }
    cell
}

/// nvidia-smi's `timestamp` (`2026/11/26 14:07:45.819`, host-local time, no zone) as
/// microseconds since 1970-01-01 00:00:00 of the same zone. Run the tool under `TZ=UTC` to
/// make it UTC; either way only differences on one host are meaningful.
pub fn parse_timestamp(cell: &str) -> Option<i64> {
    let t = chrono::NaiveDateTime::parse_from_str(cell.trim(), "%Y/%m/%d %H:%M:%S%.f").ok()?;
    Some(t.and_utc().timestamp_micros())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOOP: &str =
        include_str!("../../tests/fixtures/telemetry/nvidia-smi-h200-loop-500ms.csv");
    const IDLE_UNITS: &str =
        include_str!("../../tests/fixtures/telemetry/nvidia-smi-h200-idle-units.csv");
    const IDLE_22: &str =
        include_str!("../../tests/fixtures/telemetry/nvidia-smi-h200-idle-nounits-22fields.csv");
    const IDLE_22_FIELDS: &str = include_str!(
        "../../tests/fixtures/telemetry/nvidia-smi-h200-idle-nounits-22fields.fields.txt"
    );
    /// The field list of the recorded loop, as asked for.
    const LOOP_FIELDS: &str = "timestamp,index,uuid,name,pci.bus_id,power.draw,power.draw.instant,power.draw.average,power.limit,enforced.power.limit,utilization.gpu,utilization.memory,memory.used,memory.total,temperature.gpu,clocks.sm,clocks.max.sm,clocks_event_reasons.active";

    fn loop_query() -> Query {
        Query::new(&LOOP_FIELDS.split(',').collect::<Vec<_>>())
    }

    /// The sampler's own query on a real H100 (the device check of issue #26): every row
    /// reads with the default fields, on the run's clock.
    #[test]
    fn the_real_h100_default_query_reads_with_the_default_fields() {
        let text = include_str!(
            "../../tests/fixtures/telemetry/nvidia-smi-h100-default-query-loop-500ms.csv"
        );
        let origin = parse_timestamp("2026/11/26 18:38:09.000").unwrap();
        let (samples, errors) = Query::default_fields().parse_output(text, "h100", origin);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(samples.len(), 10);
        assert!((samples[0].t - 0.2).abs() < 1e-9, "{}", samples[0].t);
        assert!(samples.windows(2).all(|w| w[1].t > w[0].t));
        assert_eq!(samples[0].power_w, Some(72.27));
        for s in &samples {
            assert_eq!(s.gpu.index, Some(0));
            assert_eq!(
                s.gpu.uuid.as_deref(),
                Some("GPU-30a7f9ef-5e84-710e-40d1-bfaa04c6f4ac")
            );
            let w = s.power_w.unwrap();
            // Idle (72 W), then a matmul load starting; an H100 SXM is capped at 700 W.
            assert!((60.0..=700.0).contains(&w), "H100 power {w}");
            assert_eq!(s.mem_total_mib, Some(81559.0));
        }
    }

    #[test]
    fn the_real_h200_loop_reads_row_by_row() {
        let origin = parse_timestamp("2026/11/26 14:07:45.000").unwrap();
        let (samples, errors) = loop_query().parse_output(LOOP, "gpu-node", origin);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(samples.len(), 28);
        let first = &samples[0];
        assert_eq!(first.t, 0.819);
        assert_eq!(first.gpu.index, Some(0));
        assert_eq!(
            first.gpu.uuid.as_deref(),
            Some("GPU-fafb1c12-674e-2915-c04b-32bd59675461")
        );
        assert_eq!(first.power_w, Some(79.42));
        assert_eq!(first.mem_total_mib, Some(143771.0));
        assert_eq!(first.throttle, Some(Throttle::Nvidia(1)));
        // 14:07:54.407: the loaded row the notes quote (power.draw, not the instant 741.87 W).
        let loaded = samples.iter().find(|s| s.t == 9.407).unwrap();
        assert_eq!(loaded.power_w, Some(691.12));
        assert_eq!(loaded.util_pct, Some(100.0));
        assert_eq!(loaded.mem_used_mib, Some(1011.0));
        assert_eq!(loaded.temp_c, Some(58.0));
        assert_eq!(loaded.sm_clock_mhz, Some(1425.0));
        assert!(loaded.throttle.unwrap().power_capped());
        assert!(samples.windows(2).all(|w| w[1].t > w[0].t));
    }

    #[test]
    fn the_units_format_reads_the_same_and_skips_its_header() {
        let (samples, errors) = loop_query().parse_output(IDLE_UNITS, "h", 0);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(samples.len(), 1);
        assert_eq!(samples[0].power_w, Some(79.41));
        assert_eq!(samples[0].util_pct, Some(0.0));
        assert_eq!(samples[0].mem_total_mib, Some(143771.0));
        assert_eq!(samples[0].sm_clock_mhz, Some(345.0));
        assert_eq!(samples[0].temp_c, Some(36.0));
    }

    #[test]
    fn the_22_field_recording_reads_by_position_with_string_flags_skipped() {
        let q = Query::new(&IDLE_22_FIELDS.trim().split(',').collect::<Vec<_>>());
        let (samples, errors) = q.parse_output(IDLE_22, "h", 0);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(samples[0].power_w, Some(79.72));
        assert_eq!(samples[0].throttle, Some(Throttle::Nvidia(1)));
    }

    #[test]
    fn absent_cells_a_truncated_line_and_a_bad_number_are_told_apart() {
        let q = Query::default_fields();
        let text = "2026/11/26 14:07:45.819, 1, GPU-a, [N/A], [Not Supported], 0, 80000, 40, 1410, [N/A]\n\
                    2026/11/26 14:07:46.319, 1, GPU-a, 12x, 5, 0, 80000, 40, 1410, 0x4\n\
                    2026/11/26 14:07:46.819, 1, GPU-a, 300.5, 5";
        let (samples, errors) = q.parse_output(text, "h", 0);
        assert_eq!(samples.len(), 1);
        assert_eq!(samples[0].power_w, None);
        assert_eq!(samples[0].util_pct, None);
        assert_eq!(samples[0].throttle, None);
        assert_eq!(samples[0].mem_used_mib, Some(0.0));
        assert_eq!(errors.len(), 2);
        assert_eq!(errors[0].line, 2);
        assert!(
            errors[0].message.contains("power.draw"),
            "{}",
            errors[0].message
        );
        assert_eq!(errors[1].line, 3);
        assert!(
            errors[1].message.contains("5 fields"),
            "{}",
            errors[1].message
        );
    }

    #[test]
    fn the_command_asks_for_the_fields_in_order() {
        let cmd = Query::default_fields().command(500);
        assert_eq!(cmd[0], "nvidia-smi");
        assert!(cmd[1].starts_with("--query-gpu=timestamp,index,uuid,power.draw,"));
        assert_eq!(cmd[2], "--format=csv,noheader,nounits");
        assert_eq!(cmd[3..], ["-lms", "500"]);
    }
}
