//! What the sampler runs and how its output is read back, without running anything: the
//! options of a run's GPU telemetry (`orchestrate run --telemetry`, the task's `telemetry:`),
//! the shell command each host runs (nvidia-smi's CSV query loop, the framed loops of the
//! DCGM exporter and amd-smi/rocm-smi, or a replacement that prints the same), and the
//! sampler's log (the tool's lines among the lines orchestrate writes there) read into
//! samples. Starting and stopping the command beside a point is the runner's.

use super::nvidia_smi::{LineError, Query};
use super::{Sample, framed};
pub use crate::spec::GpuTool;

/// The interval when none is given: nvidia-smi's `power.draw` is a 1 s average on Ampere and
/// newer, so two samples a second see every change.
pub const DEFAULT_INTERVAL_MS: u64 = 500;

/// Where the DCGM exporter serves its page by default (its `-a :9400`).
pub const DEFAULT_DCGM_URL: &str = "http://localhost:9400/metrics";

/// The prefix of the lines orchestrate itself writes into a process's log.
const OWN_LINE: &str = "[orchestrate]";

/// GPU telemetry of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetryOptions {
    /// The tool that samples each host.
    pub tool: GpuTool,
    /// Milliseconds between two samples.
    pub interval_ms: u64,
    /// The DCGM exporter's page on each host (`tool: dcgm`).
    pub dcgm_url: String,
    /// Replaces the tool's command (run with `sh -c` on each host); it must print what the
    /// tool's sampler prints: for nvidia-smi its lines for
    /// [`super::nvidia_smi::DEFAULT_FIELDS`] with `--format=csv,noheader,nounits`, one per
    /// GPU per sample; for the others the framed documents of [`framed`].
    pub command: Option<String>,
    /// Dollars per GPU-hour for every host (`--price-per-gpu-hour`), over the hosts file's.
    pub price_per_gpu_hour: Option<f64>,
}

impl Default for TelemetryOptions {
    fn default() -> Self {
        Self {
            tool: GpuTool::default(),
            interval_ms: DEFAULT_INTERVAL_MS,
            dcgm_url: DEFAULT_DCGM_URL.to_string(),
            command: None,
            price_per_gpu_hour: None,
        }
    }
}

impl TelemetryOptions {
    /// The tool's name, for notes (`nvidia-smi`, `the DCGM exporter`, `amd-smi/rocm-smi`,
    /// or `the telemetry command`).
    pub fn tool(&self) -> &'static str {
        match (&self.command, self.tool) {
            (Some(_), _) => "the telemetry command",
            (None, GpuTool::NvidiaSmi) => "nvidia-smi",
            (None, GpuTool::Dcgm) => "the DCGM exporter",
            (None, GpuTool::AmdSmi) => "amd-smi/rocm-smi",
        }
    }

    /// The shell script a host runs: the replacement command, else nvidia-smi's query loop
    /// (`exec`ed, so stopping the script stops the tool), or the framed loop of the other
    /// tools. Run it with `TZ=UTC` ([`Self::env`]): nvidia-smi prints local time without a
    /// zone.
    pub fn script(&self) -> String {
        match (&self.command, self.tool) {
            (Some(command), _) => command.clone(),
            (None, GpuTool::NvidiaSmi) => {
                let argv = Query::default_fields().command(self.interval_ms);
                format!("exec {}", argv.join(" "))
            }
            (None, GpuTool::Dcgm) => framed::dcgm_script(&self.dcgm_url, self.interval_ms),
            (None, GpuTool::AmdSmi) => framed::amd_script(self.interval_ms),
        }
    }

    /// A shell command that prints why a host cannot be sampled (the tool missing, the DCGM
    /// exporter not answering) and nothing when it can; `None` with a replacement command
    /// (it is its own check).
    pub fn probe(&self) -> Option<String> {
        if self.command.is_some() {
            return None;
        }
        Some(match self.tool {
            GpuTool::NvidiaSmi => {
                "command -v nvidia-smi >/dev/null 2>&1 || echo 'nvidia-smi is not on this host'"
                    .to_string()
            }
            GpuTool::Dcgm => format!(
                "if ! command -v curl >/dev/null 2>&1; then echo 'curl is not on this host (it scrapes the DCGM exporter)'; elif ! curl -sf --max-time 3 -o /dev/null {url}; then echo 'the DCGM exporter does not answer at '{url}; fi",
                url = framed::quoted(&self.dcgm_url)
            ),
            GpuTool::AmdSmi => "command -v amd-smi >/dev/null 2>&1 || command -v rocm-smi >/dev/null 2>&1 || echo 'neither amd-smi nor rocm-smi is on this host'".to_string(),
        })
    }

    /// The sampler's log of `host` read back ([`read_log`] for nvidia-smi, [`framed::read`]
    /// for the others), `origin` (UTC microseconds since 1970) being 0 on the run's clock.
    pub fn read_log(&self, text: &str, host: &str, origin: i64) -> (Vec<Sample>, Vec<LineError>) {
        match self.tool {
            GpuTool::NvidiaSmi => read_log(text, host, origin),
            GpuTool::Dcgm | GpuTool::AmdSmi => framed::read(text, host, origin, OWN_LINE),
        }
    }

    /// The sampler's environment: nvidia-smi's timestamps in UTC.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![("TZ".to_string(), "UTC".to_string())]
    }
}

