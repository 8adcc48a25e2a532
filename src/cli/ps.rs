//! `orchestrate ps`.

use super::Outcome;

/// Arguments of `orchestrate ps`.
#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> Outcome {
    super::not_yet("ps", 6)
}
