//! What the resolver needs from outside the task file: the hosts (filled by the caller
//! from the hosts file), the path of the running `orchestrate` executable, and free ports.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::types::PlanError;

/// Where `port: auto` ports come from: below Linux's default ephemeral range (32768-60999),
/// so no outgoing connection takes one between the plan and the server's bind.
const AUTO_PORTS: std::ops::RangeInclusive<u16> = 20000..=32767;

/// How long a port handed out by one `orchestrate` process stays off-limits to the others on
/// the same machine: long enough to cover a server's start after the plan.
const CLAIM_TTL: std::time::Duration = std::time::Duration::from_secs(30 * 60);

/// Facts about one host of the hosts file that plans use.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HostFacts {
    /// Address clients and other nodes use to reach it.
    pub address: String,
    /// Number of GPUs, when known.
    pub gpus: Option<u32>,
    /// GPU model name, when known (e.g. `H200`).
    pub gpu_name: Option<String>,
}

/// Inputs of `plan::build` besides the task.
#[derive(Debug, Clone)]
pub struct PlanContext {
    /// Host name -> facts; `hosts: [name]` in a task must name one of these.
    pub hosts: BTreeMap<String, HostFacts>,
    /// Cluster name -> member host names (each in `hosts`); `hosts: [cluster]` places one
    /// instance per member.
    pub clusters: BTreeMap<String, Vec<String>>,
    /// Slurm clusters by name; `hosts: [name]` places a role's instances on nodes of one
    /// allocation per deployment.
    pub slurm: BTreeMap<String, crate::hosts::SlurmCluster>,
    /// Kubernetes clusters by name; `hosts: [name]` runs a role's instances as pods there.
    pub kubernetes: BTreeMap<String, crate::hosts::KubernetesCluster>,
    /// The `orchestrate` executable (template variable `orchestrate`).
    pub executable: PathBuf,
}

impl PlanContext {
    /// No hosts, the running executable.
    pub fn new() -> Self {
        let executable = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("orchestrate"));
        Self {
            hosts: BTreeMap::new(),
            clusters: BTreeMap::new(),
            slurm: BTreeMap::new(),
            kubernetes: BTreeMap::new(),
            executable,
        }
    }

    /// The same context with these hosts.
    pub fn with_hosts(mut self, hosts: BTreeMap<String, HostFacts>) -> Self {
        self.hosts = hosts;
        self
    }

    /// The same context with these Slurm clusters.
    pub fn with_slurm(mut self, slurm: BTreeMap<String, crate::hosts::SlurmCluster>) -> Self {
        self.slurm = slurm;
        self
    }

    /// The same context with these Kubernetes clusters.
    pub fn with_kubernetes(
        mut self,
        kubernetes: BTreeMap<String, crate::hosts::KubernetesCluster>,
    ) -> Self {
        self.kubernetes = kubernetes;
        self
    }

    /// The same context with these clusters.
    pub fn with_clusters(mut self, clusters: BTreeMap<String, Vec<String>>) -> Self {
        self.clusters = clusters;
        self
    }

    /// A port free on this machine right now: a random one of [`AUTO_PORTS`] that binds on
    /// every address and that no other `orchestrate` process here handed out lately
    /// ([`claim`]), else (all tried ports taken) one the kernel hands out.
    ///
    /// Not the kernel's own pick first: that comes from the ephemeral range, from which every
    /// outgoing connection also takes its source port, so between the plan and the server's
    /// bind another socket could take it ("Address already in use").
    pub fn free_port(&self) -> Result<u16, PlanError> {
        use rand::Rng;
        let mut rng = rand::rng();
        for _ in 0..256 {
            let port = rng.random_range(AUTO_PORTS);
            // Claim before the probing binds: a probe holds the port for a moment, and a
            // server of another run that claimed it may be binding it right then.
            if claim(&claims_dir(), port)
                && std::net::TcpListener::bind(("0.0.0.0", port)).is_ok()
                && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
            {
                return Ok(port);
            }
        }
        let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(PlanError::Port)?;
        Ok(listener.local_addr().map_err(PlanError::Port)?.port())
    }
}

/// Where this machine's `orchestrate` processes record the auto ports they handed out.
fn claims_dir() -> PathBuf {
    std::env::temp_dir().join("orchestrate-ports")
}

/// Claims `port` against other `orchestrate` processes on this machine: two runs planned
/// moments apart both find a port free (nothing listens yet) and would both hand it out; the
/// second server then fails with "Address already in use". A claim is a file named after the
/// port, created exclusively; one older than [`CLAIM_TTL`] is stale and taken over. Where the
/// folder cannot be written, the bind check alone decides (true).
fn claim(dir: &std::path::Path, port: u16) -> bool {
    use std::fs::OpenOptions;
    if std::fs::create_dir_all(dir).is_err() {
        return true;
    }
    let path = dir.join(port.to_string());
    let create = || OpenOptions::new().write(true).create_new(true).open(&path);
    match create() {
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let stale = std::fs::metadata(&path)
                .and_then(|m| m.modified())
                .map(|t| t.elapsed().is_ok_and(|age| age > CLAIM_TTL))
                .unwrap_or(true);
            stale && std::fs::remove_file(&path).is_ok() && create().is_ok()
        }
        Err(_) => true,
    }
}

impl Default for PlanContext {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod port_tests {
    use super::*;

    #[test]
    fn auto_ports_come_from_below_the_ephemeral_range_and_are_free() {
        let ctx = PlanContext::new();
        for _ in 0..20 {
            let port = ctx.free_port().unwrap();
            assert!(AUTO_PORTS.contains(&port), "{port}");
            std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
        }
    }

    #[test]
    fn a_port_claimed_by_another_process_is_not_handed_out_until_its_claim_is_stale() {
        let dir = tempfile::tempdir().unwrap();
        assert!(claim(dir.path(), 21000));
        assert!(!claim(dir.path(), 21000), "claimed twice");
        assert!(claim(dir.path(), 21001));
        let file = std::fs::File::options()
            .write(true)
            .open(dir.path().join("21000"))
            .unwrap();
        let old = std::time::SystemTime::now() - CLAIM_TTL - std::time::Duration::from_secs(1);
        file.set_modified(old).unwrap();
        assert!(claim(dir.path(), 21000), "a stale claim is taken over");
        assert!(!claim(dir.path(), 21000));
    }
}
