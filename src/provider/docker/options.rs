//! How a Docker provider uses its engine: labels, addresses, timeouts, and whether the
//! engine runs on this machine. Read by the provider and by its pre-flight checks.

use std::time::Duration;

/// How a provider uses its engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DockerOptions {
    /// Name of the engine's host in logs, errors and the manifest. Default `local`.
    pub host_label: String,
    /// Address the orchestrating machine reaches published ports at. Default `127.0.0.1`.
    pub address: String,
    /// Address ports are published on, on the engine's host. Default `127.0.0.1` (nothing is
    /// exposed beyond the machine); a remote engine reached through a tunnel may keep it.
    pub publish_ip: String,
    /// Home directory on the engine's host, for volumes written `~/...`. Default `$HOME`.
    pub home: Option<String>,
    /// A pull that reports no progress for this long fails. Default 60 s.
    pub pull_idle_timeout: Duration,
    /// SIGTERM -> SIGKILL grace on stop. Default 10 s.
    pub stop_grace: Duration,
    /// The engine runs on this machine: GPU tools and ports are checked here, and GPU facts
    /// are probed here. Default `true`; `false` for remote engines.
    pub engine_is_local: bool,
}

impl Default for DockerOptions {
    fn default() -> Self {
        Self {
            host_label: "local".into(),
            address: "127.0.0.1".into(),
            publish_ip: "127.0.0.1".into(),
            home: std::env::var("HOME").ok(),
            pull_idle_timeout: Duration::from_secs(60),
            stop_grace: Duration::from_secs(10),
            engine_is_local: true,
        }
    }
}