/// What `orchestrate run`'s flags say about GPU telemetry; each flag given wins over the
/// task's `telemetry:`, which wins over the defaults.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TelemetryFlags {
    /// `--telemetry`, or any flag that implies it.
    pub on: bool,
    /// `--no-telemetry`: off whatever the task says.
    pub off: bool,
    pub tool: Option<GpuTool>,
    pub interval_ms: Option<u64>,
    pub command: Option<String>,
    pub price_per_gpu_hour: Option<f64>,
}

impl TelemetryFlags {
    /// The telemetry of a run of a task whose `telemetry:` is `task`; `None`: off.
    pub fn resolve(&self, task: Option<&crate::plan::TelemetryPlan>) -> Option<TelemetryOptions> {
        if self.off || !(self.on || task.is_some_and(|t| t.enabled)) {
            return None;
        }
        let defaults = TelemetryOptions::default();
        Some(TelemetryOptions {
            tool: self
                .tool
                .or(task.and_then(|t| t.tool))
                .unwrap_or(defaults.tool),
            interval_ms: self
                .interval_ms
                .or(task.and_then(|t| t.interval_ms))
                .unwrap_or(defaults.interval_ms),
            dcgm_url: task
                .and_then(|t| t.dcgm_url.clone())
                .unwrap_or(defaults.dcgm_url),
            command: self
                .command
                .clone()
                .or_else(|| task.and_then(|t| t.command.clone())),
            price_per_gpu_hour: self.price_per_gpu_hour,
        })
    }
}

/// A task's `telemetry:` in one line for `orchestrate plan`: what samples the GPUs, how
/// often, and that a host without the tool is a note (`run`'s flags may change it).
pub fn describe(task: &crate::plan::TelemetryPlan) -> String {
    if !task.enabled {
        return "GPU telemetry: off (telemetry.enabled: false)".to_string();
    }
    let tool = match &task.command {
        Some(c) => format!(
            "`{c}` (in place of {})",
            task.tool.unwrap_or_default().name()
        ),
        None => task.tool.unwrap_or_default().name().to_string(),
    };
    let every = crate::units::format_duration(std::time::Duration::from_millis(
        task.interval_ms.unwrap_or(DEFAULT_INTERVAL_MS),
    ));
    format!(
        "GPU telemetry: {tool} every {every} on each host of a deployment (a host without it is a warning when the run starts and a note in its points, not a failure)"
    )
}

/// An nvidia-smi sampler's log read back: the tool's lines as samples of `host`, `origin` (UTC
/// microseconds since 1970) being 0 on the run's clock. Orchestrate's own lines are skipped;
/// every other line that does not read (the tool's error messages, a line cut short by the
/// stop) is returned beside the samples.
pub fn read_log(text: &str, host: &str, origin: i64) -> (Vec<Sample>, Vec<LineError>) {
    let query = Query::default_fields();
    let mut samples = Vec::new();
    let mut errors = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() || line.starts_with(OWN_LINE) {
            continue;
        }
        match query.parse_line(line, host, origin) {
            Ok(s) => samples.push(s),
            Err(message) => errors.push(LineError {
                line: i + 1,
                message: format!("{message}: `{}`", line.trim()),
            }),
        }
    }
    (samples, errors)
}

#[cfg(test)]
mod tests {
    use super::super::nvidia_smi::parse_timestamp;
    use super::*;

    const IDLE: &str =
        include_str!("../../tests/fixtures/telemetry/nvidia-smi-h200-default-query-loop-500ms.csv");

    #[test]
    fn the_default_script_is_the_nvidia_smi_query_loop_at_the_interval() {
        let options = TelemetryOptions {
            interval_ms: 250,
            ..TelemetryOptions::default()
        };
        let script = options.script();
        assert!(script.starts_with("exec nvidia-smi --query-gpu=timestamp,index,uuid,"));
        assert!(
            script.ends_with(" --format=csv,noheader,nounits -lms 250"),
            "{script}"
        );
        assert_eq!(options.tool(), "nvidia-smi");
        let replaced = TelemetryOptions {
            command: Some("sh replay.sh".into()),
            ..TelemetryOptions::default()
        };
        assert_eq!(replaced.script(), "sh replay.sh");
        assert_eq!(options.env(), vec![("TZ".to_string(), "UTC".to_string())]);
    }

