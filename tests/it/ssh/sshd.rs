//! A real OpenSSH server for the SSH tests: generated host and user keys in a temp dir,
//! `sshd -D -e` on a loopback address and a free port, never the system instance. In CI
//! (`CI=true`) a missing sshd fails the test; elsewhere the test skips with a reason.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use orchestrate::hosts::Host;
use orchestrate::ssh::{AgentSocket, ConnectOptions, HostKeyPolicy};

const SSHD: &str = "/usr/sbin/sshd";

/// Keys shared by the servers of one test: the user key every sshd authorizes, a stranger key
/// none does, and a known_hosts file.
pub struct Keys {
    _dir: tempfile::TempDir,
    pub user_key: PathBuf,
    pub stranger_key: PathBuf,
    pub known_hosts: PathBuf,
}

impl Keys {
    /// `None` (skip) when sshd is missing outside CI; panics in CI.
    pub fn new() -> Option<Keys> {
        if !Path::new(SSHD).exists() || which("ssh-keygen").is_none() {
            assert!(
                !crate::common::in_ci(),
                "CI=true but {SSHD} or ssh-keygen is missing: apt-get install -y openssh-server"
            );
            eprintln!(
                "skipping: {SSHD} or ssh-keygen not installed (apt-get install openssh-server)"
            );
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let user_key = dir.path().join("user_key");
        let stranger_key = dir.path().join("stranger_key");
        keygen(&user_key);
        keygen(&stranger_key);
        let known_hosts = dir.path().join("known_hosts");
        Some(Keys {
            _dir: dir,
            user_key,
            stranger_key,
            known_hosts,
        })
    }

    /// Options checking host keys against this test's known_hosts.
    pub fn options(&self, policy: HostKeyPolicy) -> ConnectOptions {
        let mut options = ConnectOptions::new(self.known_hosts.clone());
        options.host_keys = policy;
        // Tests never ask the developer's own agent.
        options.agent = AgentSocket::Disabled;
        options.connect_timeout = Duration::from_secs(5);
        options.keepalive = Duration::from_secs(2);
        options.command_timeout = Duration::from_secs(20);
        options
    }
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(name))
            .find(|p| p.exists())
    })
}

fn keygen(path: &Path) {
    let status = Command::new("ssh-keygen")
        .args([
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            "orchestrate-test",
            "-f",
        ])
        .arg(path)
        .stdin(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "ssh-keygen failed");
}

/// One running sshd.
pub struct Sshd {
    child: Child,
    pub address: String,
    pub port: u16,
    pub host_key: PathBuf,
    _dir: tempfile::TempDir,
}

impl Sshd {
    /// Start sshd on `address` (a 127.0.0.x address) authorizing `keys.user_key`.
    pub fn start(keys: &Keys, address: &str) -> Sshd {
        Self::start_with(keys, address, &[])
    }

