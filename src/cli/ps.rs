//! `orchestrate ps`: the local process groups of runs (from their records, see
//! [`crate::provider::watchdog`]) whose processes still live, and the containers carrying our
//! labels on the local engine, per run and task, as a table on stdout (`--json` for one JSON
//! array). Local rows come first; without a Docker engine only they are listed (a note on
//! stderr says containers were not listed). Our Slurm
//! jobs are listed from this machine's Slurm and from the login host of every Slurm cluster
//! of the hosts file that has one (`--hosts`, over SSH); our pods from every Kubernetes
//! cluster of the hosts file.

use anyhow::Context;

use super::{Exit, Outcome};
use crate::provider::docker::{DockerOptions, DockerProvider, LabelFilter, Leftover};
use crate::provider::watchdog;
use crate::shutdown::Shutdown;
use crate::slurm::SlurmHost;

/// Arguments of `orchestrate ps`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only process groups and containers of this run id.
    #[arg(long, value_name = "ID")]
    pub run: Option<String>,
    /// Only process groups and containers of this task.
    #[arg(long, value_name = "NAME")]
    pub task: Option<String>,
    /// Print a JSON array instead of a table.
    #[arg(long)]
    pub json: bool,
    /// The hosts file whose Slurm clusters' login hosts are asked too (default:
    /// ./hosts.yaml when present).
    #[arg(long, value_name = "FILE", env = "ORCHESTRATE_HOSTS")]
    pub hosts: Option<std::path::PathBuf>,
}

pub(super) fn run(args: Args) -> Outcome {
    let filter = LabelFilter {
        run: args.run,
        task: args.task,
    };
    let remote = super::remote::load(args.hosts.as_deref(), false)?;
    let mut found = local_leftovers(&filter);
    let runtime = super::runtime()?;
    let jobs = runtime.block_on(slurm_jobs(&filter, &remote));
    found.extend(jobs.into_iter().map(|(_, row)| row));
    let pods = runtime.block_on(super::kube_leftovers::pods(&filter, &remote));
    found.extend(pods.iter().map(|(_, pod)| super::kube_leftovers::row(pod)));
    // No engine on this machine is not an error: there are no containers of ours to list.
    let containers = runtime.block_on(async {
        match DockerProvider::connect(Shutdown::new(), DockerOptions::default()).await {
            Ok(provider) => provider
                .list(&filter)
                .await
                .context("cannot list containers")
                .map(Some),
            Err(e) => {
                eprintln!("note: containers not listed: {e}");
                Ok(None)
            }
        }
    });
    match containers {
        Ok(containers) => found.extend(containers.into_iter().flatten()),
        Err(e) if !found.is_empty() => tracing::warn!("{e:#}"),
        Err(e) => return Err(e.into()),
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&found)?);
    } else {
        print!("{}", table(&found));
    }
    Ok(Exit::Ok)
}

/// Local instances whose processes still live, as rows: CONTAINER names the process group,
/// STATE is `running`, STATUS the number of live processes.
pub(super) fn local_leftovers(filter: &LabelFilter) -> Vec<Leftover> {
    watchdog::records()
        .into_iter()
        .filter(|(_, r)| matches(filter, r))
        .filter_map(|(_, r)| {
            let live = r.live_pids().len();
            (live > 0).then(|| Leftover {
                id: r.pgid.to_string(),
                name: format!("process group {}", r.pgid),
                run: r.run.clone(),
                task: r.task.clone(),
                role: r.role.clone(),
                index: r.index.to_string(),
                image: String::new(),
                state: "running".into(),
                status: format!("{live} local process(es)"),
                owner_pid: r.owner.to_string(),
            })
        })
        .collect()
}

/// Where our Slurm jobs may be: this machine, then the login host of every Slurm cluster of
/// the hosts file that has one (each once; a host that cannot be reached is warned about).
pub(super) async fn slurm_places(remote: &super::remote::Remote) -> Vec<SlurmHost> {
    let mut places = vec![SlurmHost::Here];
    let Some(file) = &remote.hosts else {
        return places;
    };
    let mut logins: Vec<&str> = file
        .slurm_clusters()
        .filter_map(|c| c.login.as_deref())
        .collect();
    logins.sort_unstable();
    logins.dedup();
    for login in logins {
        let session = match file.host(login) {
            Ok(host) => remote.pool.get(host).await.map_err(anyhow::Error::from),
            Err(e) => Err(e.into()),
        };
        match session {
            Ok(session) => places.push(SlurmHost::Login(session)),
            Err(e) => tracing::warn!("cannot reach Slurm login host {login}: {e:#}"),
        }
    }
    places
}

