//! Pre-flight of a Slurm cluster, before anything is requested: does the partition exist and
//! is it up, does it have enough usable nodes, do those nodes have the GPUs and gres the hosts
//! file asks for, and does the time limit fit the partition and the plan's estimated duration.
//!
//! Pure: it reads the text of one `sinfo` call ([`SINFO_ARGS`], one line per node and
//! partition) and the ask; running `sinfo` (here or on the login host) is the caller's. Each
//! problem names the key of the hosts file's `clusters.<name>.slurm` map to change.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::load::{Limit, Rate};
use crate::plan::DeploymentPlan;
use crate::spec::diagnostic::did_you_mean;
use crate::units::format_duration;

/// `sinfo` arguments whose output [`check`] reads: one line per (node, partition), fields
/// partition, availability, time limit, node, gres and compact state, `|`-separated.
pub const SINFO_ARGS: &[&str] = &[
    "--noheader",
    "--all",
    "--Node",
    "--format=%R|%a|%l|%N|%G|%t",
];

/// What a deployment asks of the cluster.
#[derive(Debug, Clone)]
pub struct Ask<'a> {
    pub partition: &'a str,
    /// Nodes the allocation needs (every role instance takes one node).
    pub nodes: usize,
    /// `gpus_per_node`, when set and above 0.
    pub gpus_per_node: Option<u32>,
    /// `gres`, as written (`gpu:h100:8`, `gpu:8`, `nvme:1,gpu:8`).
    pub gres: Option<&'a str>,
    /// `time_limit`, when set (`None`: the partition's default).
    pub time_limit: Option<Duration>,
    /// The plan's estimated duration (see [`estimate`]).
    pub estimate: Estimate,
}

/// How bad a problem is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// Nothing is requested.
    Error,
    /// Shown; the run goes on.
    Warning,
}

/// One finding, tied to the `slurm` key to change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub severity: Severity,
    /// The key of `clusters.<name>.slurm` to change (`partition`, `gpus_per_node`, `gres`,
    /// `time_limit`).
    pub key: &'static str,
    pub message: String,
}

/// One line of `sinfo` ([`SINFO_ARGS`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRow {
    pub partition: String,
    /// `up`, `down`, `drain`, `inact`.
    pub avail: String,
    /// The partition's MaxTime; `None` when infinite.
    pub max_time: Option<Duration>,
    pub node: String,
    pub gres: Vec<Gres>,
    /// Compact state without its flag suffix (`idle`, `mix`, `alloc`, `drain`, `down`...).
    pub state: String,
}

/// One generic resource: `name[:type]:count`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gres {
    pub name: String,
    pub kind: Option<String>,
    pub count: u64,
}

/// A lower bound of the time a deployment's points take under load.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Estimate {
    /// The sum over the points whose length is known (a duration, or a request count at a
    /// finite rate), times their repetitions.
    pub at_least: Duration,
    /// Points whose length cannot be known in advance (a request count at an unlimited rate).
    pub unknown_points: usize,
    pub points: usize,
}

impl std::fmt::Display for Estimate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "at least {}", format_duration(self.at_least))?;
        if self.unknown_points > 0 {
            write!(
                f,
                " ({} of {} points have no known length: a request count at an unlimited rate)",
                self.unknown_points, self.points
            )?;
        }
        Ok(())
    }
}

/// The load time of a deployment's points, as far as the plan tells it (start-up and
/// readiness are not counted: they depend on the model and the cluster).
pub fn estimate(deployment: &DeploymentPlan) -> Estimate {
    let mut out = Estimate {
        points: deployment.points.len(),
        ..Estimate::default()
    };
    for point in &deployment.points {
        let shape = &point.load.shape;
        let one = match (&shape.limit, &shape.rate) {
            (Limit::Duration(d), _) => Some(*d),
            (Limit::Requests(_), Rate::Unlimited) => None,
            (
                Limit::Requests(n),
                Rate::Constant { rps } | Rate::Poisson { rps } | Rate::Gamma { rps, .. },
            ) if *rps > 0.0 && shape.ramp_up.is_none() => {
                Some(Duration::from_secs_f64(*n as f64 / rps))
            }
            (Limit::Requests(_), _) => None,
        };
        match one {
            Some(d) => out.at_least += d * point.repetitions.max(1),
            None => out.unknown_points += 1,
        }
    }
    out
}

