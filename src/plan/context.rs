//! What the resolver needs from outside the task file: the hosts (filled by the caller
//! from the hosts file), the path of the running `orchestrate` executable, and free ports.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::types::PlanError;

/// Where `port: auto` ports come from: below Linux's default ephemeral range (32768-60999),
/// so no outgoing connection takes one between the plan and the server's bind.
const AUTO_PORTS: std::ops::RangeInclusive<u16> = 20000..=32767;

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

    /// The same context with these clusters.
    pub fn with_clusters(mut self, clusters: BTreeMap<String, Vec<String>>) -> Self {
        self.clusters = clusters;
        self
    }

    /// A port free on this machine right now: a random one of [`AUTO_PORTS`] that binds on
    /// every address, else (all tried ports taken) one the kernel hands out.
    ///
    /// Not the kernel's own pick first: that comes from the ephemeral range, from which every
    /// outgoing connection also takes its source port, so between the plan and the server's
    /// bind another socket could take it ("Address already in use").
    pub fn free_port(&self) -> Result<u16, PlanError> {
        use rand::Rng;
        let mut rng = rand::rng();
        for _ in 0..256 {
            let port = rng.random_range(AUTO_PORTS);
            if std::net::TcpListener::bind(("0.0.0.0", port)).is_ok()
                && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
            {
                return Ok(port);
            }
        }
        let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(PlanError::Port)?;
        Ok(listener.local_addr().map_err(PlanError::Port)?.port())
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
}
