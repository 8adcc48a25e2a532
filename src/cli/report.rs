//! `orchestrate report`.

use super::Outcome;

/// Arguments of `orchestrate report`.
#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> Outcome {
    super::not_yet("report", 8)
}
