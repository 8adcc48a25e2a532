//! GPU telemetry beside a point (`orchestrate run --telemetry`): one sampler per host of the
//! deployment, started before the point's load and stopped after it, then its samples read
//! into the point's figures (`gpu_figures`).
//!
//! A sampler is an instance like a server's (role `telemetry`, launched through the
//! provider that runs processes on that host: this machine, SSH, a Slurm step overlapping
//! the allocation), so it is owned the same way: stopped after the point, killed by the
//! instance's guard on any other exit, by the shutdown registry on a forced exit, by its
//! watchdog if orchestrate dies, and listed by `orchestrate ps` / removed by `clean`. Its
//! output streams into `points/<point>/telemetry/<host>.log` through the provider's pumps;
//! nothing is read or parsed until the load is over, so the load never waits on it.
//!
//! A host where the tool is missing or fails gives a note in the point's `telemetry`, never
//! a failed point. Before the first point, every host this machine or SSH reaches is probed
//! for the tool (`probe`): one without it is told at once, as a warning, and its sampler is
//! not started (Slurm nodes are known only once allocated: their points tell).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::gpu_figures::{Collected, Host};
use crate::archive::Archive;
use crate::deploy::{ContainerOptions, Resources};
use crate::fleet::ProviderSet;
use crate::plan::{DeploymentPlan, HostPlan};
use crate::provider::{Instance, LaunchRequest, LogSink};
use crate::telemetry::sampler::TelemetryOptions;

/// The role name samplers are launched under (what `ps` shows).
pub(crate) const ROLE: &str = "telemetry";

/// How long a point waits for every sampler's first line before its load starts.
const FIRST_LINE_WAIT: Duration = Duration::from_secs(5);

/// How long the probe of a host may take.
const PROBE_WAIT: Duration = Duration::from_secs(20);

/// GPU telemetry of one run: the options and the hosts file's prices.
#[derive(Debug, Clone, Default)]
pub(super) struct Telemetry {
    pub options: TelemetryOptions,
    /// `price_per_gpu_hour` of the hosts and Slurm clusters the plan uses, by name.
    pub prices: BTreeMap<String, f64>,
    /// Hosts the probe found without the tool, and why: not sampled.
    pub missing: BTreeMap<String, String>,
}

impl Telemetry {
    /// Probe every host of `plan` that this machine or SSH reaches for the tool, all at
    /// once, before the first point; a host without it is a warning now and a note in each
    /// of its points, never a failure. The probes' output is kept in `telemetry-probe/`.
    pub(super) async fn probed(
        &self,
        plan: &crate::plan::Plan,
        providers: &dyn ProviderSet,
        archive: &Archive,
    ) -> Telemetry {
        let mut out = self.clone();
        let Some(probe) = self.options.probe() else {
            return out;
        };
        let mut seen = Vec::new();
        for deployment in &plan.deployments {
            for host in hosts(deployment) {
                let reachable = matches!(host.place, HostPlan::Local | HostPlan::Remote { .. });
                if reachable && !seen.iter().any(|h: &Host| h.name == host.name) {
                    seen.push(host);
                }
            }
        }
        let dir = archive.dir().join("telemetry-probe");
        let probe = &probe;
        let probes = seen.iter().enumerate().map(|(index, host)| {
            let request = move |log| LaunchRequest {
                run_id: archive.manifest().run_id.clone(),
                task: archive.manifest().task.clone(),
                deployment: format!("{ROLE}-probe"),
                role: format!("{ROLE}-probe"),
                index,
                place: crate::provider::ProcessPlace::default(),
                image: None,
                commands: vec![probe.clone()],
                env: Vec::new(),
                port: 0,
                volumes: Vec::new(),
                resources: Resources::default(),
                log,
                container: ContainerOptions::default(),
            };
            let path = dir.join(format!("{}.log", file_name(&host.name)));
            async move {
                let provider = providers.sampler_for(&host.place).ok()?;
                let log = LogSink::create(&path).ok()?;
                let instance = provider.launch(request(log)).await.ok()?;
                let exited = tokio::time::timeout(PROBE_WAIT, instance.exited()).await;
                let said = instance
                    .log()
                    .tail(crate::provider::logs::TAIL_LINES)
                    .into_iter()
                    .filter(|l| tool_line(l))
                    .collect::<Vec<_>>()
                    .join("; ");
                if let Err(e) = instance.stop().await {
                    tracing::warn!(
                        "failed to stop the GPU telemetry probe on {}: {}",
                        host.name,
                        crate::units::error_chain(&e)
                    );
                }
                match exited {
                    Ok(_) if !said.is_empty() => Some((host.name.clone(), said)),
                    _ => None,
                }
            }
        });
        for (host, why) in futures_util::future::join_all(probes)
            .await
            .into_iter()
            .flatten()
        {
            tracing::warn!(
                "GPU telemetry: host {host}: {why}; its GPUs are not sampled (the points run)"
            );
            out.missing.insert(host, why);
        }
        out
    }
}

