//! Why a hosts file could not be used: read failures, and parse and validation failures told
//! the way the task file's are (`file:line:col`, the line with a caret, what to do; see
//! `crate::spec::diagnostic`), and unknown host or cluster names.

use std::path::PathBuf;

use crate::spec::Diagnostic;

/// Hosts file failures. Messages carry `file:line:col` wherever the file is at fault.
#[derive(Debug, thiserror::Error)]
pub enum HostsError {
    #[error("cannot read hosts file {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is at fault: where, what, and what to do.
    #[error("{0}")]
    Invalid(Box<Diagnostic>),
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

impl From<Diagnostic> for HostsError {
    fn from(d: Diagnostic) -> Self {
        HostsError::Invalid(Box::new(d))
    }
}