    /// Same, with extra `-o` options (`MaxSessions=2`).
    pub fn start_with(keys: &Keys, address: &str, extra: &[&str]) -> Sshd {
        std::fs::create_dir_all("/run/sshd").expect("create /run/sshd (privilege separation dir)");
        let dir = tempfile::tempdir().unwrap();
        let host_key = dir.path().join("host_key");
        keygen(&host_key);
        let authorized = dir.path().join("authorized_keys");
        std::fs::copy(keys.user_key.with_extension("pub"), &authorized).unwrap();
        let port = std::net::TcpListener::bind((address, 0))
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let user = whoami();
        let options = [
            format!("HostKey={}", host_key.display()),
            format!("AuthorizedKeysFile={}", authorized.display()),
            format!("PidFile={}", dir.path().join("sshd.pid").display()),
            format!("ListenAddress={address}"),
            format!("Port={port}"),
            format!("AllowUsers={user}"),
            "StrictModes=no".to_string(),
            "UsePAM=no".to_string(),
            "PasswordAuthentication=no".to_string(),
            "KbdInteractiveAuthentication=no".to_string(),
            "PermitRootLogin=yes".to_string(),
            "AllowTcpForwarding=yes".to_string(),
            "AllowStreamLocalForwarding=yes".to_string(),
            "MaxStartups=100".to_string(),
            "LogLevel=ERROR".to_string(),
        ];
        let mut command = Command::new(SSHD);
        command.args(["-D", "-e", "-f", "/dev/null"]);
        for option in options
            .iter()
            .map(String::as_str)
            .chain(extra.iter().copied())
        {
            command.arg("-o").arg(option);
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start sshd");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect((address, port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "sshd did not listen on {address}:{port}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Sshd {
            child,
            address: address.to_string(),
            port,
            host_key,
            _dir: dir,
        }
    }

    /// A host entry for this server, logging in with the test's user key.
    pub fn host(&self, name: &str, keys: &Keys) -> Host {
        let mut host = Host::direct(name, &self.address, self.port, &whoami());
        host.identity_files = vec![keys.user_key.clone()];
        host
    }

    /// Add this server's key to the test's known_hosts.
    pub fn trust(&self, keys: &Keys) {
        use std::io::Write;
        let public = std::fs::read_to_string(self.host_key.with_extension("pub")).unwrap();
        let mut fields = public.split_whitespace();
        let (kind, key) = (fields.next().unwrap(), fields.next().unwrap());
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&keys.known_hosts)
            .unwrap();
        writeln!(file, "[{}]:{} {kind} {key}", self.address, self.port).unwrap();
    }

    /// Kill the listener and every per-connection sshd process (the connection drops);
    /// user processes started through it are left to their own fate.
    pub fn kill(&mut self) {
        self.signal(libc::SIGKILL);
        let _ = self.child.wait();
    }

    /// Stop (SIGSTOP) every sshd process: connections stay open but nothing answers, as with
    /// a hung host. `Drop` still kills them.
    pub fn freeze(&self) {
        self.signal(libc::SIGSTOP);
    }

    fn signal(&self, signal: i32) {
        let root = self.child.id() as i32;
        let mut victims = vec![root];
        let mut grew = true;
        while grew {
            grew = false;
            for (pid, ppid, comm) in processes() {
                if victims.contains(&ppid) && !victims.contains(&pid) && comm.starts_with("sshd") {
                    victims.push(pid);
                    grew = true;
                }
            }
        }
        for pid in victims {
            // SAFETY: plain kill(2) on pids we found as sshd processes under our own sshd.
            unsafe { libc::kill(pid, signal) };
        }
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        self.kill();
    }
}

/// (pid, ppid, comm) of every process.
fn processes() -> Vec<(i32, i32, String)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = stat[open + 1..close].to_string();
        let ppid = stat[close + 2..]
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        out.push((pid, ppid, comm));
    }
    out
}

/// The current user's name.
pub fn whoami() -> String {
    let out = Command::new("id").arg("-un").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Whether any process's command line contains `marker` (like `pgrep -f`).
pub fn running(marker: &str) -> bool {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc").unwrap().flatten().any(|entry| {
        let name = entry.file_name().to_string_lossy().to_string();
        name != me
            && std::fs::read(entry.path().join("cmdline"))
                .map(|c| {
                    String::from_utf8_lossy(&c)
                        .replace('\0', " ")
                        .contains(marker)
                })
                .unwrap_or(false)
    })
}

/// Poll `done` until true or `limit` passes.
pub async fn eventually(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    done()
}

/// A private ssh-agent holding one key.
pub struct Agent {
    child: Child,
    pub socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Agent {
    pub fn start(key: &Path) -> Agent {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("agent.sock");
        let child = Command::new("ssh-agent")
            .arg("-D")
            .arg("-a")
            .arg(&socket)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start ssh-agent (openssh-client)");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !socket.exists() {
            assert!(Instant::now() < deadline, "ssh-agent did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        let status = Command::new("ssh-add")
            .arg(key)
            .env("SSH_AUTH_SOCK", &socket)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "ssh-add failed");
        Agent {
            child,
            socket,
            _dir: dir,
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