    #[test]
    fn flags_win_over_the_task_which_wins_over_the_defaults() {
        let task = crate::plan::TelemetryPlan {
            enabled: true,
            tool: Some(GpuTool::Dcgm),
            interval_ms: Some(250),
            dcgm_url: Some("http://x:1/metrics".into()),
            command: None,
        };
        let none = TelemetryFlags::default();
        assert_eq!(none.resolve(None), None);
        let from_task = none.resolve(Some(&task)).unwrap();
        assert_eq!(
            (
                from_task.tool,
                from_task.interval_ms,
                from_task.dcgm_url.as_str()
            ),
            (GpuTool::Dcgm, 250, "http://x:1/metrics")
        );
        assert_eq!(
            describe(&task),
            "GPU telemetry: dcgm every 250ms on each host of a deployment (a host without it is a warning when the run starts and a note in its points, not a failure)"
        );
        let flags = TelemetryFlags {
            tool: Some(GpuTool::AmdSmi),
            interval_ms: Some(1000),
            ..TelemetryFlags::default()
        };
        let both = flags.resolve(Some(&task)).unwrap();
        assert_eq!((both.tool, both.interval_ms), (GpuTool::AmdSmi, 1000));
        // `enabled: false` is off unless a flag turns it on; `--no-telemetry` is off.
        let disabled = crate::plan::TelemetryPlan {
            enabled: false,
            ..task.clone()
        };
        assert_eq!(none.resolve(Some(&disabled)), None);
        let on = TelemetryFlags {
            on: true,
            ..TelemetryFlags::default()
        };
        assert_eq!(on.resolve(Some(&disabled)).unwrap().tool, GpuTool::Dcgm);
        assert_eq!(on.resolve(None), Some(TelemetryOptions::default()));
        let off = TelemetryFlags { off: true, ..on };
        assert_eq!(off.resolve(Some(&task)), None);
    }

    #[test]
    fn each_tool_has_its_script_and_its_reader() {
        let dcgm = TelemetryOptions {
            tool: GpuTool::Dcgm,
            dcgm_url: "http://n1:9401/metrics".into(),
            ..TelemetryOptions::default()
        };
        assert!(
            dcgm.script()
                .contains("curl -sS --max-time 2 'http://n1:9401/metrics'")
        );
        assert_eq!(dcgm.tool(), "the DCGM exporter");
        assert!(
            dcgm.probe()
                .unwrap()
                .contains("curl -sf --max-time 3 -o /dev/null 'http://n1:9401/metrics'")
        );
        let amd = TelemetryOptions {
            tool: GpuTool::AmdSmi,
            ..TelemetryOptions::default()
        };
        assert!(amd.probe().unwrap().contains("command -v rocm-smi"));
        let replaced = TelemetryOptions {
            command: Some("true".into()),
            ..amd.clone()
        };
        assert_eq!(replaced.probe(), None);
        assert!(amd.script().contains("elif command -v rocm-smi"));
        assert_eq!(amd.tool(), "amd-smi/rocm-smi");
        // The framed reader for the framed tools, nvidia-smi's for nvidia-smi.
        let text = "#orchestrate-sample dcgm 2026/11/26 10:00:01.000\nDCGM_FI_DEV_POWER_USAGE{gpu=\"0\"} 5\n#orchestrate-end\n";
        let origin = parse_timestamp("2026/11/26 10:00:00.000").unwrap();
        let (samples, errors) = dcgm.read_log(text, "h", origin);
        assert_eq!((samples.len(), errors.len()), (1, 0));
        assert_eq!(samples[0].t, 1.0);
        let (samples, errors) = TelemetryOptions::default().read_log(text, "h", origin);
        assert_eq!((samples.len(), errors.len()), (0, 3));
    }

    #[test]
    fn a_log_reads_the_tool_lines_and_keeps_the_rest_as_errors() {
        let first = IDLE.lines().next().unwrap();
        let origin = parse_timestamp(first.split(", ").next().unwrap()).unwrap();
        let text = format!(
            "[orchestrate] started process group 12: sh -e -c 'exec nvidia-smi'\n{IDLE}sh: 1: nvidia-smi: not found\n[orchestrate] process group 12 leader exited: exit code 127\n"
        );
        let (samples, errors) = read_log(&text, "gpu1", origin);
        assert_eq!(samples.len(), IDLE.lines().count());
        assert_eq!(samples[0].t, 0.0);
        assert_eq!(samples[0].gpu.host, "gpu1");
        assert!(samples[0].power_w.is_some());
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].message.contains("nvidia-smi: not found"),
            "{:?}",
            errors[0]
        );
    }
}
