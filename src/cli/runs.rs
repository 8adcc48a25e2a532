//! `orchestrate runs`.

use super::Outcome;

/// Arguments of `orchestrate runs`.
#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> Outcome {
    super::not_yet("runs", 8)
}
