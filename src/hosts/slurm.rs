//! Slurm clusters of the hosts file (`clusters: {gpu: {slurm: {...}}}`), resolved: what
//! `crate::slurm` needs to allocate nodes and start instances on them, and where each value
//! was written (for errors that name the hosts-file key).

use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use super::error::HostsError;
use super::file::SlurmSpec;
use crate::spec::Diagnostic;

/// The longest `time_limit` taken (a year): a benchmark never needs more, and a larger
/// number is a typo (`99999999999-00:00:00`). `UNLIMITED` asks for no limit.
pub const MAX_TIME_LIMIT: Duration = Duration::from_secs(366 * 86_400);

/// A Slurm time, in the forms `salloc --time` takes: `minutes`, `minutes:seconds`,
/// `hours:minutes:seconds`, `days-hours`, `days-hours:minutes`, `days-hours:minutes:seconds`,
/// or `INFINITE`/`UNLIMITED` (any case). `Some(None)` is infinite; `None` is not a time
/// (including one too large to count in seconds).
pub fn parse_slurm_time(text: &str) -> Option<Option<Duration>> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("infinite") || text.eq_ignore_ascii_case("unlimited") {
        return Some(None);
    }
    let number = |p: &str| -> Option<u64> {
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        p.parse().ok()
    };
    let (days, rest) = match text.split_once('-') {
        Some((d, rest)) => (number(d)?, Some(rest)),
        None => (0, None),
    };
    let parts: Vec<u64> = rest
        .unwrap_or(text)
        .split(':')
        .map(number)
        .collect::<Option<_>>()?;
    let sum = |units: &[(u64, u64)]| -> Option<u64> {
        units.iter().try_fold(0u64, |total, &(n, unit)| {
            total.checked_add(n.checked_mul(unit)?)
        })
    };
    let secs = match (rest.is_some(), parts.as_slice()) {
        (true, &[h]) => sum(&[(h, 3600)]),
        (true, &[h, m]) => sum(&[(h, 3600), (m, 60)]),
        (true, &[h, m, s]) | (false, &[h, m, s]) => sum(&[(h, 3600), (m, 60), (s, 1)]),
        (false, &[m]) => sum(&[(m, 60)]),
        (false, &[m, s]) => sum(&[(m, 60), (s, 1)]),
        _ => None,
    }?;
    let total = sum(&[(days, 86_400), (secs, 1)])?;
    Some(Some(Duration::from_secs(total)))
}

/// Why `text` is not a `time_limit` this tool takes (see [`parse_slurm_time`] and
/// [`MAX_TIME_LIMIT`]), as `(message, help)`.
fn time_limit_problem(key: &str, text: &str) -> Option<(String, String)> {
    let forms =
        "write minutes (`90`), `MM:SS`, `H:MM:SS`, `D-H`, `D-H:MM`, `D-H:MM:SS` or `UNLIMITED`";
    if text.trim().is_empty() {
        return Some((format!("`{key}` is empty"), forms.to_string()));
    }
    match parse_slurm_time(text) {
        None => Some((format!("`{key}` is `{text}`, which is not a Slurm time"), forms.to_string())),
        Some(Some(d)) if d > MAX_TIME_LIMIT => Some((
            format!(
                "`{key}` is `{text}`, over a year ({} days)",
                d.as_secs() / 86_400
            ),
            "give the time the run needs (`4:00:00`), or `UNLIMITED` when the partition sets no limit"
                .to_string(),
        )),
        Some(_) => None,
    }
}

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

/// Resolve `spec` (cluster `name` of the file at `path`, whose content is `text`); `hosts`
/// are the file's host names (`login` must name one).
pub(super) fn resolve(
    path: &Path,
    text: &str,
    name: &str,
    spec: &SlurmSpec,
    hosts: &[&String],
) -> Result<SlurmCluster, HostsError> {
    let at =
        |loc: serde_saphyr::Location| format!("{}:{}:{}", path.display(), loc.line(), loc.column());
    let invalid = |loc: serde_saphyr::Location, message: String, help: &str| {
        HostsError::from(Diagnostic::at(path, text, loc, message).with_help(help))
    };
    if spec.partition.value.trim().is_empty() {
        return Err(invalid(
            spec.partition.referenced,
            format!("`clusters.{name}.slurm.partition` is empty"),
            "name a partition (`sinfo -s` lists them)",
        ));
    }
    let time_key = format!("clusters.{name}.slurm.time_limit");
    if let Some((message, help)) = time_limit_problem(&time_key, &spec.time_limit.value) {
        return Err(invalid(spec.time_limit.referenced, message, &help));
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
                    "write `container: pyxis` to run instances through pyxis/enroot, or leave the key out",
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
                    "`clusters.{name}.slurm.login` names unknown host `{}`",
                    l.value
                ),
                "define it under `hosts:`, or leave the key out to run Slurm's commands on this machine",
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
