//! Ray node counting (`readiness.ray`): a Ray gang (vLLM's `--distributed-executor-backend
//! ray`, old Dynamo) is one Ray cluster per replica, and its server can only load the model
//! once every node joined. The count is read the way a user reads it: `ray status --address
//! HEAD:PORT`, run where the head runs (its container, or its host, through
//! [`Instance::exec`]); the alive nodes are the entries of its `Active:` (and, with Ray's
//! autoscaler v2, `Idle:`) section.
//!
//! Owns: running and reading `ray status`, and the wait for a count. Does not own: when the
//! count is asked for, or which process is the head (the runner's gang start).

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::excerpt::{tail_text, truncate};
use super::workers::ExitWatch;
use crate::plan::RayPlan;
use crate::provider::exec::shell_quote;
use crate::provider::{ExecRequest, ExecTarget, ExitInfo, Instance, LogSink};
use crate::units::error_chain;

/// Longest one `ray status` may take (it waits about 35 s for a GCS that does not answer).
const STATUS_TIMEOUT: Duration = Duration::from_secs(15);

/// How many alive nodes the wait needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The head is up: its cluster reports at least this many nodes.
    AtLeast(u32),
    /// The whole gang joined: exactly this many nodes.
    Exactly(u32),
}

impl Target {
    fn met(self, alive: u32) -> bool {
        match self {
            Target::AtLeast(n) => alive >= n,
            Target::Exactly(n) => alive == n,
        }
    }

    fn count(self) -> u32 {
        match self {
            Target::AtLeast(n) | Target::Exactly(n) => n,
        }
    }
}

/// The Ray cluster of one replica: its head and how to ask it.
pub struct Cluster<'a> {
    /// The head (node 0 of the replica); `ray status` runs where it runs.
    pub head: &'a dyn Instance,
    /// `address:port` of the head's GCS.
    pub address: String,
    pub ray: &'a RayPlan,
    /// The head's environment (what its `ray start` saw).
    pub env: Vec<(String, String)>,
}

impl Cluster<'_> {
    /// The command run on the head.
    pub fn command(&self) -> String {
        format!(
            "{} status --address {}",
            self.ray.command,
            shell_quote(&self.address)
        )
    }
}

/// Why the count was not reached.
#[derive(Debug, thiserror::Error)]
pub enum RayError {
    #[error(
        "the Ray cluster at {address} had {} after {timeout:?}, expected {expected} (last `{command}`: {last})",
        joined_text(*joined)
    )]
    Timeout {
        address: String,
        joined: Option<u32>,
        expected: u32,
        timeout: Duration,
        command: String,
        last: String,
    },
    #[error(
        "{key} exited ({exit}) while waiting for the Ray cluster at {address} to count {} (it had {}); last log lines:\n{}",
        nodes_text(*expected),
        joined_text(*joined),
        tail_text(tail)
    )]
    Exited {
        key: String,
        exit: ExitInfo,
        tail: Vec<String>,
        address: String,
        joined: Option<u32>,
        expected: u32,
    },
    #[error("cancelled while waiting for the Ray cluster at {address}")]
    Cancelled { address: String },
}

impl RayError {
    /// The nodes seen alive last (`None`: the cluster never answered).
    pub fn joined(&self) -> Option<u32> {
        match self {
            RayError::Timeout { joined, .. } | RayError::Exited { joined, .. } => *joined,
            RayError::Cancelled { .. } => None,
        }
    }
}

fn nodes_text(n: u32) -> String {
    if n == 1 {
        "1 node".to_string()
    } else {
        format!("{n} nodes")
    }
}

fn joined_text(joined: Option<u32>) -> String {
    match joined {
        None => "no node count (`ray status` never listed its nodes)".to_string(),
        Some(1) => "1 alive node".to_string(),
        Some(n) => format!("{n} alive nodes"),
    }
}

/// The alive nodes in `ray status` output: the counts of its `Active:` and `Idle:` sections
/// (`None` when it has no `Active:` section, e.g. "No cluster status" while Ray starts).
pub fn parse_status(text: &str) -> Option<u32> {
    let mut section: Option<&str> = None;
    let mut seen = false;
    let mut alive = 0u32;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        if !line.starts_with(char::is_whitespace) {
            section = trimmed.strip_suffix(':');
            seen |= section == Some("Active");
            continue;
        }
        if !matches!(section, Some("Active" | "Idle")) {
            continue;
        }
        // ` 1 node_<id>` (one per node) or ` 2 <node type>`; `(no active nodes)` counts 0.
        if let Some(n) = trimmed
            .split_whitespace()
            .next()
            .and_then(|n| n.parse::<u32>().ok())
        {
            alive = alive.saturating_add(n);
        }
    }
    seen.then_some(alive)
}

