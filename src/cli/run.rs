//! `orchestrate run`.

use super::Outcome;

/// Arguments of `orchestrate run`.
#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> Outcome {
    super::not_yet("run", 4)
}
