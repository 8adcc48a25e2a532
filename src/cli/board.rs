//! One live progress view for several tasks at once (`orchestrate run a.yaml b.yaml` on a
//! terminal): a block with one line per task (task, hosts, point i/n, done/failed, tok/s,
//! state) redrawn in place, with finished and failed points, failed deployments and run ends
//! printed above it. Not on a terminal, `run` keeps the prefixed lines of `progress`.
//!
//! The view is pure (`Board::apply` turns an event into lines to print and a new row,
//! `Board::frame` renders the block); `BoardReporter` draws it on stderr.

use std::io::Write;
use std::sync::{Arc, Mutex};

use crate::runner::{Event, Reporter};

/// One task's line.
#[derive(Debug, Clone, Default, PartialEq)]
struct Row {
    task: String,
    hosts: String,
    point: Option<(usize, usize)>,
    done: u64,
    failed: u64,
    tokens_per_s: f64,
    state: String,
}

#[derive(Debug, Default)]
struct State {
    rows: Vec<Row>,
    /// Lines of the block currently on screen (to move the cursor back over).
    drawn: usize,
}

/// The combined view of several tasks.
#[derive(Debug)]
pub(super) struct Board {
    state: Mutex<State>,
}

fn status_name<T: serde::Serialize>(status: &T) -> String {
    serde_json::to_value(status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "?".to_string())
}

impl Board {
    /// A board with one row per `(task, hosts)`, in this order.
    pub(super) fn new(tasks: &[(String, String)]) -> Arc<Self> {
        let rows = tasks
            .iter()
            .map(|(task, hosts)| Row {
                task: task.clone(),
                hosts: hosts.clone(),
                state: "waiting for its hosts".to_string(),
                ..Row::default()
            })
            .collect();
        Arc::new(Board {
            state: Mutex::new(State { rows, drawn: 0 }),
        })
    }

    /// The reporter of `task`, drawing on stderr.
    pub(super) fn reporter(self: &Arc<Self>, task: &str) -> BoardReporter {
        BoardReporter {
            board: self.clone(),
            task: task.to_string(),
        }
    }

    /// Update `task`'s row with `event`; returns the lines to print above the block.
    fn apply(&self, task: &str, event: &Event<'_>) -> Vec<String> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let Some(row) = state.rows.iter_mut().find(|r| r.task == task) else {
            return Vec::new();
        };
        let mut above = Vec::new();
        match event {
            Event::RunStarted { run_dir, .. } => {
                row.state = "started".to_string();
                above.push(format!("[{task}] run -> {}", run_dir.display()));
            }
            Event::DeploymentStarting { id } => row.state = format!("starting {id}"),
            Event::DeploymentProgress { id, text } => row.state = format!("starting {id}: {text}"),
            Event::DeploymentReady { id, after } => {
                row.state = format!("{id} ready after {:.1}s", after.as_secs_f64());
            }
            Event::DeploymentFailed { id, error, kept } => {
                let headline = Event::failed_headline(*kept);
                row.state = match kept {
                    None => format!("{id} failed to start"),
                    Some(_) => format!("{id} failed"),
                };
                above.push(format!("[{task}] {id} {headline}: {error}"));
            }
            Event::PointStarted {
                ordinal, total, id, ..
            } => {
                row.point = Some((*ordinal, *total));
                row.done = 0;
                row.failed = 0;
                row.tokens_per_s = 0.0;
                row.state = format!("running {id}");
            }
            Event::PointProgress {
                ordinal,
                total,
                done,
                failed,
                output_tokens_per_s,
                ..
            } => {
                row.point = Some((*ordinal, *total));
                row.done = *done;
                row.failed = *failed;
                row.tokens_per_s = *output_tokens_per_s;
            }
            Event::PointFinished {
                ordinal,
                total,
                id,
                status,
                error,
            } => {
                let status = status_name(status);
                row.state = format!("{id} {status}");
                let why = error.map(|e| format!(": {e}")).unwrap_or_default();
                above.push(format!(
                    "[{task}] point {ordinal}/{total} {id}: {status}{why}"
                ));
            }
            Event::RunFinished { status, run_dir } => {
                let status = status_name(status);
                row.state = status.clone();
                above.push(format!("[{task}] run {status}: {}", run_dir.display()));
            }
        }
        above
    }

    /// The block: one aligned line per task.
    fn frame(&self) -> Vec<String> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let task_w = state.rows.iter().map(|r| r.task.len()).max().unwrap_or(0);
        let host_w = state.rows.iter().map(|r| r.hosts.len()).max().unwrap_or(0);
        state
            .rows
            .iter()
            .map(|r| {
                let point = match r.point {
                    Some((i, n)) => format!("point {i}/{n}"),
                    None => "point -".to_string(),
                };
                format!(
                    "{:<task_w$}  {:<host_w$}  {point:<11}  {:>5} done  {:>4} failed  {:>7.0} tok/s  {}",
                    r.task, r.hosts, r.done, r.failed, r.tokens_per_s, r.state
                )
            })
            .collect()
    }

    /// Print `above`, then redraw the block over its previous copy.
    fn draw(&self, above: &[String]) {
        let frame = self.frame();
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = String::new();
        if state.drawn > 0 {
            out.push_str(&format!("\x1b[{}A\r\x1b[J", state.drawn));
        }
        for line in above.iter().chain(&frame) {
            out.push_str(line);
            out.push('\n');
        }
        state.drawn = frame.len();
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(out.as_bytes());
        let _ = err.flush();
    }
}

