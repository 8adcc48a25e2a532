//! The pre-flight of local instances' ports: a port another process already listens on is
//! reported with its holder (pid and command line, from `/proc/net/tcp*` and `/proc/*/fd`)
//! before anything starts, so a run never measures a server that is not its own.
//!
//! Does not own: the ports of containers (the Docker pre-flight checks those).

use std::net::TcpListener;

/// A port this machine cannot give to a local instance.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "port {port} on 127.0.0.1 is already in use{holder}; stop that process or choose another port (`port: auto` picks a free one)"
)]
pub struct PortInUse {
    pub port: u16,
    /// ` by pid P (command)`, or empty when the holder cannot be seen (another user's).
    pub holder: String,
}

/// The ports of `ports` that something already listens on, each with its holder.
pub fn busy(ports: &[u16]) -> Vec<PortInUse> {
    let mut seen = Vec::new();
    let mut found = Vec::new();
    for &port in ports {
        if port == 0 || seen.contains(&port) {
            continue;
        }
        seen.push(port);
        // A wildcard bind fails when anything listens on the port, on any address.
        if TcpListener::bind(("0.0.0.0", port)).is_ok() {
            continue;
        }
        let holder = holder(port)
            .map(|(pid, cmd)| format!(" by pid {pid} ({cmd})"))
            .unwrap_or_default();
        found.push(PortInUse { port, holder });
    }
    found
}

/// The pid and command line of the process listening on `port`, when it is visible.
pub fn holder(port: u16) -> Option<(i32, String)> {
    let inodes: Vec<String> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|text| listening_inodes(&text, port))
        .collect();
    if inodes.is_empty() {
        return None;
    }
    let wanted: Vec<String> = inodes.iter().map(|i| format!("socket:[{i}]")).collect();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        let holds = fds.flatten().any(|fd| {
            std::fs::read_link(fd.path())
                .is_ok_and(|target| wanted.iter().any(|w| target.as_os_str() == w.as_str()))
        });
        if holds {
            let cmd = std::fs::read(entry.path().join("cmdline"))
                .map(|raw| {
                    raw.split(|&b| b == 0)
                        .filter(|a| !a.is_empty())
                        .map(|a| String::from_utf8_lossy(a).into_owned())
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap_or_default();
            return Some((pid, cmd));
        }
    }
    None
}

/// Inodes of the listening sockets on `port` in a `/proc/net/tcp` table
/// (`sl local_address rem_address st ... inode`, the address as `HEXIP:HEXPORT`, LISTEN = 0A).
fn listening_inodes(table: &str, port: u16) -> Vec<String> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let local_port = fields.get(1)?.rsplit_once(':')?.1;
            let listening = *fields.get(3)? == "0A";
            (listening && u16::from_str_radix(local_port, 16).ok()? == port)
                .then(|| fields.get(9).map(|s| s.to_string()))
                .flatten()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_port_names_its_holder_and_a_free_one_is_not_reported() {
        let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let found = busy(&[port, port]);
        assert_eq!(found.len(), 1, "{found:?}");
        let text = found[0].to_string();
        assert!(
            text.contains(&format!(
                "port {port} on 127.0.0.1 is already in use by pid {}",
                std::process::id()
            )),
            "{text}"
        );
        drop(listener);
        assert!(busy(&[port]).is_empty());
    }

    #[test]
    fn the_tcp_table_is_read_for_listening_sockets_only() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4242 1\n   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000  1000        0 4343 1\n";
        assert_eq!(listening_inodes(table, 8080), ["4242"]);
        assert!(listening_inodes(table, 8081).is_empty());
    }
}
