//! Running Slurm's commands where the cluster is driven from ([`SlurmHost`]): on this machine
//! (`tokio::process`, orchestrate's environment) or on the cluster's login host over the
//! SSH layer (`crate::ssh::Session`, the login shell's environment plus the `NAME=VALUE`
//! pairs of [`LOGIN_ENV`]). Each command is bounded in time, its stdout returned, a failure
//! carrying stderr; nothing blocks the runtime (SSH calls run on the session's own thread).

use std::time::Duration;

use super::SlurmError;
use super::commands::display;
use crate::ssh::{Session, quote};

/// How long one query or `scancel` may take (slurmctld answers in milliseconds; a hung
/// controller must not hang teardown).
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// Environment for every Slurm command (and `srun` step) run on a login host, as
/// whitespace-separated `NAME=VALUE` pairs, e.g.
/// `ORCHESTRATE_SLURM_LOGIN_ENV="SLURM_CONF=/etc/slurm-b/slurm.conf"`. Unset: none (a login
/// host's Slurm is configured there). Words without `=` are ignored.
pub const LOGIN_ENV: &str = "ORCHESTRATE_SLURM_LOGIN_ENV";

/// Where a cluster's Slurm commands run.
#[derive(Clone)]
pub enum SlurmHost {
    /// On this machine.
    Here,
    /// On the cluster's login host, over SSH.
    Login(Session),
}

impl SlurmHost {
    /// `this machine` or `login host NAME`, for messages.
    pub fn describe(&self) -> String {
        match self {
            SlurmHost::Here => "this machine".to_string(),
            SlurmHost::Login(s) => format!("login host {}", s.host().name),
        }
    }
}

/// The `(name, value)` pairs of [`LOGIN_ENV`] in orchestrate's environment.
pub fn login_env() -> Vec<(String, String)> {
    parse_login_env(&std::env::var(LOGIN_ENV).unwrap_or_default())
}

/// `NAME=VALUE` words of `text` (words without `=` or with an empty name are left out).
fn parse_login_env(text: &str) -> Vec<(String, String)> {
    text.split_whitespace()
        .filter_map(|word| word.split_once('='))
        .filter(|(name, _)| !name.is_empty())
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect()
}

/// `argv` as the shell line run on a login host: `env K=V ... argv` with [`login_env`].
pub fn remote_line(argv: &[String]) -> String {
    let env = login_env();
    if env.is_empty() {
        return display(argv);
    }
    let vars: Vec<String> = env
        .iter()
        .map(|(k, v)| quote(&format!("{k}={v}")))
        .collect();
    format!("env {} {}", vars.join(" "), display(argv))
}

/// Run `argv` on `host`, return its stdout; a non-zero exit is an error with its stderr.
pub async fn output(host: &SlurmHost, argv: &[String]) -> Result<String, SlurmError> {
    match host {
        SlurmHost::Here => output_here(argv).await,
        SlurmHost::Login(session) => output_login(session, argv).await,
    }
}

async fn output_login(session: &Session, argv: &[String]) -> Result<String, SlurmError> {
    let command = display(argv);
    let line = remote_line(argv);
    let run = session.run(&line);
    let out = match tokio::time::timeout(COMMAND_TIMEOUT, run).await {
        Err(_) => {
            return Err(SlurmError::Timeout {
                command,
                seconds: COMMAND_TIMEOUT.as_secs(),
            });
        }
        Ok(Err(source)) => {
            return Err(SlurmError::Ssh {
                command,
                host: session.host().name.clone(),
                source: Box::new(source),
            });
        }
        Ok(Ok(out)) => out,
    };
    if out.exit.code != 0 || out.exit.signal.is_some() {
        return Err(SlurmError::Failed {
            command: format!("{command} (on {})", session.host().name),
            status: match &out.exit.signal {
                Some(sig) => format!("signal {sig}"),
                None => format!("exit code {}", out.exit.code),
            },
            stderr: out.stderr.trim().to_string(),
        });
    }
    Ok(out.stdout)
}

async fn output_here(argv: &[String]) -> Result<String, SlurmError> {
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
/// thread of its own (here) or sent to the session's thread (login host), so a caller on
/// the runtime never blocks.
pub fn scancel_detached(host: &SlurmHost, job: &str) {
    let argv = super::commands::scancel(job);
    match host {
        SlurmHost::Login(session) => session.spawn_detached(&remote_line(&argv)),
        SlurmHost::Here => match std::process::Command::new(&argv[0])
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
        },
    }
}

/// `scancel JOB` and wait for it to end (forced exits: the process is about to exit, and
/// the job must be cancelled before it does). On a login host, waits at most 10 s.
pub fn scancel_blocking(host: &SlurmHost, job: &str) {
    let argv = super::commands::scancel(job);
    match host {
        SlurmHost::Login(session) => {
            if !session.run_blocking(&remote_line(&argv), Duration::from_secs(10)) {
                tracing::warn!("scancel {job} on {} failed", host.describe());
            }
        }
        SlurmHost::Here => {
            let _ = std::process::Command::new(&argv[0])
                .args(&argv[1..])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn login_env_is_name_value_pairs() {
        assert_eq!(
            parse_login_env(" SLURM_CONF=/a/slurm.conf  junk =x B=1=2 "),
            vec![
                ("SLURM_CONF".to_string(), "/a/slurm.conf".to_string()),
                ("B".to_string(), "1=2".to_string()),
            ]
        );
        assert!(parse_login_env("").is_empty());
    }
}
