//! `orchestrate client-agent` (hidden): the load generator on a host of the cluster, driven
//! over SSH by `orchestrate run` for a task with `client: {host: H}`. The protocol and the
//! agent itself live in [`crate::client_agent`].

use super::Outcome;

/// Arguments of `orchestrate client-agent` (none: everything comes on stdin).
#[derive(Debug, clap::Args)]
pub struct Args {}

pub(super) fn run(_args: Args) -> Outcome {
    let rt = super::runtime()?;
    let code = rt.block_on(crate::client_agent::serve());
    // Leave at once: connections of a cancelled run are not worth waiting for.
    std::process::exit(code)
}
