//! `orchestrate compare`.

use super::Outcome;

/// Arguments of `orchestrate compare`.
#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> Outcome {
    super::not_yet("compare", 8)
}
