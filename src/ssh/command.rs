//! Commands on a session: starting one (`exec`, `run`, `run_ok`), its events (output as it
//! comes, then the exit status or the loss of the connection), its stdin, collecting its output.

use tokio::sync::{mpsc, oneshot};

use super::actor::{Command, EventSink, ExecEvent, RemoteExit};
use super::{Session, SshError};

impl Session {
    /// Start `command` (run by the login shell); output and exit come as events.
    pub async fn exec(&self, command: &str) -> Result<RemoteCommand, SshError> {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let id = self.next_id();
        if !self.send(Command::Exec {
            id,
            command: command.to_string(),
            sink: EventSink::Async(tx),
        }) {
            return Err(self.lost());
        }
        match rx.recv().await {
            Some(ExecEvent::Started) => Ok(RemoteCommand::new(id, self.clone(), rx)),
            Some(ExecEvent::Failed(e)) => Err(e),
            _ => Err(self.lost()),
        }
    }

    /// Run `command` to completion (bounded by the command timeout) and collect its output.
    pub async fn run(&self, command: &str) -> Result<CommandOutput, SshError> {
        let timeout = self.options().command_timeout;
        let work = async {
            let process = self.exec(command).await?;
            process.close_stdin();
            process.collect().await
        };
        tokio::time::timeout(timeout, work)
            .await
            .map_err(|_| SshError::Timeout {
                target: self.host().describe(),
                what: format!("`{command}`"),
                seconds: timeout.as_secs(),
            })?
    }

    /// Run `command`; a non-zero exit is an error carrying its stderr. Returns stdout.
    pub async fn run_ok(&self, command: &str) -> Result<String, SshError> {
        let output = self.run(command).await?;
        if output.exit.code == 0 {
            Ok(output.stdout)
        } else {
            Err(SshError::Command {
                target: self.host().describe(),
                command: command.to_string(),
                status: format!("exit code {}", output.exit.code),
                stderr: output.stderr.trim().to_string(),
            })
        }
    }
}

/// Output of a finished command.
#[derive(Debug, Clone)]
pub struct CommandOutput {
    pub exit: RemoteExit,
    pub stdout: String,
    pub stderr: String,
}

/// A running remote command.
pub struct RemoteCommand {
    id: u64,
    session: Session,
    events: mpsc::UnboundedReceiver<ExecEvent>,
}

/// What a running command reports after it started.
#[derive(Debug)]
pub enum CommandEvent {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    /// The command ended; last event.
    Exit(RemoteExit),
    /// The connection failed before an exit status arrived; last event.
    Failed(SshError),
}

impl RemoteCommand {
    pub(super) fn new(
        id: u64,
        session: Session,
        events: mpsc::UnboundedReceiver<ExecEvent>,
    ) -> Self {
        Self {
            id,
            session,
            events,
        }
    }

    /// The next event; `None` after the last one.
    pub async fn next(&mut self) -> Option<CommandEvent> {
        loop {
            return match self.events.recv().await? {
                ExecEvent::Started => continue,
                ExecEvent::Stdout(b) => Some(CommandEvent::Stdout(b)),
                ExecEvent::Stderr(b) => Some(CommandEvent::Stderr(b)),
                ExecEvent::Exit(e) => Some(CommandEvent::Exit(e)),
                ExecEvent::Failed(e) => Some(CommandEvent::Failed(e)),
            };
        }
    }

    /// Write to the command's stdin; resolves once the bytes are in the channel.
    pub async fn write_stdin(&self, data: &[u8]) -> Result<(), SshError> {
        let (done, wait) = oneshot::channel();
        if !self.session.send(Command::Stdin {
            id: self.id,
            data: data.to_vec(),
            done,
        }) {
            return Err(self.session.lost());
        }
        wait.await.map_err(|_| SshError::Channel {
            target: self.session.host().describe(),
            what: "write to a command's stdin".to_string(),
            message: "the command's channel is closed".to_string(),
        })
    }

    /// Send EOF on stdin (once pending writes are done).
    pub fn close_stdin(&self) {
        self.session.send(Command::CloseStdin { id: self.id });
    }

    /// A handle that can close stdin while another task reads the events.
    pub fn stdin_closer(&self) -> StdinCloser {
        StdinCloser {
            id: self.id,
            session: self.session.clone(),
        }
    }

    /// Wait for the end, collecting output.
    pub async fn collect(mut self) -> Result<CommandOutput, SshError> {
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        while let Some(event) = self.next().await {
            match event {
                CommandEvent::Stdout(b) => stdout.extend(b),
                CommandEvent::Stderr(b) => stderr.extend(b),
                CommandEvent::Exit(exit) => {
                    return Ok(CommandOutput {
                        exit,
                        stdout: String::from_utf8_lossy(&stdout).into_owned(),
                        stderr: String::from_utf8_lossy(&stderr).into_owned(),
                    });
                }
                CommandEvent::Failed(e) => return Err(e),
            }
        }
        Err(self.session.lost())
    }

    /// The session it runs on.
    pub fn session(&self) -> &Session {
        &self.session
    }
}

impl Drop for RemoteCommand {
    /// Nobody can write to it any more: EOF on stdin (a lock holder releases, a watchdog
    /// fires). Already-finished commands ignore it.
    fn drop(&mut self) {
        self.session.send(Command::CloseStdin { id: self.id });
    }
}

/// Closes a command's stdin (the remote watchdog pattern: EOF on stdin means "stop").
#[derive(Clone)]
pub struct StdinCloser {
    id: u64,
    session: Session,
}

impl StdinCloser {
    pub fn close(&self) {
        self.session.send(Command::CloseStdin { id: self.id });
    }
}
