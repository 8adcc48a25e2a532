//! Pre-flight of a Slurm cluster: `sinfo` (run before any `salloc`) checked against what a
//! task asks.
//!
//! STAND-IN (issue #17): the coordinator's `src/slurm/preflight.rs` replaces this file. Only
//! "the partition does not exist" is checked here; the call site is
//! `crate::runner::hosts::Remote::slurm_preflight` (it runs [`sinfo`] through
//! `crate::slurm::cli` and calls [`check`]).

use crate::hosts::SlurmCluster;

/// The `sinfo` columns [`check`] reads: partition (no `*`), availability, nodes, state, gres,
/// node list.
pub const SINFO_FORMAT: &str = "%R|%a|%D|%T|%G|%N";

/// The `sinfo` argv whose stdout [`check`] reads.
pub fn sinfo() -> Vec<String> {
    vec!["sinfo".into(), "-h".into(), format!("-o{SINFO_FORMAT}")]
}

/// What a task asks of a cluster: nodes for its largest deployment.
#[derive(Debug, Clone)]
pub struct Ask {
    pub cluster: SlurmCluster,
    /// Nodes of one allocation (the largest deployment's).
    pub nodes: usize,
}

/// One problem, naming the hosts-file key at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// `file:line:col` of the value.
    pub at: String,
    /// `clusters.<name>.slurm.<field>`.
    pub key: String,
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: `{}`: {}", self.at, self.key, self.message)
    }
}

/// The problems `sinfo_stdout` shows for `ask` (none: go ahead).
pub fn check(sinfo_stdout: &str, ask: &Ask) -> Vec<Problem> {
    let partitions: Vec<&str> = sinfo_stdout
        .lines()
        .filter_map(|l| l.split('|').next())
        .map(|p| p.trim().trim_end_matches('*'))
        .filter(|p| !p.is_empty())
        .collect();
    if partitions.contains(&ask.cluster.partition.as_str()) {
        return Vec::new();
    }
    let mut known: Vec<&str> = partitions.clone();
    known.sort_unstable();
    known.dedup();
    vec![Problem {
        at: ask.cluster.partition_at.clone(),
        key: ask.cluster.key("partition"),
        message: format!(
            "partition `{}` does not exist in this Slurm cluster (partitions: {}); fix the hosts file",
            ask.cluster.partition,
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        ),
    }]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hosts::SlurmContainer;

    #[test]
    fn a_missing_partition_names_the_hosts_file_key() {
        let ask = Ask {
            cluster: SlurmCluster {
                name: "gpu".into(),
                partition: "nope".into(),
                account: None,
                qos: None,
                time_limit: "10".into(),
                gpus_per_node: 1,
                gres: None,
                container: SlurmContainer::None,
                login: None,
                partition_at: "hosts.yaml:4:20".into(),
                time_limit_at: "hosts.yaml:5:20".into(),
            },
            nodes: 2,
        };
        let sinfo = "gpu|up|2|idle|gpu:2|n[1-2]\n";
        let problems = check(sinfo, &ask);
        assert_eq!(problems.len(), 1);
        assert_eq!(
            problems[0].to_string(),
            "hosts.yaml:4:20: `clusters.gpu.slurm.partition`: partition `nope` does not exist in this Slurm cluster (partitions: gpu); fix the hosts file"
        );
        let mut ok = ask.clone();
        ok.cluster.partition = "gpu".into();
        assert!(check(sinfo, &ok).is_empty());
    }
}
