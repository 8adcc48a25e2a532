//! Putting our own binary on a host, so the load generator can run there (a task's client
//! placed on a host of the cluster): uploaded once per content hash into
//! `/tmp/orchestrate/bin/orchestrate-<sha256 prefix>`, after checking the host's CPU
//! architecture matches.

use std::path::Path;

use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;

use super::{Session, SshError, quote};

/// Where binaries go on hosts.
pub const REMOTE_BIN_DIR: &str = "/tmp/orchestrate/bin";

/// The outcome of [`install_binary`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    /// The executable's path on the host.
    pub path: String,
    /// False when the same content was already there.
    pub uploaded: bool,
}

/// Upload `local` (an executable for this machine's architecture) unless the host already
/// has the same content; returns its remote path.
pub async fn install_binary(session: &Session, local: &Path) -> Result<Installed, SshError> {
    install_binary_in(session, local, REMOTE_BIN_DIR).await
}

/// Same, into another directory on the host.
pub async fn install_binary_in(
    session: &Session,
    local: &Path,
    dir: &str,
) -> Result<Installed, SshError> {
    let arch = session.run_ok("uname -m").await?;
    let arch = arch.trim();
    let ours = std::env::consts::ARCH;
    let same = arch == ours || (ours == "aarch64" && arch == "arm64");
    if !same {
        return Err(SshError::Command {
            target: session.host().describe(),
            command: "uname -m".to_string(),
            status: format!("architecture {arch}"),
            stderr: format!(
                "{} is built for {ours}; it cannot run there",
                local.display()
            ),
        });
    }
    let hash = file_sha256(local).await?;
    let path = format!("{dir}/orchestrate-{}", &hash[..16]);
    let present = session
        .run(&format!("test -x {}", quote(&path)))
        .await?
        .exit
        .code
        == 0;
    if present {
        return Ok(Installed {
            path,
            uploaded: false,
        });
    }
    session.upload(local, &path, 0o755).await?;
    Ok(Installed {
        path,
        uploaded: true,
    })
}

async fn file_sha256(path: &Path) -> Result<String, SshError> {
    let err = |e: std::io::Error| SshError::Local {
        what: format!("read {}", path.display()),
        message: e.to_string(),
    };
    let mut file = tokio::fs::File::open(path).await.map_err(err)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = file.read(&mut buf).await.map_err(err)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}
