//! The per-host lock: one task at a time per host, respected by every `orchestrate` process.
//! The lock lives on the host: a remote shell holds `flock` on a lock file for as long as its
//! SSH channel is open, so a crashed orchestrator or a dropped connection releases it (the
//! kernel drops the flock when the holder dies; no stale lock to clean). An owner file next
//! to it says who holds it.

use std::time::Duration;

use super::{CommandEvent, RemoteCommand, Session, SshError, quote};

/// The default lock file on every host.
pub(super) const DEFAULT_LOCK_FILE: &str = "/tmp/orchestrate-host.lock";

/// Whether to wait for a busy host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockWait {
    /// Fail at once with [`SshError::HostBusy`].
    NoWait,
    /// Wait up to this long, then fail with [`SshError::HostBusy`].
    For(Duration),
}

/// A held host lock. `release` frees it; dropping it frees it too (the holder's stdin closes).
pub struct HostLock {
    holder: Option<RemoteCommand>,
    path: String,
}

impl HostLock {
    /// Take the default lock of the session's host; `owner` is recorded for whoever waits.
    pub async fn acquire(session: &Session, owner: &str, wait: LockWait) -> Result<Self, SshError> {
        Self::acquire_at(session, DEFAULT_LOCK_FILE, owner, wait).await
    }

    /// Take the lock at `path` (several test "hosts" can share one machine).
    pub async fn acquire_at(
        session: &Session,
        path: &str,
        owner: &str,
        wait: LockWait,
    ) -> Result<Self, SshError> {
        let wait_step = match wait {
            LockWait::NoWait => "exit 2".to_string(),
            LockWait::For(d) => format!("flock -w {} 9 || exit 2", d.as_secs().max(1)),
        };
        let script = format!(
            "lock={path}; exec 9>>\"$lock\" || exit 3; chmod 666 \"$lock\" 2>/dev/null; \
             if ! flock -n 9; then echo \"busy $(cat \"$lock.owner\" 2>/dev/null)\"; {wait_step}; fi; \
             echo {owner} \"(remote pid $$)\" > \"$lock.owner\"; echo acquired; cat >/dev/null",
            path = quote(path),
            owner = quote(owner),
        );
        let mut holder = session.exec(&format!("sh -c {}", quote(&script))).await?;
        let mut stdout = String::new();
        let mut busy_owner = String::from("another orchestrate run");
        loop {
            match holder.next().await {
                Some(CommandEvent::Stdout(bytes)) => {
                    stdout.push_str(&String::from_utf8_lossy(&bytes));
                    while let Some(pos) = stdout.find('\n') {
                        let line: String = stdout.drain(..=pos).collect();
                        let line = line.trim();
                        if line == "acquired" {
                            return Ok(Self {
                                holder: Some(holder),
                                path: path.to_string(),
                            });
                        }
                        if let Some(who) = line.strip_prefix("busy") {
                            let who = who.trim();
                            if !who.is_empty() {
                                busy_owner = who.to_string();
                            }
                            tracing::info!(
                                "host {} is busy ({busy_owner}); waiting",
                                session.host().name
                            );
                        }
                    }
                }
                Some(CommandEvent::Stderr(_)) => {}
                Some(CommandEvent::Exit(exit)) if exit.code == 2 => {
                    return Err(SshError::HostBusy {
                        target: session.host().describe(),
                        owner: busy_owner,
                    });
                }
                Some(CommandEvent::Exit(exit)) => {
                    return Err(SshError::Command {
                        target: session.host().describe(),
                        command: format!("lock {path}"),
                        status: format!("exit code {}", exit.code),
                        stderr: "could not open or lock the lock file (is flock installed?)"
                            .to_string(),
                    });
                }
                Some(CommandEvent::Failed(e)) => return Err(e),
                None => {
                    return Err(SshError::Lost {
                        target: session.host().describe(),
                        message: "while taking the host lock".to_string(),
                    });
                }
            }
        }
    }

    /// The lock file on the host.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Release the lock and wait until the host confirms.
    pub async fn release(mut self) {
        if let Some(holder) = self.holder.take() {
            holder.close_stdin();
            let _ = tokio::time::timeout(Duration::from_secs(10), holder.collect()).await;
        }
    }
}

impl Drop for HostLock {
    fn drop(&mut self) {
        if let Some(holder) = self.holder.take() {
            holder.close_stdin();
        }
    }
}
