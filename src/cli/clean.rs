//! `orchestrate clean`: remove every container carrying our labels on the local engine
//! (optionally only one run's or one task's), e.g. after the runner was killed. Prints the
//! removed containers' names on stdout, one per line.

use anyhow::Context;

use super::{Exit, Outcome};
use crate::provider::docker::{DockerOptions, DockerProvider, LabelFilter};
use crate::shutdown::Shutdown;

/// Arguments of `orchestrate clean`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only containers of this run id.
    #[arg(long, value_name = "ID")]
    pub run: Option<String>,
    /// Only containers of this task.
    #[arg(long, value_name = "NAME")]
    pub task: Option<String>,
}

pub fn run(args: Args) -> Outcome {
    let filter = LabelFilter {
        run: args.run,
        task: args.task,
    };
    super::runtime()?.block_on(async {
        let provider = DockerProvider::connect(Shutdown::new(), DockerOptions::default())
            .await
            .context("cannot list containers to clean")?;
        let removed = provider
            .clean(&filter)
            .await
            .context("cannot remove leftover containers")?;
        for container in &removed {
            println!("{}", container.name);
        }
        tracing::info!("removed {} container(s)", removed.len());
        Ok(Exit::Ok)
    })
}
