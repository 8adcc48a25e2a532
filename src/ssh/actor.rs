//! The one place blocking libssh2 lives: each session runs on its own thread, which owns the
//! `ssh2::Session` and multiplexes every channel of it (commands, stdin, output, forwarded
//! connections) in non-blocking mode around `poll(2)`. The async side talks to it only through
//! [`Command`]s and [`ExecEvent`]s. Opening a channel is done in blocking mode (bounded by the
//! command timeout) and briefly pauses the other channels of that session.

use std::collections::{HashMap, VecDeque};
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

use ssh2::{BlockDirections, Channel};
use tokio::sync::oneshot;

use super::SshError;
use super::error::is_again;
use super::forward::{Conn, ForwardTarget};

/// Requests from the async side.
pub(crate) enum Command {
    Exec {
        id: u64,
        command: String,
        sink: EventSink,
    },
    Stdin {
        id: u64,
        data: Vec<u8>,
        done: oneshot::Sender<()>,
    },
    CloseStdin {
        id: u64,
    },
    Forward {
        id: u64,
        listener: TcpListener,
        target: ForwardTarget,
    },
    CloseForward {
        id: u64,
    },
    Shutdown,
}

/// What a remote command reports, in order: `Started` or `Failed`, then output, then one of
/// `Exit` / `Failed`.
#[derive(Debug)]
pub(super) enum ExecEvent {
    Started,
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    Exit(RemoteExit),
    Failed(SshError),
}

/// How a remote command ended, as the server reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteExit {
    pub code: i32,
    /// Signal name (`TERM`, `KILL`) when the server reported one.
    pub signal: Option<String>,
}

/// Where a command's events go: async receivers, or a std channel for synchronous callers
/// (emergency kills run outside the runtime's control).
pub(crate) enum EventSink {
    Async(tokio::sync::mpsc::UnboundedSender<ExecEvent>),
    Sync(std::sync::mpsc::Sender<ExecEvent>),
}

impl EventSink {
    fn send(&self, event: ExecEvent) {
        let _ = match self {
            EventSink::Async(tx) => tx.send(event).map_err(drop),
            EventSink::Sync(tx) => tx.send(event).map_err(drop),
        };
    }
}

struct Exec {
    channel: Channel,
    sink: EventSink,
    stdin: VecDeque<(Vec<u8>, usize, Option<oneshot::Sender<()>>)>,
    close_stdin: bool,
    eof_sent: bool,
    close_sent: bool,
}

const READ_CHUNK: usize = 32 * 1024;

/// What the async side may read about a session thread at any time.
#[derive(Debug)]
pub(crate) struct Status {
    pub alive: AtomicBool,
    /// Open command channels (sshd limits them per connection: `MaxSessions`, default 10).
    pub commands: AtomicUsize,
}

impl Default for Status {
    fn default() -> Self {
        Self {
            alive: AtomicBool::new(true),
            commands: AtomicUsize::new(0),
        }
    }
}

pub(crate) struct Actor {
    pub session: ssh2::Session,
    pub socket: TcpStream,
    pub target: String,
    pub keepalive: Duration,
    pub commands: Receiver<Command>,
    pub wake: UnixStream,
    pub status: Arc<Status>,
    execs: HashMap<u64, Exec>,
    forwards: HashMap<u64, (TcpListener, ForwardTarget)>,
    /// Forwards whose target refused once (warned about once).
    unreachable: std::collections::HashSet<u64>,
    conns: Vec<Conn>,
    closing: Vec<Channel>,
}

impl Actor {
    pub(super) fn new(
        session: ssh2::Session,
        socket: TcpStream,
        target: String,
        keepalive: Duration,
        commands: Receiver<Command>,
        wake: UnixStream,
        status: Arc<Status>,
    ) -> Self {
        Self {
            session,
            socket,
            target,
            keepalive,
            commands,
            wake,
            status,
            execs: HashMap::new(),
            forwards: HashMap::new(),
            unreachable: std::collections::HashSet::new(),
            conns: Vec::new(),
            closing: Vec::new(),
        }
    }