/// The hosts of `deployment`, in first-use order.
fn hosts(deployment: &DeploymentPlan) -> Vec<Host> {
    let mut out: Vec<Host> = Vec::new();
    for role in &deployment.roles {
        for instance in &role.instances {
            let (name, price_key) = match &instance.host {
                HostPlan::Local => ("local".to_string(), None),
                HostPlan::Remote { name, .. } => (name.clone(), Some(name.clone())),
                HostPlan::Slurm(place) => (place.name.clone(), Some(place.cluster.name.clone())),
                HostPlan::Kubernetes(place) => {
                    (place.cluster.name.clone(), Some(place.cluster.name.clone()))
                }
            };
            let entry = (
                role.name.clone(),
                format!("{}-{}", role.name, instance.index),
                role.container_of(instance).gpu_ids.clone(),
            );
            match out.iter_mut().find(|h| h.name == name) {
                Some(host) => host.instances.push(entry),
                None => out.push(Host {
                    name,
                    place: instance.host.clone(),
                    price_key,
                    instances: vec![entry],
                }),
            }
        }
    }
    out
}

/// What a point's samplers need.
pub(super) struct PointTelemetry<'a> {
    pub telemetry: &'a Telemetry,
    pub deployment: &'a DeploymentPlan,
    pub providers: &'a dyn ProviderSet,
}

impl<'a> PointTelemetry<'a> {
    /// What a point of `deployment` samples with, when the run has telemetry on.
    pub(super) fn of(
        telemetry: Option<&'a Telemetry>,
        deployment: &'a DeploymentPlan,
        providers: &'a dyn ProviderSet,
    ) -> Option<Self> {
        telemetry.map(|telemetry| Self {
            telemetry,
            deployment,
            providers,
        })
    }
}

struct Running {
    host: Host,
    instance: Box<dyn Instance>,
    log: PathBuf,
}

/// The samplers of one point, running.
pub(super) struct Samplers {
    options: TelemetryOptions,
    prices: BTreeMap<String, f64>,
    running: Vec<Running>,
    notes: Vec<String>,
}

/// A line of the tool's (not one orchestrate wrote).
fn tool_line(line: &str) -> bool {
    !line.starts_with("[orchestrate]") && !line.trim().is_empty()
}

/// The last line the tool wrote into `log`, if any.
fn last_tool_line(log: &LogSink) -> Option<String> {
    log.tail(crate::provider::logs::TAIL_LINES)
        .into_iter()
        .rev()
        .find(|l| tool_line(l))
}

/// True when `r`'s log holds a sample stamped at or after `origin` (µs since the epoch).
fn sampled_since(options: &TelemetryOptions, r: &Running, origin: i64) -> bool {
    let text = r
        .instance
        .log()
        .tail(crate::provider::logs::TAIL_LINES)
        .join("\n");
    let (samples, _) = options.read_log(&text, &r.host.name, origin);
    samples.iter().any(|s| s.t >= 0.0)
}

fn has_exited(instance: &dyn Instance) -> bool {
    instance.exit_watch().is_some_and(|w| w.borrow().is_some())
}

