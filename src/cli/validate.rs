//! `orchestrate validate`.

use super::Outcome;

/// Arguments of `orchestrate validate`.
#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> Outcome {
    super::not_yet("validate", 3)
}
