//! The samplers of the tools that print one whole document per sample (the DCGM exporter's
//! `/metrics` page, amd-smi's and rocm-smi's JSON): the shell loop a host runs, which frames
//! each document between a start line (the tool and the host's UTC time) and an end line,
//! and that log read back into samples on the run's clock.
//!
//! ```text
//! #orchestrate-sample dcgm 2026/11/26 14:07:54.407
//! DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-..."} 691.120000
//! #orchestrate-end
//! ```

use super::nvidia_smi::{LineError, parse_timestamp};
use super::{Sample, amd, dcgm};

/// The line that opens a sample: `#orchestrate-sample <tool> <YYYY/MM/DD HH:MM:SS.mmm>`.
pub const START: &str = "#orchestrate-sample ";
/// The line that closes it.
pub const END: &str = "#orchestrate-end";

/// The host's UTC time in nvidia-smi's timestamp format (GNU date's `%3N`).
const STAMP: &str = "$(date -u '+%Y/%m/%d %H:%M:%S.%3N')";

/// `text` as one single-quoted shell word.
pub(super) fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// `interval_ms` as `sleep`'s seconds.
fn seconds(interval_ms: u64) -> String {
    format!("{}.{:03}", interval_ms / 1000, interval_ms % 1000)
}

/// The loop that frames `command`'s output as a sample of `tool` every `interval_ms`; a
/// failed run of the command is a frame without samples (its error in the log), not the
/// end of the loop.
fn frame_loop(tool: &str, command: &str, interval_ms: u64) -> String {
    format!(
        "while :; do echo \"{START}{tool} {STAMP}\"; {command} || true; echo; echo '{END}'; sleep {}; done",
        seconds(interval_ms)
    )
}

/// The DCGM exporter's page at `url`, scraped with curl on the host.
pub fn dcgm_script(url: &str, interval_ms: u64) -> String {
    format!(
        "command -v curl >/dev/null 2>&1 || {{ echo 'curl is not on this host: the DCGM exporter cannot be scraped' >&2; exit 127; }}; {}",
        frame_loop(
            "dcgm",
            &format!("curl -sS --max-time 2 {}", quoted(url)),
            interval_ms
        )
    )
}

/// amd-smi's metrics, or rocm-smi's where amd-smi is missing.
pub fn amd_script(interval_ms: u64) -> String {
    format!(
        "if command -v amd-smi >/dev/null 2>&1; then t=amd-smi; set -- {}; elif command -v rocm-smi >/dev/null 2>&1; then t=rocm-smi; set -- {}; else echo 'neither amd-smi nor rocm-smi is on this host' >&2; exit 127; fi; {}",
        amd::AMD_SMI_COMMAND.join(" "),
        amd::ROCM_SMI_COMMAND.join(" "),
        frame_loop("$t", "\"$@\"", interval_ms)
    )
}

/// One document of `tool` as samples stamped `t`.
fn parse(tool: &str, body: &str, host: &str, t: f64) -> Result<Vec<Sample>, String> {
    match tool {
        "dcgm" => dcgm::parse_scrape(body, host, t),
        "amd-smi" => amd::parse_amd_smi(body, host, t),
        "rocm-smi" => amd::parse_rocm_smi(body, host, t),
        other => Err(format!("a sample of an unknown tool `{other}`")),
    }
}

/// An open frame: its tool, time on the run's clock, first line and body.
struct Frame {
    tool: String,
    t: f64,
    line: usize,
    body: String,
}

