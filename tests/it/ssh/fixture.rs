//! Setups several SSH tests share: the hosts file naming the test's sshd servers, one or two
//! trusted servers with such a file, and one server with a session connected to it. Each
//! returns `None` (the test skips) when sshd is missing outside CI, like [`Keys::new`].

use std::path::{Path, PathBuf};

use orchestrate::ssh::Session;
use tempfile::TempDir;

use super::sshd::{Keys, Sshd, whoami};

/// A hosts file naming each server `h1`, `h2`, ... logging in with `key`.
pub fn hosts_file(dir: &Path, keys: &Keys, servers: &[&Sshd], key: &Path) -> PathBuf {
    let mut text = format!("known_hosts: {}\nhosts:\n", keys.known_hosts.display());
    for (i, sshd) in servers.iter().enumerate() {
        text.push_str(&format!(
            "  h{}: {{address: {}, port: {}, user: {}, identity_file: {}}}\n",
            i + 1,
            sshd.address,
            sshd.port,
            whoami(),
            key.display()
        ));
    }
    text.push_str(&format!(
        "clusters:\n  all: [{}]\n",
        (1..=servers.len())
            .map(|i| format!("h{i}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let path = dir.join("hosts.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Keys, an sshd on `address` whose host key is trusted, and a temp dir holding a hosts file
/// that names it `h1` with the user key.
pub fn trusted_host(address: &str) -> Option<(Keys, Sshd, TempDir, PathBuf)> {
    let keys = Keys::new()?;
    let sshd = Sshd::start(&keys, address);
    sshd.trust(&keys);
    let dir = tempfile::tempdir().unwrap();
    let hosts = hosts_file(dir.path(), &keys, &[&sshd], &keys.user_key);
    Some((keys, sshd, dir, hosts))
}

/// Keys, two trusted sshd (on 127.0.0.1 and 127.0.0.2: two hosts) and a temp dir holding a
/// hosts file that names them `h1` and `h2` (cluster `all`) with the user key.
pub fn two_trusted_hosts() -> Option<(Keys, (Sshd, Sshd), TempDir, PathBuf)> {
    let keys = Keys::new()?;
    let (a, b) = (
        Sshd::start(&keys, "127.0.0.1"),
        Sshd::start(&keys, "127.0.0.2"),
    );
    a.trust(&keys);
    b.trust(&keys);
    let dir = tempfile::tempdir().unwrap();
    let hosts = hosts_file(dir.path(), &keys, &[&a, &b], &keys.user_key);
    Some((keys, (a, b), dir, hosts))
}

/// Keys, an sshd on 127.0.0.1 and a session connected to it (its host key trusted).
pub async fn connected() -> Option<(Keys, Sshd, Session)> {
    let keys = Keys::new()?;
    let sshd = Sshd::start(&keys, "127.0.0.1");
    let session = super::connect(&sshd, &keys).await;
    Some((keys, sshd, session))
}
