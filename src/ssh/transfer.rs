//! Files to and from a host over a session: uploads written atomically (temporary name,
//! then rename) and downloads that leave no partial file behind.

use std::path::Path;

use tokio::io::AsyncReadExt;

use super::command::{CommandEvent, RemoteCommand};
use super::{Session, SshError};

impl Session {
    /// Upload a local file to `remote` (parent directories created, written atomically).
    pub async fn upload(&self, local: &Path, remote: &str, mode: u32) -> Result<(), SshError> {
        let mut file = tokio::fs::File::open(local)
            .await
            .map_err(|e| SshError::Local {
                what: format!("read {}", local.display()),
                message: e.to_string(),
            })?;
        let process = self.exec(&upload_command(remote, mode)).await?;
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            let n = file.read(&mut buf).await.map_err(|e| SshError::Local {
                what: format!("read {}", local.display()),
                message: e.to_string(),
            })?;
            if n == 0 {
                break;
            }
            process.write_stdin(&buf[..n]).await?;
        }
        process.close_stdin();
        self.check_upload(process, remote).await
    }

    /// Upload bytes to `remote` (parent directories created, written atomically).
    pub async fn upload_bytes(
        &self,
        bytes: &[u8],
        remote: &str,
        mode: u32,
    ) -> Result<(), SshError> {
        let process = self.exec(&upload_command(remote, mode)).await?;
        process.write_stdin(bytes).await?;
        process.close_stdin();
        self.check_upload(process, remote).await
    }

    /// Download `remote` into `local` (written to a temporary name, then renamed).
    pub async fn download(&self, remote: &str, local: &Path) -> Result<(), SshError> {
        use tokio::io::AsyncWriteExt;
        let local_err = |e: std::io::Error| SshError::Local {
            what: format!("write {}", local.display()),
            message: e.to_string(),
        };
        let partial = local.with_extension("orchestrate-download");
        let mut file = tokio::fs::File::create(&partial).await.map_err(local_err)?;
        let mut process = self
            .exec(&format!("cat -- {}", super::quote(remote)))
            .await?;
        process.close_stdin();
        let mut stderr = Vec::new();
        let outcome = loop {
            match process.next().await {
                Some(CommandEvent::Stdout(bytes)) => {
                    file.write_all(&bytes).await.map_err(local_err)?;
                }
                Some(CommandEvent::Stderr(bytes)) => stderr.extend(bytes),
                Some(CommandEvent::Exit(exit)) => break Ok(exit),
                Some(CommandEvent::Failed(e)) => break Err(e),
                None => break Err(self.lost()),
            }
        };
        let exit = match outcome {
            Ok(exit) => exit,
            Err(e) => {
                let _ = tokio::fs::remove_file(&partial).await;
                return Err(e);
            }
        };
        if exit.code != 0 {
            let _ = tokio::fs::remove_file(&partial).await;
            return Err(SshError::Command {
                target: self.host().describe(),
                command: format!("download {remote}"),
                status: format!("exit code {}", exit.code),
                stderr: String::from_utf8_lossy(&stderr).trim().to_string(),
            });
        }
        file.flush().await.map_err(local_err)?;
        file.sync_all().await.map_err(local_err)?;
        tokio::fs::rename(&partial, local).await.map_err(local_err)
    }

    async fn check_upload(&self, process: RemoteCommand, remote: &str) -> Result<(), SshError> {
        let output = process.collect().await?;
        if output.exit.code == 0 {
            return Ok(());
        }
        Err(SshError::Command {
            target: self.host().describe(),
            command: format!("upload to {remote}"),
            status: format!("exit code {}", output.exit.code),
            stderr: output.stderr.trim().to_string(),
        })
    }
}

/// `mkdir -p dir && cat > tmp && chmod && mv`, quoted.
fn upload_command(remote: &str, mode: u32) -> String {
    let dir = match remote.rsplit_once('/') {
        Some(("", _)) => "/".to_string(),
        Some((dir, _)) => dir.to_string(),
        None => ".".to_string(),
    };
    let tmp = format!("{remote}.orchestrate-upload");
    format!(
        "mkdir -p {dir} && cat > {tmp} && chmod {mode:o} {tmp} && mv -f {tmp} {dst}",
        dir = super::quote(&dir),
        tmp = super::quote(&tmp),
        dst = super::quote(remote),
    )
}
