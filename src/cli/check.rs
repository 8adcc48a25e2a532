//! `orchestrate check`.

use super::Outcome;

/// Arguments of `orchestrate check`.
#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> Outcome {
    super::not_yet("check", 8)
}