/// Our Slurm jobs still in the queue (by their comment) on this machine's Slurm and on the
/// hosts file's login hosts, each with where it is, as rows: CONTAINER is `slurm job ID`
/// (`slurm job ID via LOGIN` on a login host), STATE Slurm's, STATUS the nodes (and the
/// reason when there is one). A job seen from two places (the same cluster) is listed once.
pub(super) async fn slurm_jobs(
    filter: &LabelFilter,
    remote: &super::remote::Remote,
) -> Vec<(SlurmHost, Leftover)> {
    let mut out: Vec<(SlurmHost, Leftover)> = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for place in slurm_places(remote).await {
        let jobs = match crate::slurm::jobs::list(&place).await {
            Ok(jobs) => jobs,
            Err(e) => {
                tracing::warn!("cannot list slurm jobs on {}: {e:#}", place.describe());
                continue;
            }
        };
        for row in slurm_rows(filter, &place, jobs) {
            if seen.insert((
                row.id.clone(),
                row.run.clone(),
                row.task.clone(),
                row.index.clone(),
            )) {
                out.push((place.clone(), row));
            }
        }
    }
    out
}

fn slurm_rows(
    filter: &LabelFilter,
    place: &SlurmHost,
    jobs: Vec<crate::slurm::jobs::OurJob>,
) -> Vec<Leftover> {
    let via = match place {
        SlurmHost::Here => String::new(),
        SlurmHost::Login(s) => format!(" via {}", s.host().name),
    };
    jobs.into_iter()
        .filter(|j| filter.run.as_ref().is_none_or(|run| *run == j.run))
        .filter(|j| filter.task.as_ref().is_none_or(|task| *task == j.task))
        .map(|j| Leftover {
            id: j.queued.id.clone(),
            name: format!("slurm job {}{via}", j.queued.id),
            run: j.run,
            task: j.task,
            role: String::new(),
            index: j.deployment,
            image: String::new(),
            state: j.queued.state.to_lowercase(),
            status: match j.queued.reason.as_str() {
                "None" | "" => j.queued.nodes,
                reason => format!("{} ({reason})", j.queued.nodes),
            },
            owner_pid: j.owner,
        })
        .collect()
}

/// Whether a local record passes `--run` / `--task`.
pub(super) fn matches(filter: &LabelFilter, record: &watchdog::InstanceRecord) -> bool {
    filter.run.as_ref().is_none_or(|run| *run == record.run)
        && filter.task.as_ref().is_none_or(|task| *task == record.task)
}

/// Aligned columns, sorted by run, task, role and index (the order `list` returns).
fn table(rows: &[Leftover]) -> String {
    let header = [
        "RUN",
        "TASK",
        "ROLE",
        "INDEX",
        "STATE",
        "STATUS",
        "CONTAINER",
        "PID",
    ];
    let cells: Vec<[String; 8]> = rows
        .iter()
        .map(|r| {
            [
                r.run.clone(),
                r.task.clone(),
                r.role.clone(),
                r.index.clone(),
                r.state.clone(),
                r.status.clone(),
                r.name.clone(),
                owner(&r.owner_pid),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &cells {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = String::new();
    let mut line = |fields: Vec<&str>| {
        let padded: Vec<String> = fields
            .iter()
            .zip(widths)
            .map(|(f, w)| format!("{f:<w$}"))
            .collect();
        out.push_str(padded.join("  ").trim_end());
        out.push('\n');
    };
    line(header.to_vec());
    for row in &cells {
        line(row.iter().map(String::as_str).collect());
    }
    out
}

/// The owner's pid, marked `(gone)` when no such process exists here any more (its
/// containers are then leftovers for `orchestrate clean`).
fn owner(pid: &str) -> String {
    match pid.parse::<libc::pid_t>() {
        Ok(n) if n > 0 && !alive(n) => format!("{pid} (gone)"),
        _ => pid.to_string(),
    }
}

pub(super) fn alive(pid: libc::pid_t) -> bool {
    // SAFETY: signal 0 only checks that the process exists; nothing is sent.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns_under_the_header() {
        let row = |run: &str, index: &str| Leftover {
            id: "abc".into(),
            name: format!("orchestrate-{run}-t-d1-server-{index}"),
            run: run.into(),
            task: "t".into(),
            role: "server".into(),
            index: index.into(),
            image: "img".into(),
            state: "running".into(),
            status: "Up 2 minutes".into(),
            owner_pid: std::process::id().to_string(),
        };
        let text = table(&[row("r1", "0"), row("run-22", "1")]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        let task_col = lines[0].find("TASK").unwrap();
        assert_eq!(lines[1].find(" t ").map(|i| i + 1), Some(task_col));
        assert_eq!(lines[2].find(" t ").map(|i| i + 1), Some(task_col));
        assert!(lines[2].starts_with("run-22"));
        assert!(
            lines[1].ends_with(&std::process::id().to_string()),
            "{text}"
        );
    }

    #[test]
    fn owners_that_no_longer_exist_are_marked() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id().to_string();
        child.wait().unwrap();
        assert_eq!(owner(&pid), format!("{pid} (gone)"));
        assert_eq!(
            owner(&std::process::id().to_string()),
            std::process::id().to_string()
        );
        assert_eq!(owner(""), "");
    }
}
