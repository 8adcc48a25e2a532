//! What the sampler runs and how its output is read back, without running anything: the
//! options of a run's GPU telemetry (`orchestrate run --telemetry`), the shell command each
//! host runs (nvidia-smi's CSV query loop, or a replacement that prints the same lines), and
//! the sampler's log (the tool's lines among the lines orchestrate writes there) read into
//! samples. Starting and stopping the command beside a point is the runner's.

use super::Sample;
use super::nvidia_smi::{LineError, Query};

/// The interval when none is given: nvidia-smi's `power.draw` is a 1 s average on Ampere and
/// newer, so two samples a second see every change.
pub const DEFAULT_INTERVAL_MS: u64 = 500;

/// The prefix of the lines orchestrate itself writes into a process's log.
const OWN_LINE: &str = "[orchestrate]";

/// GPU telemetry of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetryOptions {
    /// Milliseconds between two samples.
    pub interval_ms: u64,
    /// Replaces the tool's command (run with `sh -c` on each host); it must print what
    /// nvidia-smi prints for [`super::nvidia_smi::DEFAULT_FIELDS`] with
    /// `--format=csv,noheader,nounits`, one line per GPU per sample.
    pub command: Option<String>,
    /// Dollars per GPU-hour for every host (`--price-per-gpu-hour`), over the hosts file's.
    pub price_per_gpu_hour: Option<f64>,
}

impl Default for TelemetryOptions {
    fn default() -> Self {
        Self {
            interval_ms: DEFAULT_INTERVAL_MS,
            command: None,
            price_per_gpu_hour: None,
        }
    }
}

impl TelemetryOptions {
    /// The tool's name, for notes (`nvidia-smi`, or `the telemetry command`).
    pub fn tool(&self) -> &'static str {
        match self.command {
            Some(_) => "the telemetry command",
            None => "nvidia-smi",
        }
    }

    /// The shell script a host runs: the replacement command, else nvidia-smi's query loop
    /// (`exec`ed, so stopping the script stops the tool). Run it with `TZ=UTC`
    /// ([`Self::env`]): nvidia-smi prints local time without a zone.
    pub fn script(&self) -> String {
        match &self.command {
            Some(command) => command.clone(),
            None => {
                let argv = Query::default_fields().command(self.interval_ms);
                format!("exec {}", argv.join(" "))
            }
        }
    }

    /// The sampler's environment: nvidia-smi's timestamps in UTC.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![("TZ".to_string(), "UTC".to_string())]
    }
}

/// A sampler's log read back: the tool's lines as samples of `host`, `origin` (UTC
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