/// Check `ask` against `sinfo` output; an empty list means go.
pub fn check(sinfo: &str, ask: &Ask<'_>) -> Result<Vec<Problem>, String> {
    let rows = parse_sinfo(sinfo)?;
    let mut problems = Vec::new();
    let mut partitions: BTreeMap<&str, Vec<&NodeRow>> = BTreeMap::new();
    for row in &rows {
        partitions.entry(&row.partition).or_default().push(row);
    }
    let Some(nodes) = partitions.get(ask.partition) else {
        let names: Vec<&str> = partitions.keys().copied().collect();
        let hint = match did_you_mean(ask.partition, names.iter().copied()) {
            Some(near) => format!("did you mean `{near}`? "),
            None => String::new(),
        };
        problems.push(error(
            "partition",
            format!(
                "partition `{}` does not exist on this cluster; {hint}sinfo lists: {}. Set \
                 `partition` to one of them",
                ask.partition,
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            ),
        ));
        return Ok(problems);
    };
    let avail = &nodes[0].avail;
    if avail != "up" {
        problems.push(error(
            "partition",
            format!(
                "partition `{}` is `{avail}` (not up): Slurm starts no job there; choose another \
                 `partition` or ask the admins to bring it up",
                ask.partition
            ),
        ));
    }
    check_nodes(ask, nodes, &mut problems);
    check_time(ask, nodes[0].max_time, &mut problems);
    Ok(problems)
}

fn error(key: &'static str, message: String) -> Problem {
    Problem {
        severity: Severity::Error,
        key,
        message,
    }
}

/// Enough usable nodes, with the GPUs and gres asked for.
fn check_nodes(ask: &Ask<'_>, nodes: &[&NodeRow], problems: &mut Vec<Problem>) {
    let free: Vec<&NodeRow> = nodes.iter().copied().filter(|n| usable(&n.state)).collect();
    if nodes.len() < ask.nodes {
        problems.push(error(
            "partition",
            format!(
                "partition `{}` has {} node(s); the deployment needs {} (one per role \
                 instance): choose a bigger `partition` or run fewer instances",
                ask.partition,
                nodes.len(),
                ask.nodes
            ),
        ));
        return;
    }
    if free.len() < ask.nodes {
        let bad: Vec<String> = nodes
            .iter()
            .filter(|n| !usable(&n.state))
            .map(|n| format!("{} ({})", n.node, n.state))
            .collect();
        problems.push(error(
            "partition",
            format!(
                "partition `{}` has {} usable node(s), the deployment needs {}; not usable: {}",
                ask.partition,
                free.len(),
                ask.nodes,
                bad.join(", ")
            ),
        ));
        return;
    }
    if let Some(gpus) = ask.gpus_per_node.filter(|g| *g > 0) {
        let most = free.iter().map(|n| gpu_count(&n.gres)).max().unwrap_or(0);
        let fit = free
            .iter()
            .filter(|n| gpu_count(&n.gres) >= u64::from(gpus))
            .count();
        if fit < ask.nodes {
            problems.push(error(
                "gpus_per_node",
                format!(
                    "asks for {gpus} GPU(s) per node on {} node(s), but only {fit} usable node(s) of \
                     partition `{}` have that many (the most is {most}, gres {}): lower \
                     `gpus_per_node` or choose another `partition`",
                    ask.nodes,
                    ask.partition,
                    describe_gres(free.iter().map(|n| &n.gres))
                ),
            ));
        }
    }
    if let Some(text) = ask.gres {
        let wanted = match parse_gres(text) {
            Ok(w) => w,
            Err(e) => {
                problems.push(error(
                    "gres",
                    format!("`{text}` is not a gres request: {e}"),
                ));
                return;
            }
        };
        for want in &wanted {
            let fit = free.iter().filter(|n| has_gres(&n.gres, want)).count();
            if fit < ask.nodes {
                problems.push(error(
                    "gres",
                    format!(
                        "asks for gres `{}` on {} node(s), but only {fit} usable node(s) of \
                         partition `{}` have it (they offer {}): change `gres` or `partition`",
                        show_gres(want),
                        ask.nodes,
                        ask.partition,
                        describe_gres(free.iter().map(|n| &n.gres))
                    ),
                ));
            }
        }
    }
}

/// The time limit against the partition's MaxTime and the plan's estimate.
fn check_time(ask: &Ask<'_>, max_time: Option<Duration>, problems: &mut Vec<Problem>) {
    let Some(limit) = ask.time_limit else {
        return;
    };
    if let Some(max) = max_time
        && limit > max
    {
        problems.push(error(
            "time_limit",
            format!(
                "{} is longer than partition `{}`'s MaxTime {}: Slurm would refuse the \
                 allocation; lower `time_limit` to at most {}",
                format_duration(limit),
                ask.partition,
                format_duration(max),
                format_duration(max)
            ),
        ));
    }
    if limit < ask.estimate.at_least {
        problems.push(Problem {
            severity: Severity::Warning,
            key: "time_limit",
            message: format!(
                "{} is shorter than the plan's load time, {}: Slurm will end the job before \
                 the last point (finished points are kept); raise `time_limit`",
                format_duration(limit),
                ask.estimate
            ),
        });
    }
}

/// Whether a node in this compact state can be allocated (now or once it is free).
fn usable(state: &str) -> bool {
    !matches!(
        state,
        "down" | "drain" | "drng" | "fail" | "failg" | "inval" | "unk" | "futr" | "npc"
    )
}

