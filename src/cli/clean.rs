//! `orchestrate clean`: kill the local process groups of runs whose orchestrate is gone (from
//! their records, see [`crate::provider::watchdog`]) and remove every container carrying our
//! labels on the local engine (optionally only one run's or one task's), e.g. after the
//! runner was killed, and cancel our Slurm jobs whose orchestrate is gone (on this machine's
//! Slurm and, over SSH, on the login host of every Slurm cluster of the hosts file), and
//! delete our pods (and their Secrets) on every Kubernetes cluster of the hosts file whose
//! orchestrate is gone. With
//! `--host H`, the leftovers on that host of the hosts file instead: process groups of
//! earlier runs (killed) and our containers on its engine (removed through an SSH tunnel).
//! Prints what was removed on stdout, one per line.

use std::path::PathBuf;

use anyhow::Context;

use super::remote::Remote;
use super::{Exit, Failure, Outcome};
use crate::provider::docker::{DockerOptions, DockerProvider, LabelFilter};
use crate::provider::watchdog;
use crate::shutdown::Shutdown;
use crate::ssh::RemoteDocker;

/// Arguments of `orchestrate clean`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only process groups and containers of this run id.
    #[arg(long, value_name = "ID")]
    pub run: Option<String>,
    /// Only containers and local process groups of this task (a host's processes are
    /// filtered by --run only).
    #[arg(long, value_name = "NAME")]
    pub task: Option<String>,
    /// Clean this host of the hosts file instead of this machine.
    #[arg(long, value_name = "NAME")]
    pub host: Option<String>,
    /// The hosts file (default: ./hosts.yaml when present).
    #[arg(long, value_name = "FILE", env = "ORCHESTRATE_HOSTS")]
    pub hosts: Option<PathBuf>,
    /// Trust the host's key if known_hosts does not list it yet.
    #[arg(long)]
    pub accept_new_host_keys: bool,
}

pub(super) fn run(args: Args) -> Outcome {
    let filter = LabelFilter {
        run: args.run.clone(),
        task: args.task.clone(),
    };
    match &args.host {
        Some(name) => {
            let remote = super::remote::load(args.hosts.as_deref(), args.accept_new_host_keys)?;
            super::runtime()?.block_on(clean_host(&remote, name, args.run.as_deref(), &filter))
        }
        None => super::runtime()?.block_on(async {
            clean_local(&filter);
            let remote = super::remote::load(args.hosts.as_deref(), args.accept_new_host_keys)?;
            clean_slurm(&filter, &remote).await;
            super::kube_leftovers::clean(&filter, &remote, super::ps::alive).await;
            let provider = DockerProvider::connect(Shutdown::new(), DockerOptions::default())
                .await
                .context("cannot list containers to clean")?;
            let removed = provider
                .clean(&filter)
                .await
                .context("cannot remove leftover containers")?;
            for container in &removed {
                println!("{}", container.name);
            }
            tracing::info!("removed {} container(s)", removed.len());
            Ok(Exit::Ok)
        }),
    }
}

/// Kill the local instances matching `filter` whose owner is gone (a live orchestrate still
/// tears its own down) and drop the records of those with nothing left alive.
fn clean_local(filter: &LabelFilter) {
    let mut killed = 0;
    for (path, record) in watchdog::records() {
        if !super::ps::matches(filter, &record) {
            continue;
        }
        if !record.owner_gone() {
            tracing::info!(
                "skipping {}: its orchestrate (pid {}) is still running",
                watchdog::describe(&path, &record),
                record.owner
            );
            continue;
        }
        if record.kill() {
            println!(
                "process group {} ({}/{}/{}-{})",
                record.pgid, record.run, record.deployment, record.role, record.index
            );
            killed += 1;
        }
        let _ = std::fs::remove_file(&path);
    }
    tracing::info!("killed {killed} local process group(s)");
}

/// Cancel our Slurm jobs matching `filter` whose orchestrate is gone (a live one releases
/// its own); each printed as `slurm job ID (run/task/deployment)`.
async fn clean_slurm(filter: &LabelFilter, remote: &Remote) {
    let jobs = super::ps::slurm_jobs(filter, remote).await;
    let mut cancelled = 0;
    for (place, job) in jobs {
        let live = job
            .owner_pid
            .parse::<libc::pid_t>()
            .is_ok_and(|pid| pid > 0 && super::ps::alive(pid));
        if live {
            tracing::info!(
                "skipping {}: its orchestrate (pid {}) is still running",
                job.name,
                job.owner_pid
            );
            continue;
        }
        match crate::slurm::jobs::cancel(&place, &job.id).await {
            Ok(()) => {
                println!("{} ({}/{}/{})", job.name, job.run, job.task, job.index);
                cancelled += 1;
            }
            Err(e) => tracing::warn!("cannot cancel {}: {e:#}", job.name),
        }
    }
    tracing::info!("cancelled {cancelled} slurm job(s)");
}

/// Kill leftover process groups on `name`, then remove our containers from its engine when it
/// has one (a host without Docker is not an error: there is nothing to remove).
async fn clean_host(
    remote: &Remote,
    name: &str,
    run: Option<&str>,
    filter: &LabelFilter,
) -> Outcome {
    let Some(file) = &remote.hosts else {
        return Err(Failure::bad_input(anyhow::anyhow!(
            "--host {name} needs a hosts file: pass --hosts FILE or create ./hosts.yaml"
        )));
    };
    let host = file.host(name).map_err(Failure::bad_input)?;
    let session = remote.pool.get(host).await.map_err(|e| match e {
        crate::ssh::SshError::UnknownHostKey { .. }
        | crate::ssh::SshError::ChangedHostKey { .. }
        | crate::ssh::SshError::Auth { .. } => Failure::bad_input(e),
        other => Failure::run_failed(other),
    })?;
    let killed = crate::provider::ssh::clean(&session, run)
        .await
        .context("cannot kill leftover processes")?;
    if !killed.is_empty() {
        for (dir, pgid) in &killed {
            println!("{name}: process group {pgid} ({dir})");
        }
        tracing::info!("killed {} process group(s) on {name}", killed.len());
    }
    match RemoteDocker::connect(&session).await {
        Ok(engine) => {
            let options = DockerOptions {
                host_label: name.to_string(),
                address: host.address.clone(),
                engine_is_local: false,
                ..DockerOptions::default()
            };
            let provider =
                DockerProvider::with_client(engine.client().clone(), Shutdown::new(), options);
            let removed = provider
                .clean(filter)
                .await
                .context("cannot remove leftover containers")?;
            for container in &removed {
                println!("{name}: {}", container.name);
            }
            tracing::info!("removed {} container(s) on {name}", removed.len());
        }
        Err(e) => tracing::info!("no Docker engine to clean on {name}: {e}"),
    }
    Ok(Exit::Ok)
}