    /// Serve until shut down or the connection is lost.
    pub(super) fn run(mut self) {
        self.session.set_blocking(false);
        let _ = self.wake.set_nonblocking(true);
        let mut next_keepalive = Instant::now() + self.keepalive;
        let mut idle_passes = 0u32;
        // Keepalives ask for a reply: a server that sends nothing for this long is gone (a
        // hung host or a partition that TCP has not noticed yet).
        let silence_limit = (self.keepalive * 3).max(Duration::from_secs(3));
        let mut last_heard = Instant::now();
        loop {
            let mut busy = false;
            loop {
                match self.commands.try_recv() {
                    Ok(Command::Shutdown) | Err(TryRecvError::Disconnected) => {
                        return self.shutdown();
                    }
                    Ok(command) => {
                        busy = true;
                        self.handle(command);
                    }
                    Err(TryRecvError::Empty) => break,
                }
            }
            busy |= self.pump_execs();
            busy |= self.accept();
            busy |= self.pump_conns();
            self.closing
                .retain_mut(|ch| matches!(ch.wait_close(), Err(e) if is_again(&e)));
            if Instant::now() >= next_keepalive {
                match self.session.keepalive_send() {
                    Ok(secs) => {
                        next_keepalive =
                            Instant::now() + Duration::from_secs(u64::from(secs.max(1)));
                    }
                    Err(e) if is_again(&e) => {}
                    Err(e) => return self.lost(format!("keepalive failed: {}", e.message())),
                }
            }
            if busy {
                idle_passes = 0;
                last_heard = Instant::now();
                continue;
            }
            if last_heard.elapsed() > silence_limit {
                return self.lost(format!(
                    "the server sent nothing for {}s despite keepalives",
                    silence_limit.as_secs()
                ));
            }
            idle_passes += 1;
            // Two idle passes before sleeping: a read on one channel can pull another
            // channel's packet into libssh2's buffer, where poll(2) cannot see it.
            if idle_passes < 2 {
                continue;
            }
            let active = !self.execs.is_empty() || !self.conns.is_empty();
            let timeout = if active { 10 } else { 500 };
            if self.wait(timeout) {
                last_heard = Instant::now();
            }
            if let Some(reason) = self.socket_closed() {
                // Drain whatever libssh2 still holds (exit statuses) before giving up.
                self.pump_execs();
                self.pump_conns();
                return self.lost(reason);
            }
        }
    }

    fn handle(&mut self, command: Command) {
        match command {
            Command::Exec { id, command, sink } => match self.open_exec(&command) {
                Ok(channel) => {
                    self.status.commands.fetch_add(1, Ordering::SeqCst);
                    sink.send(ExecEvent::Started);
                    self.execs.insert(
                        id,
                        Exec {
                            channel,
                            sink,
                            stdin: VecDeque::new(),
                            close_stdin: false,
                            eof_sent: false,
                            close_sent: false,
                        },
                    );
                }
                Err(e) => sink.send(ExecEvent::Failed(match self.socket_closed() {
                    Some(reason) => SshError::Lost {
                        target: self.target.clone(),
                        message: reason,
                    },
                    None => self.channel_error("run a command", &e),
                })),
            },
            Command::Stdin { id, data, done } => match self.execs.get_mut(&id) {
                Some(exec) if !exec.close_stdin => exec.stdin.push_back((data, 0, Some(done))),
                _ => drop(done),
            },
            Command::CloseStdin { id } => {
                if let Some(exec) = self.execs.get_mut(&id) {
                    exec.close_stdin = true;
                }
            }
            Command::Forward {
                id,
                listener,
                target,
            } => {
                let _ = listener.set_nonblocking(true);
                self.forwards.insert(id, (listener, target));
            }
            Command::CloseForward { id } => {
                self.forwards.remove(&id);
                self.unreachable.remove(&id);
                let (closed, kept): (Vec<Conn>, Vec<Conn>) =
                    self.conns.drain(..).partition(|c| c.forward == id);
                self.conns = kept;
                for conn in closed {
                    self.retire(conn.channel);
                }
            }
            Command::Shutdown => unreachable!("handled by the loop"),
        }
    }

