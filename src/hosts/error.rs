//! Why a hosts file could not be used: read, parse and validation failures (with
//! `file:line:col` wherever the file is at fault), and unknown host or cluster names.

use std::path::PathBuf;

/// Hosts file failures. Messages carry `file:line:col` wherever the file is at fault.
#[derive(Debug, thiserror::Error)]
pub enum HostsError {
    #[error("failed to read hosts file {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid hosts file {}: {message}", path.display())]
    Parse { path: PathBuf, message: String },
    #[error("{}:{line}:{column}: {message}", path.display())]
    Invalid {
        path: PathBuf,
        line: u64,
        column: u64,
        message: String,
    },
    #[error("unknown host `{name}` in {}{hint}", path.display())]
    UnknownHost {
        path: PathBuf,
        name: String,
        hint: String,
    },
    #[error("unknown cluster `{name}` in {}{hint}", path.display())]
    UnknownCluster {
        path: PathBuf,
        name: String,
        hint: String,
    },
}
