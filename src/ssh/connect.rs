//! Opening an authenticated libssh2 session: TCP connect with a deadline, handshake, host key
//! checked against known_hosts (or trusted on first use when asked), then key files, ssh-agent
//! and the default keys. Blocking: runs only on a session's own thread (see `actor`).

use std::io::Write;
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ssh2::{CheckResult, HashType, KnownHostFileKind};

use super::SshError;
use crate::hosts::Host;

/// What to do with a host key that known_hosts does not list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HostKeyPolicy {
    /// Unknown keys are an error (the default).
    #[default]
    Strict,
    /// Trust an unknown key and append it to known_hosts; a changed key is still an error.
    AcceptNew,
}

/// Which ssh-agent to ask for keys.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum AgentSocket {
    /// The one `SSH_AUTH_SOCK` names, if any (the default).
    #[default]
    Environment,
    /// An agent listening on this socket.
    Path(PathBuf),
    /// Never ask an agent.
    Disabled,
}

/// How sessions are opened and kept.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    pub known_hosts: PathBuf,
    pub host_keys: HostKeyPolicy,
    pub agent: AgentSocket,
    /// TCP connect + handshake + auth deadline.
    pub connect_timeout: Duration,
    /// SSH keepalive interval (also the TCP keepalive idle time).
    pub keepalive: Duration,
    /// Deadline of one blocking step (opening a channel, a command's `run`).
    pub command_timeout: Duration,
}

impl ConnectOptions {
    /// Defaults: 10 s to connect, 15 s keepalive, 60 s per command, strict host keys.
    pub fn new(known_hosts: PathBuf) -> Self {
        Self {
            known_hosts,
            host_keys: HostKeyPolicy::Strict,
            agent: AgentSocket::Environment,
            connect_timeout: Duration::from_secs(10),
            keepalive: Duration::from_secs(15),
            command_timeout: Duration::from_secs(60),
        }
    }
}

/// Where to open the TCP connection (the host itself, or a local tunnel end through its jump
/// host) and which name/port the host key is filed under.
pub(crate) struct Dial {
    pub socket: (String, u16),
    pub key_name: (String, u16),
}

/// Connect, verify and authenticate. Returns the session (blocking mode) and a clone of its
/// socket for polling.
pub(crate) fn open(
    host: &Host,
    dial: &Dial,
    options: &ConnectOptions,
) -> Result<(ssh2::Session, TcpStream), SshError> {
    let target = host.describe();
    let connect_err = |message: String| SshError::Connect {
        target: target.clone(),
        message,
    };
    let addrs: Vec<_> = (dial.socket.0.as_str(), dial.socket.1)
        .to_socket_addrs()
        .map_err(|e| connect_err(format!("cannot resolve {}: {e}", dial.socket.0)))?
        .collect();
    let mut last = None;
    let mut stream = None;
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, options.connect_timeout) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    let stream = stream.ok_or_else(|| {
        connect_err(last.map_or_else(|| "no address".to_string(), |e| e.to_string()))
    })?;
    let _ = stream.set_nodelay(true);
    set_tcp_keepalive(&stream, options.keepalive);
    let socket = stream
        .try_clone()
        .map_err(|e| connect_err(format!("cannot clone socket: {e}")))?;
    let mut session = ssh2::Session::new().map_err(|e| connect_err(e.to_string()))?;
    session.set_tcp_stream(stream);
    session.set_timeout(millis(options.connect_timeout));
    session.handshake().map_err(|e| SshError::Handshake {
        target: target.clone(),
        message: e.message().to_string(),
    })?;
    verify_host_key(&session, host, &dial.key_name, options)?;
    authenticate(&session, host, &options.agent)?;
    session.set_keepalive(true, options.keepalive.as_secs().max(1) as u32);
    session.set_timeout(millis(options.command_timeout));
    Ok((session, socket))
}

fn millis(d: Duration) -> u32 {
    d.as_millis().min(u128::from(u32::MAX)) as u32
}

