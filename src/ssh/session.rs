//! The async handle to one SSH session: connect (through jump hosts), run commands with
//! streamed output, upload files, open local port forwards. Cheap to clone; the connection
//! closes when the last clone (and every tunnel and command of it) is dropped. All libssh2
//! work happens on the session's thread (`actor`).

use std::net::{SocketAddr, TcpListener};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

use super::actor::{Actor, Command, EventSink, ExecEvent, Status};
use super::connect::{self, ConnectOptions, Dial};
use super::{ForwardTarget, SshError};
use crate::hosts::Host;

/// A live SSH session.
#[derive(Clone)]
pub struct Session {
    inner: Arc<Inner>,
}

struct Inner {
    host: Host,
    options: ConnectOptions,
    commands: Mutex<std::sync::mpsc::Sender<Command>>,
    wake: UnixStream,
    status: Arc<Status>,
    next_id: AtomicU64,
    /// The jump session and its tunnel, kept open as long as this session.
    _via: Option<(Session, Tunnel)>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.send(Command::Shutdown);
    }
}

impl Inner {
    fn send(&self, command: Command) -> bool {
        let sent = self
            .commands
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .send(command)
            .is_ok();
        // Wake the session thread; a full socket means a wake-up is already pending.
        let _ = std::io::Write::write(&mut &self.wake, &[1]);
        sent
    }
}

impl Session {
    /// Connect to `host` (through its jump chain), verify its key and authenticate.
    pub async fn connect(host: &Host, options: &ConnectOptions) -> Result<Session, SshError> {
        Box::pin(Self::connect_inner(host.clone(), options.clone())).await
    }

    async fn connect_inner(host: Host, options: ConnectOptions) -> Result<Session, SshError> {
        let key_name = (host.address.clone(), host.port);
        let (dial, via) = match &host.jump {
            Some(jump) => {
                let jump_session = Session::connect(jump, &options).await?;
                let tunnel = jump_session
                    .forward(ForwardTarget::Tcp {
                        host: host.address.clone(),
                        port: host.port,
                    })
                    .await?;
                let dial = Dial {
                    socket: ("127.0.0.1".to_string(), tunnel.local_addr().port()),
                    key_name,
                };
                (dial, Some((jump_session, tunnel)))
            }
            None => (
                Dial {
                    socket: key_name.clone(),
                    key_name,
                },
                None,
            ),
        };
        let local = |what: &str, e: std::io::Error| SshError::Local {
            what: what.to_string(),
            message: e.to_string(),
        };
        let (wake_tx, wake_rx) =
            UnixStream::pair().map_err(|e| local("create a socket pair", e))?;
        wake_tx
            .set_nonblocking(true)
            .map_err(|e| local("configure a socket", e))?;
        let (tx, rx) = std::sync::mpsc::channel();
        let (ready_tx, ready_rx) = oneshot::channel();
        let status = Arc::new(Status::default());
        let thread_host = host.clone();
        let thread_options = options.clone();
        let thread_status = status.clone();
        std::thread::Builder::new()
            .name(format!("ssh-{}", host.name))
            .spawn(
                move || match connect::open(&thread_host, &dial, &thread_options) {
                    Ok((session, socket)) => {
                        let _ = ready_tx.send(Ok(()));
                        Actor::new(
                            session,
                            socket,
                            thread_host.describe(),
                            thread_options.keepalive,
                            rx,
                            wake_rx,
                            thread_status,
                        )
                        .run();
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                },
            )
            .map_err(|e| local("start the ssh session thread", e))?;
        // connect::open bounds each step by the connect timeout; this is the backstop.
        let limit = options.connect_timeout * 3 + Duration::from_secs(1);
        let outcome = tokio::time::timeout(limit, ready_rx).await;
        match outcome {
            Ok(Ok(Ok(()))) => Ok(Session {
                inner: Arc::new(Inner {
                    host,
                    options,
                    commands: Mutex::new(tx),
                    wake: wake_tx,
                    status,
                    next_id: AtomicU64::new(1),
                    _via: via,
                }),
            }),
            Ok(Ok(Err(e))) => Err(e),
            Ok(Err(_)) => Err(SshError::Connect {
                target: host.describe(),
                message: "the session thread ended".to_string(),
            }),
            Err(_) => Err(SshError::Timeout {
                target: host.describe(),
                what: "connect".to_string(),
                seconds: limit.as_secs(),
            }),
        }
    }

    /// The host this session is connected to.
    pub fn host(&self) -> &Host {
        &self.inner.host
    }

    /// The options it was opened with.
    pub fn options(&self) -> &ConnectOptions {
        &self.inner.options
    }

    /// False once the connection was lost or closed.
    pub fn is_alive(&self) -> bool {
        self.inner.status.alive.load(Ordering::SeqCst)
    }

    /// Command channels open right now (sshd's `MaxSessions` caps them per connection).
    pub fn open_commands(&self) -> usize {
        self.inner.status.commands.load(Ordering::SeqCst)
    }

    /// Hand a request to the session thread; false once it is gone.
    pub(super) fn send(&self, command: Command) -> bool {
        self.inner.send(command)
    }

    pub(super) fn lost(&self) -> SshError {
        SshError::Lost {
            target: self.inner.host.describe(),
            message: "the session is closed".to_string(),
        }
    }

    /// A fresh id for a command or forward of this session.
    pub(super) fn next_id(&self) -> u64 {
        self.inner.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Synchronous best-effort run for emergency paths (no runtime needed): waits at most
    /// `timeout` for the command to finish. Returns whether it exited with 0.
    pub fn run_blocking(&self, command: &str, timeout: Duration) -> bool {
        let (tx, rx) = std::sync::mpsc::channel();
        if !self.inner.send(Command::Exec {
            id: self.next_id(),
            command: command.to_string(),
            sink: EventSink::Sync(tx),
        }) {
            return false;
        }
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(ExecEvent::Exit(exit)) => return exit.code == 0,
                Ok(ExecEvent::Failed(_)) | Err(_) => return false,
                Ok(_) => {}
            }
        }
    }

