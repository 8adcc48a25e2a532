//! `orchestrate runs`: the run index over an archive root, or (`--resolve REF`) the directory
//! a reference such as `latest`, `previous` or a tag points at for one task.
//! `orchestrate runs import` brings vllm bench serve / SGLang bench_serving results into the
//! archive; `orchestrate runs export` writes a run's points as llm-d Benchmark Reports v0.2;
//! `orchestrate runs show RUN` prints a run's manifest, or with `--repro` what it takes to
//! repeat the run.

use std::path::PathBuf;

use super::{Exit, Failure, Outcome};
use crate::runs;

/// Arguments of `orchestrate runs`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    pub action: Option<Action>,
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

/// What to do besides listing.
#[derive(Debug, clap::Subcommand)]
pub enum Action {
    /// Import other tools' result files as one archived run.
    Import(ImportArgs),
    /// Write each point of a run as an llm-d Benchmark Report v0.2 JSON file.
    Export(ExportArgs),
    /// Print a run's manifest, or (`--repro`) what it takes to repeat the run.
    Show(ShowArgs),
}

/// Arguments of `orchestrate runs show`.
#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// A run directory, or (with `--task`) `latest`, `previous`, a run id or a tag.
    #[arg(value_name = "RUN")]
    pub run: String,
    /// The task RUN belongs to, when RUN is not a directory.
    #[arg(long, value_name = "TASK")]
    pub task: Option<String>,
    /// The archive root.
    #[arg(long, default_value = "results", value_name = "DIR")]
    pub results: PathBuf,
    /// Print how to repeat the run: orchestrate's command line, the secrets to supply, each
    /// process's host, image@digest, env and commands, and the task as resolved (repro.md).
    #[arg(long)]
    pub repro: bool,
}

/// Arguments of `orchestrate runs import`.
#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// Result files: vllm bench serve --save-result JSON (one per point) or SGLang
    /// bench_serving --output-file JSONL (one line per point).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    #[arg(long, value_enum)]
    pub format: crate::interop::ImportFormat,
    /// Task name of the imported run (its directory under --results).
    #[arg(long)]
    pub task: String,
    #[arg(long)]
    pub tag: Option<String>,
    /// Planned input length, when the files do not record it (vllm's do not).
    #[arg(long)]
    pub input_len: Option<u64>,
    /// Planned output length, when the files do not record it.
    #[arg(long)]
    pub output_len: Option<u64>,
    #[arg(long, default_value = "results", value_name = "DIR")]
    pub results: PathBuf,
}

/// Arguments of `orchestrate runs export`.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// The run directory.
    #[arg(value_name = "RUN_DIR")]
    pub run: PathBuf,
    /// Directory for <point>.json files (default: RUN_DIR/export/llm-d).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

pub(super) fn run(args: Args) -> Outcome {
    match args.action {
        Some(Action::Import(a)) => return import(a),
        Some(Action::Export(a)) => return export(a),
        Some(Action::Show(a)) => return show(a),
        None => {}
    }
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
        warn_damaged(&entries);
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
                match e.damaged.len() {
                    0 => e.status.to_string(),
                    n => format!("{} ({n} damaged)", e.status),
                },
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
    warn_damaged(&entries);
    Ok(Exit::Ok)
}

/// Each damaged point summary of the listed runs, said on stderr (the file, and what is wrong).
fn warn_damaged(entries: &[runs::RunEntry]) {
    for message in entries.iter().flat_map(|e| &e.damaged) {
        tracing::warn!("{message}");
    }
}

fn import(args: ImportArgs) -> Outcome {
    let opts = crate::interop::ImportOptions {
        format: args.format,
        task: args.task,
        tag: args.tag,
        input_len: args.input_len,
        output_len: args.output_len,
        now: chrono::Utc::now(),
    };
    let dir = crate::interop::import(&args.results, &args.files, &opts).map_err(|e| match e {
        crate::interop::InteropError::Archive(_) => Failure::run_failed(e),
        other => Failure::bad_input(other),
    })?;
    println!("{}", dir.display());
    Ok(Exit::Ok)
}

fn show(args: ShowArgs) -> Outcome {
    let dir = match &args.task {
        Some(task) => runs::resolve(&args.results, task, &args.run, None),
        None => runs::resolve_dir(&args.run),
    }
    .map_err(Failure::bad_input)?;
    let manifest = crate::archive::read_manifest(&dir).map_err(Failure::bad_input)?;
    if args.repro {
        print!("{}", crate::archive::repro_text(&manifest));
    } else {
        let text = serde_json::to_string_pretty(&manifest).expect("a manifest serializes");
        println!("{text}");
    }
    Ok(Exit::Ok)
}

fn export(args: ExportArgs) -> Outcome {
    let reports = crate::interop::export_llm_d(&args.run).map_err(Failure::bad_input)?;
    let out = args
        .out
        .unwrap_or_else(|| args.run.join("export").join("llm-d"));
    std::fs::create_dir_all(&out).map_err(|e| {
        anyhow::Error::new(e).context(format!("failed to create {}", out.display()))
    })?;
    for (name, report) in reports {
        let path = out.join(format!("{name}.json"));
        let text = serde_json::to_string_pretty(&report).expect("report serializes");
        std::fs::write(&path, text + "\n").map_err(|e| {
            anyhow::Error::new(e).context(format!("failed to write {}", path.display()))
        })?;
        println!("{}", path.display());
    }
    Ok(Exit::Ok)
}