/// One task's events onto the shared board.
pub(super) struct BoardReporter {
    board: Arc<Board>,
    task: String,
}

impl Reporter for BoardReporter {
    fn event(&self, event: &Event<'_>) {
        let above = self.board.apply(&self.task, event);
        self.board.draw(&above);
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use super::*;
    use crate::archive::{PointStatus, RunStatus};

    fn board() -> Arc<Board> {
        Board::new(&[
            ("llama".to_string(), "h200-a".to_string()),
            ("qwen-long".to_string(), "h20-1,h20-2".to_string()),
        ])
    }

    #[test]
    fn every_task_has_one_aligned_line_from_the_start() {
        let b = board();
        assert_eq!(
            b.frame(),
            [
                "llama      h200-a       point -          0 done     0 failed        0 tok/s  waiting for its hosts",
                "qwen-long  h20-1,h20-2  point -          0 done     0 failed        0 tok/s  waiting for its hosts",
            ]
        );
    }

    #[test]
    fn progress_updates_its_own_line_and_finished_points_go_above() {
        let b = board();
        let dir = Path::new("results/llama/r1");
        assert_eq!(
            b.apply(
                "llama",
                &Event::RunStarted {
                    run_dir: dir,
                    deployments: 1,
                    points: 2
                }
            ),
            ["[llama] run -> results/llama/r1"]
        );
        assert!(
            b.apply(
                "qwen-long",
                &Event::DeploymentReady {
                    id: "d1",
                    after: Duration::from_millis(2500)
                }
            )
            .is_empty()
        );
        b.apply(
            "llama",
            &Event::PointStarted {
                ordinal: 1,
                total: 2,
                id: "concurrency=4",
                repetition: 1,
            },
        );
        let above = b.apply(
            "llama",
            &Event::PointProgress {
                ordinal: 1,
                total: 2,
                id: "concurrency=4",
                done: 12,
                failed: 1,
                in_flight: 4,
                output_tokens_per_s: 1234.4,
            },
        );
        assert!(above.is_empty());
        assert_eq!(
            b.frame(),
            [
                "llama      h200-a       point 1/2       12 done     1 failed     1234 tok/s  running concurrency=4",
                "qwen-long  h20-1,h20-2  point -          0 done     0 failed        0 tok/s  d1 ready after 2.5s",
            ]
        );
        let above = b.apply(
            "llama",
            &Event::PointFinished {
                ordinal: 1,
                total: 2,
                id: "concurrency=4",
                status: PointStatus::Failed,
                error: Some("server exited"),
            },
        );
        assert_eq!(
            above,
            ["[llama] point 1/2 concurrency=4: failed: server exited"]
        );
        let above = b.apply(
            "qwen-long",
            &Event::RunFinished {
                status: RunStatus::Completed,
                run_dir: Path::new("results/qwen-long/r2"),
            },
        );
        assert_eq!(above, ["[qwen-long] run completed: results/qwen-long/r2"]);
        let frame = b.frame();
        assert!(frame[0].ends_with("concurrency=4 failed"), "{frame:?}");
        assert!(frame[1].ends_with("  completed"), "{frame:?}");
    }

    #[test]
    fn events_of_unknown_tasks_change_nothing() {
        let b = board();
        let before = b.frame();
        assert!(
            b.apply("other", &Event::DeploymentStarting { id: "d1" })
                .is_empty()
        );
        assert_eq!(b.frame(), before);
    }
}
