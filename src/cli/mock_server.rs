//! `orchestrate mock-server`.

use super::Outcome;

/// Arguments of `orchestrate mock-server`.
#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> Outcome {
    super::not_yet("mock-server", 4)
}
