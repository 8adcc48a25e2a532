//! The `orchestrate` binary: parse the command line, start logging, run a verb, map the
//! outcome to a documented exit code (see `orchestrate --help`).

use std::process::ExitCode;

fn main() -> ExitCode {
    orchestrate::cli::main()
}