fn gpu_count(gres: &[Gres]) -> u64 {
    gres.iter()
        .filter(|g| g.name == "gpu")
        .map(|g| g.count)
        .sum()
}

fn has_gres(offered: &[Gres], want: &Gres) -> bool {
    let count: u64 = offered
        .iter()
        .filter(|g| g.name == want.name)
        .filter(|g| want.kind.is_none() || g.kind == want.kind)
        .map(|g| g.count)
        .sum();
    count >= want.count
}

fn show_gres(g: &Gres) -> String {
    match &g.kind {
        Some(kind) => format!("{}:{kind}:{}", g.name, g.count),
        None => format!("{}:{}", g.name, g.count),
    }
}

fn describe_gres<'a>(all: impl Iterator<Item = &'a Vec<Gres>>) -> String {
    let mut seen: Vec<String> = Vec::new();
    for gres in all {
        let text = if gres.is_empty() {
            "none".to_string()
        } else {
            gres.iter().map(show_gres).collect::<Vec<_>>().join(",")
        };
        if !seen.contains(&text) {
            seen.push(text);
        }
    }
    seen.join("; ")
}

/// Parse [`SINFO_ARGS`] output. Blank lines are skipped; a line with the wrong field count is
/// an error (another `sinfo` format, or a Slurm this does not know).
pub fn parse_sinfo(text: &str) -> Result<Vec<NodeRow>, String> {
    let mut rows = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let fields: Vec<&str> = line.split('|').collect();
        let [partition, avail, time, node, gres, state] = fields[..] else {
            return Err(format!(
                "unexpected sinfo line `{line}` (expected 6 `|`-separated fields)"
            ));
        };
        let max_time = parse_time(time)
            .ok_or_else(|| format!("unexpected time limit `{time}` in `{line}`"))?;
        rows.push(NodeRow {
            partition: partition.trim_end_matches('*').to_string(),
            avail: avail.to_string(),
            max_time,
            node: node.to_string(),
            gres: parse_gres(gres).map_err(|e| format!("{e} in `{line}`"))?,
            state: state
                .trim_end_matches(['*', '~', '#', '!', '%', '$', '@', '^', '-'])
                .to_string(),
        });
    }
    Ok(rows)
}

/// A Slurm time (see [`crate::hosts::parse_slurm_time`]); kept here under its old name for
/// `sinfo`'s limits.
pub use crate::hosts::parse_slurm_time as parse_time;

/// A duration in Slurm's `--time` form (`D-HH:MM:SS`, or `HH:MM:SS` under a day), rounded
/// up to whole seconds.
pub fn format_time(d: Duration) -> String {
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let hms = format!(
        "{:02}:{:02}:{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    );
    if days > 0 {
        format!("{days}-{hms}")
    } else {
        hms
    }
}

/// A gres list as `sinfo` prints it (`gpu:h100:8(S:0-1),nic:1`, `(null)`) or as a user asks
/// for it (`gpu:8`).
pub fn parse_gres(text: &str) -> Result<Vec<Gres>, String> {
    let text = text.trim();
    if text.is_empty() || text == "(null)" {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for item in split_top(text) {
        let item = match item.find('(') {
            Some(i) => &item[..i],
            None => item,
        };
        let parts: Vec<&str> = item.split(':').collect();
        let count = |s: &str| parse_count(s).ok_or_else(|| format!("bad gres count `{s}`"));
        let gres = match parts[..] {
            [name] if !name.is_empty() => Gres {
                name: name.to_string(),
                kind: None,
                count: 1,
            },
            [name, n] if n.chars().next().is_some_and(|c| c.is_ascii_digit()) => Gres {
                name: name.to_string(),
                kind: None,
                count: count(n)?,
            },
            [name, kind] => Gres {
                name: name.to_string(),
                kind: Some(kind.to_string()),
                count: 1,
            },
            [name, kind, n] => Gres {
                name: name.to_string(),
                kind: Some(kind.to_string()),
                count: count(n)?,
            },
            _ => return Err(format!("bad gres `{item}` (expected name[:type][:count])")),
        };
        out.push(gres);
    }
    Ok(out)
}

/// Split on commas outside parentheses (`gpu:8(S:0-1),nic:1`).
fn split_top(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
    out.into_iter().filter(|s| !s.is_empty()).collect()
}

/// A gres count, with Slurm's K/M/G suffixes.
fn parse_count(text: &str) -> Option<u64> {
    let (digits, mult) = match text.chars().last()? {
        'k' | 'K' => (&text[..text.len() - 1], 1_024),
        'm' | 'M' => (&text[..text.len() - 1], 1_024 * 1_024),
        'g' | 'G' => (&text[..text.len() - 1], 1_024 * 1_024 * 1_024),
        _ => (text, 1),
    };
    digits.parse::<u64>().ok().map(|n| n * mult)
}

#[cfg(test)]
mod tests;
