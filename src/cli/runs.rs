//! `orchestrate runs`: the run index over an archive root, or (`--resolve REF`) the directory
//! a reference such as `latest`, `previous` or a tag points at for one task.

use std::path::PathBuf;

use super::{Exit, Failure, Outcome};
use crate::runs;

/// Arguments of `orchestrate runs`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only runs of this task.
    #[arg(long, value_name = "TASK")]
    pub task: Option<String>,
    /// Only runs with this tag.
    #[arg(long, value_name = "TAG")]
    pub tag: Option<String>,
    /// The archive root.
    #[arg(long, default_value = "results", value_name = "DIR")]
    pub results: PathBuf,
    /// Print the directory of `latest`, `previous`, a run id or a tag of `--task`, and nothing else.
    #[arg(long, value_name = "REF", requires = "task")]
    pub resolve: Option<String>,
    /// Print JSON lines instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> Outcome {
    if let Some(reference) = &args.resolve {
        let task = args.task.as_deref().expect("clap requires --task");
        let dir =
            runs::resolve(&args.results, task, reference, None).map_err(Failure::bad_input)?;
        println!("{}", dir.display());
        return Ok(Exit::Ok);
    }
    let entries = runs::index(&args.results, args.task.as_deref(), args.tag.as_deref());
    if args.json {
        for e in &entries {
            println!("{}", serde_json::to_string(e).expect("entry serializes"));
        }
        return Ok(Exit::Ok);
    }
    let header = [
        "TASK", "RUN", "DATE", "BACKEND", "MODEL", "HARDWARE", "TAG", "STATUS", "POINTS",
    ];
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|e| {
            vec![
                e.task.clone(),
                e.run_id.clone(),
                e.started_at.clone(),
                e.backend.clone(),
                e.model.clone(),
                e.hardware.clone(),
                e.tag.clone().unwrap_or_else(|| "-".into()),
                crate::report::data::value_text(&serde_json::to_value(e.status).expect("status")),
                e.points.to_string(),
            ]
        })
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    println!("{}", line(header.iter().map(|h| h.to_string()).collect()));
    for row in rows {
        println!("{}", line(row));
    }
    if entries.is_empty() {
        tracing::info!("no runs under {}", args.results.display());
    }
    Ok(Exit::Ok)
}
