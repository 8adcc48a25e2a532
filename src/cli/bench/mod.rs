//! `orchestrate bench`: a drop-in for `vllm bench serve` against a running endpoint: the same
//! flag names and meanings, plus the MoAI fork's and SGLang's dataset flags, duration-bound
//! runs, per-request timeouts and the client self-check. Prints the "Serving Benchmark Result"
//! block on stdout; with `--save-result` writes the result JSON and streams one JSON line per
//! request next to it as requests finish.
//!
//! `args` holds the flags, `resolve` turns them into the client's configuration before
//! anything starts, `execute` runs the benchmark and prints and saves its result, `search`
//! runs a capacity search (`--search AXIS`) instead of one measurement.

mod args;
mod execute;
mod resolve;
mod search;

pub(super) use args::Args;

use super::{Failure, Outcome};

pub(super) fn run(args: Args, quiet: bool) -> Outcome {
    let r = resolve::resolve(&args).map_err(Failure::bad_input)?;
    let rt = super::runtime()?;
    let shutdown = crate::shutdown::Shutdown::new();
    rt.block_on(async {
        shutdown.listen_for_signals();
        match r.search.clone() {
            Some(spec) => search::run(&args, r, spec, shutdown.token(), quiet).await,
            None => execute::bench(&args, r, shutdown.token(), quiet).await,
        }
    })
}
