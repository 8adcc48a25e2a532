//! `orchestrate bench`: a drop-in for `vllm bench serve` against a running endpoint.

use super::Outcome;

/// Arguments of `orchestrate bench` (vllm bench serve's flag names and meanings).
#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> Outcome {
    super::not_yet("bench", 5)
}