/// A framed log read back: the samples of every closed frame on the run's clock (`origin`,
/// UTC microseconds since 1970, is 0), and what did not read. Lines starting with `own`
/// (orchestrate's) are skipped; a frame the stop cut short (the log's last, not closed) is
/// dropped; a frame with no GPU in it is an error.
pub fn read(text: &str, host: &str, origin: i64, own: &str) -> (Vec<Sample>, Vec<LineError>) {
    let mut samples = Vec::new();
    let mut errors = Vec::new();
    let mut open: Option<Frame> = None;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if let Some(rest) = line.strip_prefix(START) {
            if let Some(f) = open.take() {
                errors.push(LineError {
                    line: f.line,
                    message: "a sample with no end line".to_string(),
                });
            }
            let (tool, stamp) = rest.split_once(' ').unwrap_or((rest, ""));
            match parse_timestamp(stamp) {
                Some(us) => {
                    open = Some(Frame {
                        tool: tool.to_string(),
                        t: (us - origin) as f64 / 1e6,
                        line: n,
                        body: String::new(),
                    });
                }
                None => errors.push(LineError {
                    line: n,
                    message: format!("`{stamp}` is not YYYY/MM/DD HH:MM:SS.mmm"),
                }),
            }
        } else if line.trim_end() == END {
            let Some(f) = open.take() else {
                errors.push(LineError {
                    line: n,
                    message: "an end line with no sample open".to_string(),
                });
                continue;
            };
            match parse(&f.tool, &f.body, host, f.t) {
                Ok(read) if read.is_empty() => errors.push(LineError {
                    line: f.line,
                    message: format!(
                        "a {} sample with no GPU in it: `{}`",
                        f.tool,
                        f.body.lines().find(|l| !l.trim().is_empty()).unwrap_or("")
                    ),
                }),
                Ok(read) => samples.extend(read),
                Err(message) => errors.push(LineError {
                    line: f.line,
                    message: format!("{}: {message}", f.tool),
                }),
            }
        } else if line.starts_with(own) {
            continue;
        } else if let Some(f) = open.as_mut() {
            f.body.push_str(line);
            f.body.push('\n');
        } else if !line.trim().is_empty() {
            errors.push(LineError {
                line: n,
                message: format!("outside any sample: `{}`", line.trim()),
            });
        }
    }
    (samples, errors)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::figures::{EnergySource, point_figures};

    const DCGM: &str = include_str!("../../tests/fixtures/telemetry/dcgm-h200-written.txt");
    const AMD: &str =
        include_str!("../../tests/fixtures/telemetry/amd-smi-mi300x-written-v26.json");

    fn frame(tool: &str, stamp: &str, body: &str) -> String {
        format!("{START}{tool} 2026/11/26 10:00:{stamp}\n{body}\n{END}\n")
    }

    fn origin() -> i64 {
        parse_timestamp("2026/11/26 10:00:00.000").unwrap()
    }

    #[test]
    fn the_scripts_frame_each_sample_and_name_the_tool() {
        let d = dcgm_script("http://localhost:9400/metrics", 500);
        assert!(
            d.contains("curl -sS --max-time 2 'http://localhost:9400/metrics' || true"),
            "{d}"
        );
        assert!(
            d.contains("echo \"#orchestrate-sample dcgm $(date -u"),
            "{d}"
        );
        assert!(d.ends_with("sleep 0.500; done"), "{d}");
        let a = amd_script(1250);
        assert!(
            a.contains("t=amd-smi; set -- amd-smi metric -p -u -m -t -c -E --json;"),
            "{a}"
        );
        assert!(a.contains("t=rocm-smi; set -- rocm-smi --showpower"), "{a}");
        assert!(a.contains("#orchestrate-sample $t "), "{a}");
        assert!(a.ends_with("sleep 1.250; done"), "{a}");
        assert_eq!(quoted("it's"), r"'it'\''s'");
    }

    #[test]
    fn frames_of_each_tool_read_on_the_run_clock_and_a_cut_frame_is_dropped() {
        let text = format!(
            "[orchestrate] started process group 3\n{}{}{START}dcgm 2026/11/26 10:00:03.000\nDCGM_FI_DEV_POWER",
            frame("dcgm", "01.500", DCGM),
            frame("amd-smi", "02.000", AMD),
        );
        let (samples, errors) = read(&text, "n1", origin(), "[orchestrate]");
        assert_eq!(errors, Vec::new());
        assert_eq!(samples.len(), 2);
        assert_eq!(samples[0].t, 1.5);
        assert_eq!(samples[0].gpu.host, "n1");
        assert_eq!(samples[0].energy_j, Some(4203318.842));
        assert_eq!(samples[1].t, 2.0);
        assert_eq!(samples[1].power_w, Some(742.0));
    }

    #[test]
    fn an_error_in_place_of_a_sample_and_stray_lines_are_errors_with_their_line() {
        let text = format!(
            "stray\n{}{}",
            frame(
                "dcgm",
                "01.000",
                "curl: (7) Failed to connect to localhost port 9400"
            ),
            frame("rocm-smi", "02.000", "not json"),
        );
        let (samples, errors) = read(&text, "n1", origin(), "[orchestrate]");
        assert!(samples.is_empty());
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert_eq!(errors[0].line, 1);
        assert_eq!(errors[1].line, 2);
        assert!(
            errors[1].message.contains("Failed to connect"),
            "{errors:?}"
        );
        assert!(errors[2].message.starts_with("rocm-smi: "), "{errors:?}");
    }

    /// The energy counter of three scrapes (1000, 1500, 2100 J at 0, 1, 2 s) gives the
    /// window's energy from the counter, interpolated at its edges, whatever the power says.
    #[test]
    fn energy_comes_from_the_counter_exactly_where_the_tool_has_one() {
        let scrape = |mj: u64| {
            format!(
                "DCGM_FI_DEV_POWER_USAGE{{gpu=\"0\",UUID=\"GPU-a\"}} 100.000000\nDCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{gpu=\"0\",UUID=\"GPU-a\"}} {mj}\n"
            )
        };
        let text = [(0, 1_000_000), (1, 1_500_000), (2, 2_100_000)]
            .iter()
            .map(|(s, mj)| frame("dcgm", &format!("{s:02}.000"), &scrape(*mj)))
            .collect::<String>();
        let (samples, errors) = read(&text, "n1", origin(), "[orchestrate]");
        assert_eq!(errors, Vec::new());
        let f = point_figures(
            &samples,
            &|_: &crate::telemetry::GpuId| None,
            0.5,
            2.0,
            100,
            4,
        )
        .unwrap();
        // 2100 - (1000 + 500 / 2) = 850 J; integrated power would say 150 J.
        assert_eq!(f.source, EnergySource::Counter);
        assert_eq!(f.energy_j, 850.0);
        assert_eq!(f.joules_per_output_token, Some(8.5));
    }
}
