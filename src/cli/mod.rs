//! The command line: one file per verb, clap derive, and the mapping from outcomes to the
//! documented exit codes. Library modules return typed errors; `anyhow` lives only here.

mod agent;
mod bench;
mod board;
mod check;
mod clean;
mod compare;
mod kube_leftovers;
mod mock_server;
mod plan;
mod plan_pod;
mod progress;
mod ps;
mod remote;
mod report;
mod rescore;
mod run;
mod runs;
mod validate;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Exit codes, documented in `--help` and docs/cli.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Everything asked for was done.
    Ok = 0,
    /// The run (or a point of it) failed: a server did not start, requests failed, ...
    RunFailed = 1,
    /// Bad input: a task file, hosts file, flag or archive the user must fix.
    BadInput = 2,
    /// `check` found a regression against the baseline.
    Regression = 3,
    /// A bug in orchestrate itself.
    Internal = 4,
    /// Interrupted by Ctrl-C or SIGTERM; what finished is archived.
    Interrupted = 130,
}

/// A verb's failure: the error to print and the exit code it maps to.
#[derive(Debug)]
pub struct Failure {
    pub exit: Exit,
    pub error: anyhow::Error,
}

impl Failure {
    /// The user must fix their input (exit 2).
    pub fn bad_input(error: impl Into<anyhow::Error>) -> Self {
        Self {
            exit: Exit::BadInput,
            error: error.into(),
        }
    }

    /// The run failed (exit 1).
    pub fn run_failed(error: impl Into<anyhow::Error>) -> Self {
        Self {
            exit: Exit::RunFailed,
            error: error.into(),
        }
    }
}

impl<E: Into<anyhow::Error>> From<E> for Failure {
    fn from(error: E) -> Self {
        Self::run_failed(error)
    }
}

/// What every verb returns.
pub type Outcome = Result<Exit, Failure>;

const EXIT_CODES: &str = "\
Exit codes:
  0  ok
  1  the run failed (a server, a point or the archive)
  2  bad input (task file, hosts file, flags); nothing was started
  3  regression found by `check`
  4  internal error (a bug in orchestrate; please report it)
130  interrupted (Ctrl-C / SIGTERM); finished points are kept in the archive";

/// Benchmark LLM inference servers end to end from one declarative task file.
#[derive(Debug, Parser)]
#[command(name = "orchestrate", version, about, after_help = EXIT_CODES)]
pub struct Cli {
    /// More log output on stderr (-v debug, -vv trace). ORCHESTRATE_LOG overrides it.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Only errors on stderr.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show exactly what a run of each task would do (deployments, commands, env, load of every point); starts nothing.
    Plan(plan::Args),
    /// Check task files for errors (everything `plan` checks) without starting anything.
    Validate(validate::Args),
    /// Deploy, wait until ready, sweep every point, tear down and archive the results.
    Run(run::Args),
    /// Load-test an OpenAI-compatible endpoint that is already running (vllm bench serve's flags).
    Bench(Box<bench::Args>),
    /// Run the built-in OpenAI-compatible mock inference server.
    MockServer(Box<mock_server::Args>),
    /// Write report.md, report.html and plots for one or more archived runs.
    Report(report::Args),
    /// Compare runs side by side, matching points by their load parameters.
    Compare(compare::Args),
    /// Gate on regressions against a baseline run (exit 3 when one is found).
    Check(check::Args),
    /// List archived runs.
    Runs(runs::Args),
    /// List what orchestrate started that still runs: local process groups and containers,
    /// per task and run.
    Ps(ps::Args),
    /// Kill the local (or, with --host, remote) processes and remove the containers left
    /// behind by runs that were killed.
    Clean(clean::Args),
    /// The load generator on a host of the cluster, driven over SSH by `run` (internal).
    #[command(hide = true)]
    ClientAgent(agent::Args),
}

/// Parse the command line, run the verb and map its outcome to an exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose, cli.quiet);
    if writes_data_only(&cli.command) {
        quiet_on_closed_stdout();
    }
    let quiet = cli.quiet;
    let outcome =
        std::panic::catch_unwind(move || dispatch(cli.command, quiet)).unwrap_or_else(|_| {
            Err(Failure {
                exit: Exit::Internal,
                error: anyhow::anyhow!(
                    "orchestrate panicked (a bug); the message above says where"
                ),
            })
        });
    match outcome {
        Ok(exit) => ExitCode::from(exit as u8),
        Err(failure) => {
            let text = format!("{:#}", failure.error);
            eprintln!("error: {}", crate::plan::secrets::redact(&text));
            ExitCode::from(failure.exit as u8)
        }
    }
}

/// Verbs that only read files and print data: a closed stdout (`| head`) may end them.
fn writes_data_only(command: &Command) -> bool {
    matches!(
        command,
        Command::Plan(_)
            | Command::Validate(_)
            | Command::Report(_)
            | Command::Compare(_)
            | Command::Check(_)
            | Command::Runs(_)
            | Command::Ps(_)
    )
}

/// Let SIGPIPE end the process quietly, as it ends `cat` or `grep`, instead of the Rust
/// default (ignored, so `println!` into a closed pipe panics). Only for the data verbs: they
/// start no server and hold nothing to tear down. The shell sees status 141 (128 + SIGPIPE).
fn quiet_on_closed_stdout() {
    // SAFETY: resetting a signal disposition to its default before any thread is started.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn dispatch(command: Command, quiet: bool) -> Outcome {
    match command {
        Command::Plan(args) => plan::run(args),
        Command::Validate(args) => validate::run(args),
        Command::Run(args) => run::run(args, quiet),
        Command::Bench(args) => bench::run(*args, quiet),
        Command::MockServer(args) => mock_server::run(*args),
        Command::Report(args) => report::run(args),
        Command::Compare(args) => compare::run(args),
        Command::Check(args) => check::run(args),
        Command::Runs(args) => runs::run(args),
        Command::Ps(args) => ps::run(args),
        Command::Clean(args) => clean::run(args),
        Command::ClientAgent(args) => agent::run(args),
    }
}

fn init_logging(verbose: u8, quiet: bool) {
    use tracing_subscriber::EnvFilter;
    let default = match (quiet, verbose) {
        (true, _) => "error",
        (false, 0) => "info",
        (false, 1) => "debug",
        (false, _) => "trace",
    };
    let filter =
        EnvFilter::try_from_env("ORCHESTRATE_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    let ansi = std::env::var_os("NO_COLOR").is_none()
        && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Secrets out of every message, `-v` included (bollard logs request bodies with `Env`).
        .with_writer(|| crate::plan::secrets::Redacting(std::io::stderr()))
        .with_ansi(ansi)
        .with_target(false)
        .without_time()
        .try_init();
}

/// A multi-threaded tokio runtime for the async verbs.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure {
            exit: Exit::Internal,
            error: anyhow::Error::new(e).context("failed to start the async runtime"),
        })
}
