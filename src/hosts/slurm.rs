//! Slurm clusters of the hosts file (`clusters: {gpu: {slurm: {...}}}`), resolved: what
//! `crate::slurm` needs to allocate nodes and start instances on them, and where each value
//! was written (for errors that name the hosts-file key).

use std::path::Path;

use serde::Serialize;

use super::error::HostsError;
use super::file::SlurmSpec;

/// How instances run on a Slurm node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SlurmContainer {
    /// The commands run on the node as they are.
    None,
    /// Through pyxis/enroot: `srun --container-image IMAGE --container-mounts ...`.
    Pyxis,
}

/// One Slurm cluster, ready to use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SlurmCluster {
    /// The cluster's name in the hosts file (what a task's `hosts:` names).
    pub name: String,
    pub partition: String,
    pub account: Option<String>,
    pub qos: Option<String>,
    pub time_limit: String,
    pub gpus_per_node: u32,
    pub gres: Option<String>,
    pub container: SlurmContainer,
    /// A host of the hosts file the Slurm commands run on; `None`: this machine.
    pub login: Option<String>,
    /// `file:line:col` of `partition` (errors about the partition point there).
    pub partition_at: String,
    /// `file:line:col` of `time_limit`.
    pub time_limit_at: String,
    /// `file:line:col` of `gpus_per_node`.
    pub gpus_per_node_at: String,
    /// `file:line:col` of `gres`, when given.
    pub gres_at: Option<String>,
}

impl SlurmCluster {
    /// The hosts-file key of a field, `clusters.<name>.slurm.<field>`.
    pub fn key(&self, field: &str) -> String {
        format!("clusters.{}.slurm.{field}", self.name)
    }

    /// `file:line:col` of a field (`partition`, `time_limit`, `gpus_per_node`, `gres`); the
    /// partition's place for any other.
    pub fn at(&self, field: &str) -> &str {
        match field {
            "time_limit" => &self.time_limit_at,
            "gpus_per_node" => &self.gpus_per_node_at,
            "gres" => self.gres_at.as_deref().unwrap_or(&self.partition_at),
            _ => &self.partition_at,
        }
    }
}

/// Resolve `spec` (cluster `name` of the file at `path`); `hosts` are the file's host names
/// (`login` must name one).
pub(super) fn resolve(
    path: &Path,
    name: &str,
    spec: &SlurmSpec,
    hosts: &[&String],
) -> Result<SlurmCluster, HostsError> {
    let at =
        |loc: serde_saphyr::Location| format!("{}:{}:{}", path.display(), loc.line(), loc.column());
    let invalid = |loc: serde_saphyr::Location, message: String| HostsError::Invalid {
        path: path.to_path_buf(),
        line: loc.line(),
        column: loc.column(),
        message,
    };
    if spec.partition.value.trim().is_empty() {
        return Err(invalid(
            spec.partition.referenced,
            format!(
                "`clusters.{name}.slurm.partition` is empty: name a partition (`sinfo -s` lists them)"
            ),
        ));
    }
    if spec.time_limit.value.trim().is_empty() {
        return Err(invalid(
            spec.time_limit.referenced,
            format!("`clusters.{name}.slurm.time_limit` is empty: give one like `1:00:00`"),
        ));
    }
    let container = match &spec.container {
        None => SlurmContainer::None,
        Some(c) => match c.value.as_str() {
            "none" => SlurmContainer::None,
            "pyxis" => SlurmContainer::Pyxis,
            other => {
                return Err(invalid(
                    c.referenced,
                    format!(
                        "`clusters.{name}.slurm.container` is `{other}`: expected `pyxis` or `none`"
                    ),
                ));
            }
        },
    };
    let login = match &spec.login {
        None => None,
        Some(l) if hosts.iter().any(|h| **h == l.value) => Some(l.value.clone()),
        Some(l) => {
            return Err(invalid(
                l.referenced,
                format!(
                    "`clusters.{name}.slurm.login` names unknown host `{}`: define it under `hosts:`",
                    l.value
                ),
            ));
        }
    };
    Ok(SlurmCluster {
        name: name.to_string(),
        partition: spec.partition.value.clone(),
        account: spec.account.clone(),
        qos: spec.qos.clone(),
        time_limit: spec.time_limit.value.clone(),
        gpus_per_node: spec.gpus_per_node.value,
        gres: spec.gres.as_ref().map(|g| g.value.clone()),
        container,
        login,
        partition_at: at(spec.partition.referenced),
        time_limit_at: at(spec.time_limit.referenced),
        gpus_per_node_at: at(spec.gpus_per_node.referenced),
        gres_at: spec.gres.as_ref().map(|g| at(g.referenced)),
    })
}