    /// Start `command` and forget it (Drop fallbacks): nobody waits for its output.
    pub fn spawn_detached(&self, command: &str) {
        let (tx, _rx) = std::sync::mpsc::channel();
        self.inner.send(Command::Exec {
            id: self.next_id(),
            command: command.to_string(),
            sink: EventSink::Sync(tx),
        });
    }

    /// Listen on `127.0.0.1:0` locally and forward each connection to `target` on the host.
    pub async fn forward(&self, target: ForwardTarget) -> Result<Tunnel, SshError> {
        let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| SshError::Local {
            what: "listen for a tunnel".to_string(),
            message: e.to_string(),
        })?;
        let local_addr = listener.local_addr().map_err(|e| SshError::Local {
            what: "listen for a tunnel".to_string(),
            message: e.to_string(),
        })?;
        let id = self.next_id();
        if !self.inner.send(Command::Forward {
            id,
            listener,
            target: target.clone(),
        }) {
            return Err(self.lost());
        }
        Ok(Tunnel {
            id,
            local_addr,
            target,
            session: self.clone(),
        })
    }
}

/// A local listener forwarding to a target on the host; closed when dropped.
pub struct Tunnel {
    id: u64,
    local_addr: SocketAddr,
    target: ForwardTarget,
    session: Session,
}

impl Tunnel {
    /// Where to connect locally (`127.0.0.1:<port>`).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Where it leads on the host.
    pub fn target(&self) -> &ForwardTarget {
        &self.target
    }
}

impl Drop for Tunnel {
    fn drop(&mut self) {
        self.session
            .inner
            .send(Command::CloseForward { id: self.id });
    }
}