    fn open_exec(&mut self, command: &str) -> Result<Channel, ssh2::Error> {
        self.session.set_blocking(true);
        let result = self.session.channel_session().and_then(|mut ch| {
            ch.exec(command)?;
            Ok(ch)
        });
        self.session.set_blocking(false);
        result
    }

    fn channel_error(&self, what: &str, e: &ssh2::Error) -> SshError {
        SshError::Channel {
            target: self.target.clone(),
            what: what.to_string(),
            message: e.message().to_string(),
        }
    }

    /// Move stdin in and output out of every command; report exits.
    fn pump_execs(&mut self) -> bool {
        let mut busy = false;
        let mut finished = Vec::new();
        let mut buf = vec![0u8; READ_CHUNK];
        for (id, exec) in &mut self.execs {
            while let Some((data, offset, done)) = exec.stdin.front_mut() {
                match exec.channel.write(&data[*offset..]) {
                    Ok(n) => {
                        busy = true;
                        *offset += n;
                        if *offset == data.len() {
                            if let Some(done) = done.take() {
                                let _ = done.send(());
                            }
                            exec.stdin.pop_front();
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(_) => {
                        exec.stdin.clear();
                        exec.close_stdin = true;
                        exec.eof_sent = true;
                    }
                }
            }
            if exec.close_stdin && exec.stdin.is_empty() && !exec.eof_sent {
                match exec.channel.send_eof() {
                    Err(e) if is_again(&e) => {}
                    _ => exec.eof_sent = true,
                }
            }
            for stream in [0, 1] {
                for _ in 0..8 {
                    match exec.channel.stream(stream).read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => {
                            busy = true;
                            let bytes = buf[..n].to_vec();
                            exec.sink.send(if stream == 0 {
                                ExecEvent::Stdout(bytes)
                            } else {
                                ExecEvent::Stderr(bytes)
                            });
                        }
                        Err(_) => break,
                    }
                }
            }
            if exec.channel.eof() {
                if !exec.close_sent {
                    match exec.channel.close() {
                        Err(e) if is_again(&e) => continue,
                        _ => exec.close_sent = true,
                    }
                }
                match exec.channel.wait_close() {
                    Err(e) if is_again(&e) => {}
                    _ => {
                        let code = exec.channel.exit_status().unwrap_or(-1);
                        let signal = exec.channel.exit_signal().ok().and_then(|s| s.exit_signal);
                        exec.sink.send(ExecEvent::Exit(RemoteExit { code, signal }));
                        finished.push(*id);
                        busy = true;
                    }
                }
            }
        }
        for id in finished {
            self.execs.remove(&id);
            self.status.commands.fetch_sub(1, Ordering::SeqCst);
        }
        busy
    }

    /// Accept new local connections on every forward and open their channels.
    fn accept(&mut self) -> bool {
        let mut accepted = Vec::new();
        for (id, (listener, target)) in &self.forwards {
            while let Ok((stream, _)) = listener.accept() {
                accepted.push((*id, stream, target.clone()));
            }
        }
        let busy = !accepted.is_empty();
        for (id, stream, target) in accepted {
            self.session.set_blocking(true);
            let channel = target.open(&self.session);
            self.session.set_blocking(false);
            match channel {
                Ok((channel, i)) => {
                    if let Some((_, target)) = self.forwards.get_mut(&id) {
                        target.prefer(i);
                    }
                    match Conn::new(id, stream, channel) {
                        Ok(conn) => self.conns.push(conn),
                        Err(channel) => self.retire(channel),
                    }
                }
                // A server still starting refuses every connection: say so once per tunnel.
                Err(e) if self.unreachable.insert(id) => tracing::warn!(
                    "ssh tunnel on {} could not reach {target}: {} (further failures of this tunnel are not reported)",
                    self.target,
                    e.message()
                ),
                Err(e) => tracing::debug!(
                    "ssh tunnel on {} could not reach {target}: {}",
                    self.target,
                    e.message()
                ),
            }
        }
        busy
    }

    fn pump_conns(&mut self) -> bool {
        let mut busy = false;
        let mut done = Vec::new();
        for (i, conn) in self.conns.iter_mut().enumerate() {
            let (moved, finished) = conn.pump();
            busy |= moved;
            if finished {
                done.push(i);
            }
        }
        for i in done.into_iter().rev() {
            let conn = self.conns.swap_remove(i);
            self.retire(conn.channel);
        }
        busy
    }

    /// Close a channel without blocking; it is freed once the server confirms.
    fn retire(&mut self, mut channel: Channel) {
        let _ = channel.close();
        self.closing.push(channel);
    }

    /// Sleep until something can move or `timeout_ms` passes; true when the server sent data.
    fn wait(&self, timeout_ms: i32) -> bool {
        let mut events = libc::POLLIN;
        if matches!(
            self.session.block_directions(),
            BlockDirections::Outbound | BlockDirections::Both
        ) {
            events |= libc::POLLOUT;
        }
        let mut fds = vec![
            pollfd(self.socket.as_raw_fd(), events),
            pollfd(self.wake.as_raw_fd(), libc::POLLIN),
        ];
        fds.extend(
            self.forwards
                .values()
                .map(|(l, _)| pollfd(l.as_raw_fd(), libc::POLLIN)),
        );
        fds.extend(
            self.conns
                .iter()
                .filter_map(|c| c.poll_events().map(|ev| pollfd(c.fd(), ev))),
        );
        // SAFETY: fds is a valid, initialised array of pollfd for the duration of the call.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
        let mut sink = [0u8; 64];
        while matches!((&self.wake).read(&mut sink), Ok(n) if n > 0) {}
        fds[0].revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0
    }

    /// `Some(reason)` once the server closed the TCP connection.
    fn socket_closed(&self) -> Option<String> {
        let mut byte = 0u8;
        // SAFETY: peeks at most one byte into a valid buffer; the socket stays owned by us.
        let n = unsafe {
            libc::recv(
                self.socket.as_raw_fd(),
                (&mut byte as *mut u8).cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        match n {
            0 => Some("the server closed the connection".to_string()),
            n if n > 0 => None,
            _ => {
                let err = std::io::Error::last_os_error();
                match err.kind() {
                    ErrorKind::WouldBlock | ErrorKind::Interrupted => None,
                    _ => Some(err.to_string()),
                }
            }
        }
    }

    fn lost(mut self, reason: String) {
        self.status.alive.store(false, Ordering::SeqCst);
        tracing::warn!("lost the ssh connection to {}: {reason}", self.target);
        for (_, exec) in self.execs.drain() {
            exec.sink.send(ExecEvent::Failed(SshError::Lost {
                target: self.target.clone(),
                message: reason.clone(),
            }));
        }
        self.refuse_pending(&reason);
    }

    /// Answer commands that arrived after the end so no caller waits forever.
    fn refuse_pending(&self, reason: &str) {
        while let Ok(command) = self.commands.try_recv() {
            if let Command::Exec { sink, .. } = command {
                sink.send(ExecEvent::Failed(SshError::Lost {
                    target: self.target.clone(),
                    message: reason.to_string(),
                }));
            }
        }
    }

    fn shutdown(mut self) {
        self.status.alive.store(false, Ordering::SeqCst);
        self.session.set_blocking(true);
        self.session.set_timeout(2000);
        for (_, exec) in self.execs.drain() {
            exec.sink.send(ExecEvent::Failed(SshError::Lost {
                target: self.target.clone(),
                message: "the session was closed".to_string(),
            }));
        }
        let _ = self.session.disconnect(None, "orchestrate done", None);
        self.refuse_pending("the session was closed");
    }
}

fn pollfd(fd: i32, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}
