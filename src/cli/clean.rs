//! `orchestrate clean`.

use super::Outcome;

/// Arguments of `orchestrate clean`.
#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> Outcome {
    super::not_yet("clean", 6)
}
