//! `orchestrate plan`.

use super::Outcome;

/// Arguments of `orchestrate plan`.
#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> Outcome {
    super::not_yet("plan", 3)
}