impl PointTelemetry<'_> {
    /// Start a sampler on every host of the deployment and wait (a few seconds at most)
    /// until each has printed, so that the samples bracket the load's start.
    pub(super) async fn start(&self, archive: &Archive, point_dir: &str) -> Samplers {
        let options = &self.telemetry.options;
        let mut samplers = Samplers {
            options: options.clone(),
            prices: self.telemetry.prices.clone(),
            running: Vec::new(),
            notes: Vec::new(),
        };
        let dir = match archive.point_dir(point_dir) {
            Ok(dir) => dir.join("telemetry"),
            Err(e) => {
                samplers.notes.push(format!("no telemetry: {e}"));
                return samplers;
            }
        };
        for (index, host) in hosts(self.deployment).into_iter().enumerate() {
            if let Some(why) = self.telemetry.missing.get(&host.name) {
                samplers.notes.push(format!(
                    "host {}: {why} (found before the first point); not sampled",
                    host.name
                ));
                continue;
            }
            let provider = match self.providers.sampler_for(&host.place) {
                Ok(p) => p,
                Err(e) => {
                    samplers
                        .notes
                        .push(format!("host {}: no sampler: {e}", host.name));
                    continue;
                }
            };
            let path = dir.join(format!("{}.log", file_name(&host.name)));
            let log = match LogSink::create(&path) {
                Ok(log) => log,
                Err(e) => {
                    samplers.notes.push(format!(
                        "host {}: no sampler: {}: {e}",
                        host.name,
                        path.display()
                    ));
                    continue;
                }
            };
            let request = LaunchRequest {
                run_id: archive.manifest().run_id.clone(),
                task: archive.manifest().task.clone(),
                deployment: self.deployment.id.clone(),
                role: ROLE.to_string(),
                index,
                place: crate::provider::ProcessPlace::default(),
                image: None,
                commands: vec![options.script()],
                env: options.env(),
                port: 0,
                volumes: Vec::new(),
                resources: Resources::default(),
                log,
                container: ContainerOptions::default(),
            };
            match provider.launch(request).await {
                Ok(instance) => samplers.running.push(Running {
                    host,
                    instance,
                    log: path,
                }),
                Err(e) => samplers.notes.push(format!(
                    "host {}: the sampler did not start: {}",
                    host.name,
                    crate::units::error_chain(&e)
                )),
            }
        }
        let deadline = tokio::time::Instant::now() + FIRST_LINE_WAIT;
        while tokio::time::Instant::now() < deadline
            && samplers.running.iter().any(|r| {
                last_tool_line(r.instance.log()).is_none() && !has_exited(r.instance.as_ref())
            })
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        samplers
    }
}

/// A host name as a file name.
fn file_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

impl Samplers {
    /// Wait until every sampler has printed a sample stamped at or after now (so the
    /// samples bracket the load's end), then stop every sampler and read its log. A line
    /// that arrives after this call may have been stamped before it, so a new line alone is
    /// not the proof; a sampler whose clock is behind ours is waited for two intervals and a
    /// second at most.
    pub(super) async fn stop(self) -> Collected {
        let Samplers {
            options,
            prices,
            running,
            mut notes,
        } = self;
        let end = chrono::Utc::now().timestamp_micros();
        let deadline = tokio::time::Instant::now()
            + Duration::from_millis(2 * options.interval_ms)
            + Duration::from_secs(1);
        while tokio::time::Instant::now() < deadline
            && running
                .iter()
                .any(|r| !has_exited(r.instance.as_ref()) && !sampled_since(&options, r, end))
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The other GPUs of the same sample print right after the first one.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut hosts = Vec::new();
        for r in running {
            let exited = r.instance.exit_watch().and_then(|w| w.borrow().clone());
            if let Some(exit) = exited {
                let tail = r.instance.log().tail(5).join(" | ");
                notes.push(format!(
                    "host {}: {} ended early ({exit}): {tail}",
                    r.host.name,
                    options.tool()
                ));
            }
            let what = r.instance.describe();
            if let Err(e) = r.instance.stop().await {
                tracing::warn!(
                    "failed to stop the GPU sampler on {} ({what}): {}",
                    r.host.name,
                    crate::units::error_chain(&e)
                );
            }
            let text = std::fs::read_to_string(&r.log).unwrap_or_default();
            hosts.push((r.host, text));
        }
        Collected {
            options,
            prices,
            hosts,
            notes,
        }
    }
}

/// [`PointTelemetry::start`] when the run has telemetry.
pub(super) async fn start(
    telemetry: Option<&PointTelemetry<'_>>,
    archive: &Archive,
    point_dir: &str,
) -> Option<Samplers> {
    match telemetry {
        Some(t) => Some(t.start(archive, point_dir).await),
        None => None,
    }
}

/// [`Samplers::stop`] when there are samplers.
pub(super) async fn stop(samplers: Option<Samplers>) -> Option<Collected> {
    match samplers {
        Some(s) => Some(s.stop().await),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_name_is_a_file_name() {
        assert_eq!(file_name("gpu node/1"), "gpu_node_1");
        assert_eq!(file_name("n1.cluster-a_2"), "n1.cluster-a_2");
    }
}
