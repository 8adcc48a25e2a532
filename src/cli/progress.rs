//! The live progress view on stderr: one line per deployment/point event, and a progress
//! line redrawn in place while a point runs (only when stderr is a terminal; otherwise a
//! line every few seconds so CI logs stay readable).

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::runner::{Event, Reporter};

/// Draws events on stderr.
pub(super) struct TerminalReporter {
    tty: bool,
    last_line: Mutex<Option<Instant>>,
    quiet: bool,
    /// Put before every line (`[task] `) when several tasks share the terminal.
    prefix: String,
}

impl TerminalReporter {
    pub(super) fn new(quiet: bool) -> Self {
        Self {
            tty: std::io::stderr().is_terminal(),
            last_line: Mutex::new(None),
            quiet,
            prefix: String::new(),
        }
    }

    /// Start every line with `[name] ` (several tasks running at once).
    pub(super) fn with_prefix(mut self, name: &str) -> Self {
        self.prefix = format!("[{name}] ");
        self
    }

    fn line(&self, text: &str) {
        let mut err = std::io::stderr().lock();
        if self.tty {
            let _ = write!(err, "\r\x1b[2K");
        }
        let _ = writeln!(err, "{}{text}", self.prefix);
    }
}

impl Reporter for TerminalReporter {
    fn event(&self, event: &Event<'_>) {
        if self.quiet {
            return;
        }
        match event {
            Event::RunStarted {
                run_dir,
                deployments,
                points,
            } => self.line(&format!(
                "run: {points} point(s) on {deployments} deployment(s) -> {}",
                run_dir.display()
            )),
            Event::DeploymentStarting { id } => self.line(&format!("[{id}] starting")),
            Event::DeploymentProgress { id, text } => self.line(&format!("[{id}] {text}")),
            Event::DeploymentReady { id, after } => {
                self.line(&format!("[{id}] ready after {:.1}s", after.as_secs_f64()));
            }
            Event::DeploymentFailed { id, error, kept } => {
                let headline = Event::failed_headline(*kept);
                self.line(&format!("[{id}] {headline}: {error}"));
            }
            Event::PointStarted {
                ordinal,
                total,
                id,
                repetition,
            } => {
                let rep = if *repetition > 1 {
                    format!(" (repetition {repetition})")
                } else {
                    String::new()
                };
                self.line(&format!("[point {ordinal}/{total}] {id}{rep}"));
            }
            Event::PointProgress {
                ordinal,
                total,
                id,
                done,
                failed,
                in_flight,
                output_tokens_per_s,
            } => {
                let text = format!(
                    "[point {ordinal}/{total}] {id}: {done} done, {failed} failed, {in_flight} in flight, {output_tokens_per_s:.0} tok/s"
                );
                let mut last = self.last_line.lock().unwrap_or_else(|p| p.into_inner());
                if self.tty {
                    let mut err = std::io::stderr().lock();
                    let _ = write!(err, "\r\x1b[2K{}{text}", self.prefix);
                    let _ = err.flush();
                } else if last.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                    *last = Some(Instant::now());
                    drop(last);
                    self.line(&text);
                }
            }
            Event::PointFinished {
                ordinal,
                total,
                id,
                status,
                error,
            } => {
                let why = error.map(|e| format!(": {e}")).unwrap_or_default();
                self.line(&format!(
                    "[point {ordinal}/{total}] {id}: {}{why}",
                    serde_json::to_value(status)
                        .unwrap_or_default()
                        .as_str()
                        .unwrap_or("?")
                ));
            }
            Event::RunFinished { status, run_dir } => self.line(&format!(
                "run {}: {}",
                serde_json::to_value(status)
                    .unwrap_or_default()
                    .as_str()
                    .unwrap_or("?"),
                run_dir.display()
            )),
        }
    }
}