/// One `ray status` on the head: the alive nodes, or what it said instead.
pub async fn count(cluster: &Cluster<'_>, timeout: Duration) -> Result<u32, String> {
    let request = ExecRequest {
        command: cluster.command(),
        target: ExecTarget::Instance,
        env: cluster.env.clone(),
        log: LogSink::memory(),
    };
    let out = match tokio::time::timeout(timeout, cluster.head.exec(request)).await {
        Err(_) => return Err(format!("no answer within {timeout:?}")),
        Ok(Err(e)) => return Err(error_chain(&e)),
        Ok(Ok(out)) => out,
    };
    if let Some(alive) = parse_status(&out.stdout) {
        return Ok(alive);
    }
    let said = if out.stdout.trim().is_empty() {
        out.stderr.trim().lines().last().unwrap_or("").to_string()
    } else {
        out.stdout.trim().lines().next().unwrap_or("").to_string()
    };
    Err(format!("{}: {}", out.exit, truncate(&said, 200)))
}

/// Poll `ray status` on `cluster`'s head until `target` is met; `on_count` hears every new
/// count. Returns the alive nodes. Fails at once when a process of the deployment exits.
pub async fn wait(
    cluster: &Cluster<'_>,
    target: Target,
    (interval, timeout): (Duration, Duration),
    cancel: &CancellationToken,
    exited: &mut ExitWatch<'_>,
    on_count: &mut (dyn FnMut(Option<u32>) + Send),
) -> Result<u32, RayError> {
    let started = Instant::now();
    let mut joined: Option<u32> = None;
    let mut last;
    loop {
        let left = timeout.saturating_sub(started.elapsed());
        let asked = count(
            cluster,
            STATUS_TIMEOUT.min(left.max(Duration::from_secs(1))),
        );
        let result = tokio::select! {
            r = asked => r,
            (key, exit, tail) = &mut *exited => return Err(RayError::Exited {
                key, exit, tail, address: cluster.address.clone(), joined, expected: target.count(),
            }),
            _ = cancel.cancelled() => return Err(RayError::Cancelled { address: cluster.address.clone() }),
        };
        match result {
            Ok(alive) => {
                if joined != Some(alive) {
                    joined = Some(alive);
                    on_count(joined);
                }
                if target.met(alive) {
                    return Ok(alive);
                }
                last = format!("{alive} alive");
            }
            Err(e) => last = e,
        }
        if started.elapsed() >= timeout {
            return Err(RayError::Timeout {
                address: cluster.address.clone(),
                joined,
                expected: target.count(),
                timeout,
                command: cluster.command(),
                last,
            });
        }
        let pause = interval.min(timeout.saturating_sub(started.elapsed()));
        tokio::select! {
            (key, exit, tail) = &mut *exited => return Err(RayError::Exited {
                key, exit, tail, address: cluster.address.clone(), joined, expected: target.count(),
            }),
            _ = cancel.cancelled() => return Err(RayError::Cancelled { address: cluster.address.clone() }),
            _ = tokio::time::sleep(pause) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ray status` of ray 2.40.0 with a head and one worker joined (captured here).
    const TWO_NODES: &str = include_str!("../../tests/fixtures/ray/status-2-nodes.txt");

    #[test]
    fn the_active_section_of_real_ray_status_counts_the_nodes() {
        assert_eq!(parse_status(TWO_NODES), Some(2));
        let one = TWO_NODES.replace(
            " 1 node_52176348c85948ebf1b1420b9546bf3e9724329a9a286b38751e76c6\n",
            "",
        );
        assert_eq!(parse_status(&one), Some(1));
    }

    #[test]
    fn idle_nodes_count_and_pending_or_failed_ones_do_not() {
        let v2 = "Node status\n----\nActive:\n (no active nodes)\nIdle:\n 2 node_a\nPending:\n 1 node_b\nRecent failures:\n 1 node_c\n\nResources\n----\nUsage:\n 0.0/2.0 CPU\n";
        assert_eq!(parse_status(v2), Some(2));
        let typed = "Active:\n 1 head\n 3 ray.worker.gpu\nPending:\n (no pending nodes)\n";
        assert_eq!(parse_status(typed), Some(4));
    }

    #[test]
    fn a_cluster_still_starting_has_no_count() {
        let starting = "No cluster status. It may take a few seconds for the Ray internal services to start up.\n";
        assert_eq!(parse_status(starting), None);
        assert_eq!(parse_status(""), None);
    }

    #[test]
    fn the_targets_are_at_least_for_the_head_and_exactly_for_the_gang() {
        assert!(Target::AtLeast(1).met(2));
        assert!(!Target::Exactly(2).met(3));
        assert!(Target::Exactly(2).met(2));
        let e = RayError::Timeout {
            address: "10.0.0.1:6379".into(),
            joined: Some(1),
            expected: 2,
            timeout: Duration::from_secs(5),
            command: "ray status --address '10.0.0.1:6379'".into(),
            last: "1 alive".into(),
        };
        assert_eq!(
            e.to_string(),
            "the Ray cluster at 10.0.0.1:6379 had 1 alive node after 5s, expected 2 (last `ray status --address '10.0.0.1:6379'`: 1 alive)"
        );
    }
}
