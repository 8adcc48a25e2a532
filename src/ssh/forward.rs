//! Local port forwarding: one accepted local TCP connection bridged to one SSH channel
//! (`direct-tcpip` to a remote host:port, or `direct-streamlocal` to a remote unix socket such
//! as `/var/run/docker.sock`). Non-blocking; driven by the session thread (`actor`).

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;

use ssh2::Channel;

/// Where a tunnel leads, as seen from the remote host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForwardTarget {
    /// A TCP address reachable from the host (`127.0.0.1:8000` is the host's own loopback).
    Tcp { host: String, port: u16 },
    /// A unix socket on the host (the Docker engine's `/var/run/docker.sock`).
    Unix { path: String },
    /// The first of these addresses that accepts on `port`, as seen from the host: a server
    /// listens on the host's loopback, on its address, or on both. The address that last
    /// accepted is tried first.
    TcpFirst { hosts: Vec<String>, port: u16 },
}

impl std::fmt::Display for ForwardTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ForwardTarget::Tcp { host, port } => write!(f, "{host}:{port}"),
            ForwardTarget::Unix { path } => write!(f, "unix:{path}"),
            ForwardTarget::TcpFirst { hosts, port } => {
                let list: Vec<String> = hosts.iter().map(|h| format!("{h}:{port}")).collect();
                write!(f, "{}", list.join(" or "))
            }
        }
    }
}

impl ForwardTarget {
    /// Open the channel (the session must be in blocking mode). Ok carries the index of the
    /// address that accepted (0 but for [`ForwardTarget::TcpFirst`]).
    pub(crate) fn open(&self, session: &ssh2::Session) -> Result<(Channel, usize), ssh2::Error> {
        match self {
            ForwardTarget::Tcp { host, port } => session
                .channel_direct_tcpip(host, *port, None)
                .map(|c| (c, 0)),
            ForwardTarget::Unix { path } => session
                .channel_direct_streamlocal(path, None)
                .map(|c| (c, 0)),
            ForwardTarget::TcpFirst { hosts, port } => {
                let mut last = None;
                for (i, host) in hosts.iter().enumerate() {
                    match session.channel_direct_tcpip(host, *port, None) {
                        Ok(channel) => return Ok((channel, i)),
                        Err(e) => last = Some(e),
                    }
                }
                Err(last.unwrap_or_else(|| {
                    ssh2::Error::new(ssh2::ErrorCode::Session(-1), "no address to forward to")
                }))
            }
        }
    }

    /// After address `i` of a [`ForwardTarget::TcpFirst`] accepted: try it first next time.
    pub(crate) fn prefer(&mut self, i: usize) {
        if let ForwardTarget::TcpFirst { hosts, .. } = self
            && i > 0
            && i < hosts.len()
        {
            let host = hosts.remove(i);
            hosts.insert(0, host);
        }
    }
}

/// Bytes buffered per direction before reading pauses (backpressure).
const BUFFER: usize = 256 * 1024;

/// One forwarded connection.
pub(crate) struct Conn {
    pub forward: u64,
    stream: TcpStream,
    pub channel: Channel,
    up: Vec<u8>,
    down: Vec<u8>,
    local_eof: bool,
    eof_sent: bool,
    remote_eof: bool,
    local_shut: bool,
    broken: bool,
}

impl Conn {
    pub(super) fn new(forward: u64, stream: TcpStream, channel: Channel) -> Result<Self, Channel> {
        if stream.set_nonblocking(true).is_err() {
            return Err(channel);
        }
        let _ = stream.set_nodelay(true);
        Ok(Self {
            forward,
            stream,
            channel,
            up: Vec::new(),
            down: Vec::new(),
            local_eof: false,
            eof_sent: false,
            remote_eof: false,
            local_shut: false,
            broken: false,
        })
    }

    pub(super) fn fd(&self) -> i32 {
        self.stream.as_raw_fd()
    }

    /// What to wait for on the local socket, if anything.
    pub(super) fn poll_events(&self) -> Option<libc::c_short> {
        let mut events = 0;
        if !self.local_eof && self.up.len() < BUFFER {
            events |= libc::POLLIN;
        }
        if !self.down.is_empty() {
            events |= libc::POLLOUT;
        }
        (events != 0).then_some(events)
    }

    /// Move what can move; returns (moved anything, finished).
    pub(super) fn pump(&mut self) -> (bool, bool) {
        let mut moved = false;
        let mut buf = [0u8; 32 * 1024];
        // local -> remote
        if !self.local_eof && self.up.len() < BUFFER {
            match self.stream.read(&mut buf) {
                Ok(0) => {
                    self.local_eof = true;
                    moved = true;
                }
                Ok(n) => {
                    self.up.extend_from_slice(&buf[..n]);
                    moved = true;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(_) => self.broken = true,
            }
        }
        while !self.up.is_empty() {
            match self.channel.write(&self.up) {
                Ok(n) => {
                    self.up.drain(..n);
                    moved = true;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(_) => {
                    self.broken = true;
                    break;
                }
            }
        }
        if self.local_eof && self.up.is_empty() && !self.eof_sent {
            match self.channel.send_eof() {
                Err(e) if super::error::is_again(&e) => {}
                _ => self.eof_sent = true,
            }
        }
        // remote -> local
        while !self.remote_eof && self.down.len() < BUFFER {
            match self.channel.read(&mut buf) {
                Ok(0) => {
                    if self.channel.eof() {
                        self.remote_eof = true;
                        moved = true;
                    }
                    break;
                }
                Ok(n) => {
                    self.down.extend_from_slice(&buf[..n]);
                    moved = true;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(_) => {
                    self.broken = true;
                    break;
                }
            }
        }
        while !self.down.is_empty() {
            match self.stream.write(&self.down) {
                Ok(n) => {
                    self.down.drain(..n);
                    moved = true;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(_) => {
                    self.broken = true;
                    break;
                }
            }
        }
        if self.remote_eof && self.down.is_empty() && !self.local_shut {
            let _ = self.stream.shutdown(Shutdown::Write);
            self.local_shut = true;
        }
        let finished = self.broken
            || (self.local_shut && self.local_eof && self.eof_sent && self.up.is_empty());
        (moved, finished)
    }
}
