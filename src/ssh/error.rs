//! SSH failures. Messages say what failed, on which host, and what to do about it.

use std::path::PathBuf;

/// Everything that can go wrong talking to a host over SSH.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SshError {
    #[error("failed to connect to {target}: {message}")]
    Connect { target: String, message: String },
    #[error("failed the ssh handshake with {target}: {message}")]
    Handshake { target: String, message: String },
    #[error(
        "unknown host key for {target} ({fingerprint}); nothing was started. Verify the key, \
         then trust it with `--accept-new-host-keys` (writes {}) or add it yourself: \
         `ssh-keyscan -p {port} {address} >> {}`",
        known_hosts.display(), known_hosts.display()
    )]
    UnknownHostKey {
        target: String,
        address: String,
        port: u16,
        fingerprint: String,
        known_hosts: PathBuf,
    },
    #[error(
        "host key for {target} CHANGED ({fingerprint}) and does not match {}; this may be an \
         attack, nothing was started. If the host was reinstalled, remove the old key with \
         `ssh-keygen -R '{entry}' -f {}` and trust the new one",
        known_hosts.display(), known_hosts.display()
    )]
    ChangedHostKey {
        target: String,
        entry: String,
        fingerprint: String,
        known_hosts: PathBuf,
    },
    #[error("failed to use known_hosts file {}: {message}", path.display())]
    KnownHosts { path: PathBuf, message: String },
    #[error(
        "failed to authenticate to {target} (tried: {tried}); nothing was started. Add the \
         public key to ~/.ssh/authorized_keys on the host, or set `identity_file` in the hosts file"
    )]
    Auth { target: String, tried: String },
    #[error("lost the ssh connection to {target}: {message}")]
    Lost { target: String, message: String },
    #[error("failed to {what} on {target}: {message}")]
    Channel {
        target: String,
        what: String,
        message: String,
    },
    #[error("timed out after {seconds}s: {what} on {target}")]
    Timeout {
        target: String,
        what: String,
        seconds: u64,
    },
    #[error("`{command}` on {target} failed with {status}: {stderr}")]
    Command {
        target: String,
        command: String,
        status: String,
        stderr: String,
    },
    #[error("host {target} is busy: locked by {owner}")]
    HostBusy { target: String, owner: String },
    #[error("failed to {what}: {message}")]
    Local { what: String, message: String },
}

/// libssh2's "would block" (`LIBSSH2_ERROR_EAGAIN`) on a non-blocking session: try again later.
pub(crate) fn is_again(e: &ssh2::Error) -> bool {
    e.code() == ssh2::ErrorCode::Session(-37)
}
