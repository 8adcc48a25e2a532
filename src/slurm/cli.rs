//! Running Slurm's commands on this machine: `tokio::process` (nothing blocks the runtime),
//! each bounded in time, stdout returned, a failure carrying stderr. The environment
//! (`SLURM_CONF`, `PATH`) is orchestrate's.

use std::time::Duration;

use super::SlurmError;
use super::commands::display;

/// How long one query or `scancel` may take (slurmctld answers in milliseconds; a hung
/// controller must not hang teardown).
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// Run `argv`, return its stdout; a non-zero exit is an error with its stderr.
pub async fn output(argv: &[String]) -> Result<String, SlurmError> {
    let command = display(argv);
    let mut cmd = tokio::process::Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let run = cmd.output();
    let out = match tokio::time::timeout(COMMAND_TIMEOUT, run).await {
        Err(_) => {
            return Err(SlurmError::Timeout {
                command,
                seconds: COMMAND_TIMEOUT.as_secs(),
            });
        }
        Ok(Err(source)) => return Err(SlurmError::Spawn { command, source }),
        Ok(Ok(out)) => out,
    };
    if !out.status.success() {
        return Err(SlurmError::Failed {
            command,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `scancel JOB` without waiting, for `Drop` and forced exits: spawned and reaped by a
/// thread of its own, so a caller on the runtime never blocks.
pub fn scancel_detached(job: &str) {
    let argv = super::commands::scancel(job);
    match std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
    {
        Ok(mut child) => {
            std::thread::spawn(move || child.wait());
        }
        Err(e) => tracing::warn!("cannot run scancel {job}: {e}"),
    }
}

/// `scancel JOB` and wait for it to end (forced exits: the process is about to exit, and
/// the job must be cancelled before it does).
pub fn scancel_blocking(job: &str) {
    let argv = super::commands::scancel(job);
    let _ = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
}
