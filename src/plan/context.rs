//! What the resolver needs from outside the task file: the hosts (filled by the caller
//! from the hosts file), the path of the running `orchestrate` executable, and free ports.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::PlanError;

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

/// Inputs of [`super::build`] besides the task.
#[derive(Debug, Clone)]
pub struct PlanContext {
    /// Host name -> facts; `hosts: [name]` in a task must name one of these.
    pub hosts: BTreeMap<String, HostFacts>,
    /// Cluster name -> member host names (each in `hosts`); `hosts: [cluster]` places one
    /// instance per member.
    pub clusters: BTreeMap<String, Vec<String>>,
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
            executable,
        }
    }

    /// The same context with these hosts.
    pub fn with_hosts(mut self, hosts: BTreeMap<String, HostFacts>) -> Self {
        self.hosts = hosts;
        self
    }

    /// The same context with these clusters.
    pub fn with_clusters(mut self, clusters: BTreeMap<String, Vec<String>>) -> Self {
        self.clusters = clusters;
        self
    }

    /// A port free on this machine right now (bind 127.0.0.1:0, take the port, release).
    pub fn free_port(&self) -> Result<u16, PlanError> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(PlanError::Port)?;
        Ok(listener.local_addr().map_err(PlanError::Port)?.port())
    }
}

impl Default for PlanContext {
    fn default() -> Self {
        Self::new()
    }
}