/// TCP keepalive and a user timeout, so a silent network partition ends the session instead
/// of hanging it.
fn set_tcp_keepalive(stream: &TcpStream, idle: Duration) {
    use std::os::fd::AsRawFd;
    let fd = stream.as_raw_fd();
    let set = |level, name, value: libc::c_int| {
        // SAFETY: fd is a valid socket owned by `stream`; value is a plain c_int.
        unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                (&value as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    };
    set(libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1);
    set(
        libc::IPPROTO_TCP,
        libc::TCP_KEEPIDLE,
        idle.as_secs().max(1) as libc::c_int,
    );
    set(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, 5);
    set(libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 3);
    // Data the host never acknowledges also ends the session (default: ~15 min of retries).
    let user_timeout = (idle.as_millis() * 2 + 15_000).min(i32::MAX as u128) as libc::c_int;
    set(libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT, user_timeout);
}

/// The known_hosts entry name: `host`, or `[host]:port` off port 22.
pub(crate) fn known_hosts_entry(name: &str, port: u16) -> String {
    if port == 22 {
        name.to_string()
    } else {
        format!("[{name}]:{port}")
    }
}

fn verify_host_key(
    session: &ssh2::Session,
    host: &Host,
    (name, port): &(String, u16),
    options: &ConnectOptions,
) -> Result<(), SshError> {
    let path = &options.known_hosts;
    let kh_err = |message: String| SshError::KnownHosts {
        path: path.clone(),
        message,
    };
    let (key, _) = session
        .host_key()
        .ok_or_else(|| kh_err("the server sent no host key".to_string()))?;
    let fingerprint = session
        .host_key_hash(HashType::Sha256)
        .map(|h| format!("SHA256:{}", base64(h, false)))
        .unwrap_or_else(|| "no fingerprint".to_string());
    let mut known = session.known_hosts().map_err(|e| kh_err(e.to_string()))?;
    if path.exists() {
        known
            .read_file(path, KnownHostFileKind::OpenSSH)
            .map_err(|e| kh_err(e.message().to_string()))?;
    }
    match known.check_port(name, *port, key) {
        CheckResult::Match => Ok(()),
        CheckResult::Mismatch => Err(SshError::ChangedHostKey {
            target: host.describe(),
            entry: known_hosts_entry(name, *port),
            fingerprint,
            known_hosts: path.clone(),
        }),
        CheckResult::NotFound => match options.host_keys {
            HostKeyPolicy::Strict => Err(SshError::UnknownHostKey {
                target: host.describe(),
                address: name.clone(),
                port: *port,
                fingerprint,
                known_hosts: path.clone(),
            }),
            HostKeyPolicy::AcceptNew => {
                append_known_host(path, &known_hosts_entry(name, *port), key)
                    .map_err(|e| kh_err(e.to_string()))?;
                tracing::warn!(
                    "trusted new host key for {} ({fingerprint}), added to {}",
                    host.describe(),
                    path.display()
                );
                Ok(())
            }
        },
        CheckResult::Failure => Err(kh_err("libssh2 could not check the key".to_string())),
    }
}

/// Append `entry keytype base64` to known_hosts (created 0600 with its directory).
fn append_known_host(path: &Path, entry: &str, key: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // The key blob starts with its type as an SSH string: u32 length, then the name.
    let kind = key
        .get(..4)
        .map(|len| u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize)
        .and_then(|len| key.get(4..4 + len))
        .and_then(|name| std::str::from_utf8(name).ok())
        .ok_or_else(|| std::io::Error::other("malformed host key blob"))?;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    writeln!(file, "{entry} {kind} {}", base64(key, true))
}

fn authenticate(session: &ssh2::Session, host: &Host, agent: &AgentSocket) -> Result<(), SshError> {
    let user = &host.user;
    let mut tried = Vec::new();
    let try_key = |path: &Path, tried: &mut Vec<String>| -> bool {
        if !path.exists() {
            tried.push(format!("{} (missing)", path.display()));
            return false;
        }
        match session.userauth_pubkey_file(user, None, path, None) {
            Ok(()) => true,
            Err(e) => {
                tried.push(format!("key {} ({})", path.display(), e.message()));
                false
            }
        }
    };
    for path in &host.identity_files {
        if try_key(path, &mut tried) {
            return Ok(());
        }
    }
    let socket = match agent {
        AgentSocket::Environment => std::env::var_os("SSH_AUTH_SOCK").map(PathBuf::from),
        AgentSocket::Path(path) => Some(path.clone()),
        AgentSocket::Disabled => None,
    };
    if let Some(socket) = socket {
        match agent_auth(session, user, &socket) {
            Ok(()) => return Ok(()),
            Err(why) => tried.push(format!("ssh-agent at {} ({why})", socket.display())),
        }
    }
    if host.identity_files.is_empty() {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default();
        for name in ["id_ed25519", "id_ecdsa", "id_rsa"] {
            let path = home.join(".ssh").join(name);
            if path.exists() && try_key(&path, &mut tried) {
                return Ok(());
            }
        }
    }
    if tried.is_empty() {
        tried.push("no identity file, no ssh-agent, no default key".to_string());
    }
    Err(SshError::Auth {
        target: host.describe(),
        tried: tried.join(", "),
    })
}

/// Try every identity the agent at `socket` holds.
fn agent_auth(session: &ssh2::Session, user: &str, socket: &Path) -> Result<(), String> {
    let mut agent = session.agent().map_err(|e| e.message().to_string())?;
    agent
        .set_identity_path(socket)
        .map_err(|e| e.message().to_string())?;
    agent.connect().map_err(|e| e.message().to_string())?;
    agent
        .list_identities()
        .map_err(|e| e.message().to_string())?;
    let identities = agent.identities().map_err(|e| e.message().to_string())?;
    if identities.is_empty() {
        let _ = agent.disconnect();
        return Err("no keys".to_string());
    }
    let result = identities
        .iter()
        .find(|id| agent.userauth(user, id).is_ok())
        .map(drop)
        .ok_or_else(|| format!("none of its {} keys was accepted", identities.len()));
    let _ = agent.disconnect();
    result
}

/// Standard base64 (with or without `=` padding).
fn base64(bytes: &[u8], pad: bool) -> String {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(TABLE[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else if pad {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard_alphabet() {
        assert_eq!(base64(b"", true), "");
        assert_eq!(base64(b"f", true), "Zg==");
        assert_eq!(base64(b"fo", true), "Zm8=");
        assert_eq!(base64(b"foo", true), "Zm9v");
        assert_eq!(base64(b"foob", false), "Zm9vYg");
    }

    #[test]
    fn known_hosts_entries_bracket_non_default_ports() {
        assert_eq!(known_hosts_entry("h", 22), "h");
        assert_eq!(known_hosts_entry("127.0.0.1", 2222), "[127.0.0.1]:2222");
    }
}
