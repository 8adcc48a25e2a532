//! A deployment's running instances: launching one (its log, env and GPU pinning, through
//! the provider the run's provider set picks), the first of them to exit, and stopping them
//! all. Shared by the start of a role (`gang`) and the deployment around it.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use futures_util::future::{BoxFuture, FutureExt, join_all, select_all};

use crate::archive::Archive;
use crate::fleet::ProviderSet;
use crate::plan::{DeploymentPlan, InstancePlan, Plan, RolePlan};
use crate::provider::{ExitInfo, Instance, LaunchRequest, LogSink, ProviderError};
use crate::readiness::{self, ReadinessError, workers::TopologyError};
use crate::units::error_chain;

/// A deployment's running instances, by `<role>-<index>`, in start order.
pub(super) type Instances = Vec<(String, Box<dyn Instance>)>;

/// Why a deployment's instances did not start; its text is the deployment's error.
#[derive(Debug, thiserror::Error)]
pub(super) enum StartError {
    /// The run's providers have none for the instance.
    #[error("{0:#}")]
    NoProvider(ProviderError),
    #[error("failed to create log {}: {error}", .path.display())]
    Log {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{}", error_chain(.0))]
    Launch(ProviderError),
    #[error(transparent)]
    Exited(#[from] Exited),
    #[error("cancelled while the deployment was starting")]
    Cancelled,
    /// A pod's commands name the address of a pod that has not started (`pod_addresses`).
    #[error("{0}")]
    Unplaced(String),
    /// A process did not become ready; `what` names it by role and instance.
    #[error("{0}")]
    Readiness(ReadinessError),
    #[error("{0}")]
    Topology(TopologyError),
    /// A replica's Ray cluster did not count its nodes: the error with what to check and the
    /// ranks' last log lines.
    #[error("{0}")]
    Ray(String),
    /// The task names no model and the entry server did not say which it serves.
    #[error(
        "the task names no model and {what} did not name one at /v1/models: {last}; \
         add `model: <id the server serves>` to the task"
    )]
    NoModel { what: String, last: String },
}

/// An instance that exited: `<key> exited (<exit>) <when>; last log lines: ...`.
#[derive(Debug, thiserror::Error)]
#[error(
    "{key} exited ({exit}) {when}{}; last log lines:\n{}",
    .place.as_ref().map(|p| format!(" ({p})")).unwrap_or_default(),
    readiness::tail_text(.tail)
)]
pub(super) struct Exited {
    /// `<role>-<index>`.
    pub key: String,
    /// Where it ran, when that is told (`slurm job 5 step on n2 (local process group 77)`).
    pub place: Option<String>,
    pub exit: ExitInfo,
    pub tail: Vec<String>,
    /// `while the deployment was starting`, `during point concurrency=4`, ...
    pub when: String,
}

impl Exited {
    pub(super) const STARTING: &str = "while the deployment was starting";
}

/// The order in which a deployment's instances exited, as their exit watches saw it: when
/// one process's death brings down others (a gang rank killed, its peers exiting after it),
/// the first is the cause, whichever of them is looked at first afterwards.
#[derive(Clone, Default)]
pub(super) struct ExitOrder(Arc<Mutex<Vec<String>>>);

impl ExitOrder {
    /// Watch every instance of `instances` that has an exit watch (for as long as it runs).
    pub(super) fn watch(instances: &Instances) -> Self {
        let order = Self::default();
        for (key, instance) in instances {
            let Some(mut exit) = instance.exit_watch() else {
                continue;
            };
            let (key, seen) = (key.clone(), order.0.clone());
            tokio::spawn(async move {
                if exit.wait_for(Option::is_some).await.is_ok() {
                    seen.lock().unwrap_or_else(|p| p.into_inner()).push(key);
                }
            });
        }
        order
    }

    /// The keys of the instances seen to exit, first first.
    fn seen(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The first instance of `instances` that exits: the one that exited first when several
    /// have, with how it ended and its log tail.
    pub(super) fn first_exit<'a>(
        &'a self,
        instances: &'a [(String, Box<dyn Instance>)],
    ) -> BoxFuture<'a, (String, ExitInfo, Vec<String>)> {
        async move {
            let seen = any_exit(instances).await;
            // Let the watch of this exit (and of those that came before it) count it.
            for _ in 0..20 {
                if self.seen().contains(&seen.0) {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
            let first = self
                .seen()
                .into_iter()
                .find(|k| instances.iter().any(|(key, _)| key == k));
            match first.and_then(|k| instances.iter().find(|(key, _)| *key == k)) {
                Some((key, instance)) if *key != seen.0 => {
                    let exit = instance.exited().await;
                    (
                        key.clone(),
                        exit,
                        instance.log().tail(readiness::TAIL_LINES),
                    )
                }
                _ => seen,
            }
        }
        .boxed()
    }
}

/// Start one instance of `role` with its log, env and GPU pinning.
pub(super) async fn launch_one(
    plan: &Plan,
    deployment: &DeploymentPlan,
    role: &RolePlan,
    instance: &InstancePlan,
    providers: &dyn ProviderSet,
    archive: &Archive,
) -> Result<Box<dyn Instance>, StartError> {
    let provider = providers
        .provider_for(role, instance)
        .map_err(StartError::NoProvider)?;
    let mut env: Vec<(String, String)> = instance
        .env
        .iter()
        .map(|e| (e.name.clone(), e.value.expose().to_string()))
        .collect();
    env.extend(process_gpu_env(role, instance, &env));
    let path = archive.log_path(&deployment.id, &instance.name(&role.name));
    let log = LogSink::create(&path).map_err(|error| StartError::Log {
        path: path.clone(),
        error,
    })?;
    let request = LaunchRequest {
        run_id: archive.manifest().run_id.clone(),
        task: plan.task.clone(),
        deployment: deployment.id.clone(),
        role: role.name.clone(),
        index: instance.index,
        place: instance.place(),
        image: role.image.clone(),
        commands: instance.commands.clone(),
        env,
        port: instance.port,
        volumes: role.volumes.clone(),
        resources: role.resources_of(instance).clone(),
        log,
        container: role.container_of(instance).into_owned(),
    };
    provider.launch(request).await.map_err(StartError::Launch)
}

/// GPU pinning variables of a process of a process role (`container.gpu_ids`); containers
/// are pinned by their provider instead.
pub(super) fn process_gpu_env(
    role: &RolePlan,
    instance: &InstancePlan,
    env: &[(String, String)],
) -> Vec<(String, String)> {
    match role.provider {
        crate::plan::ProviderKind::Local => crate::provider::gpu_env::pinning(
            role.resources_of(instance),
            &role.container_of(instance),
            env,
        ),
        _ => Vec::new(),
    }
}

/// The first instance of `role`, `<role>-0` (node 0 of replica 0, whatever order the gang
/// started in).
pub(super) fn first_of<'a>(instances: &'a Instances, role: &str) -> Option<&'a dyn Instance> {
    let key = format!("{role}-0");
    instances
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, i)| i.as_ref())
}

/// Resolves with the first instance that exits (never, when there are none).
pub(super) fn any_exit(
    instances: &[(String, Box<dyn Instance>)],
) -> BoxFuture<'_, (String, ExitInfo, Vec<String>)> {
    if instances.is_empty() {
        return futures_util::future::pending().boxed();
    }
    let futures = instances.iter().map(|(key, instance)| {
        async move {
            let exit = instance.exited().await;
            (
                key.clone(),
                exit,
                instance.log().tail(readiness::TAIL_LINES),
            )
        }
        .boxed()
    });
    select_all(futures).map(|(first, _, _)| first).boxed()
}

/// Stop every instance, all at once: each is told to stop in reverse start order
/// (dependants first: a router before its workers), then every stop is awaited together, so
/// a deployment of many pods or containers takes about as long to stop as its slowest one
/// (a pod's deletion takes seconds on the kubelet even after its container has exited).
pub(super) async fn stop_all(instances: Instances) {
    join_all(
        instances
            .into_iter()
            .rev()
            .map(|(key, instance)| async move {
                let what = instance.describe();
                if let Err(e) = instance.stop().await {
                    tracing::warn!("failed to stop {key} ({what}): {}", error_chain(&e));
                }
            }),
    )
    .await;
}

/// `error` with the process named by its role and instance first (`server-0 (local process
/// group 2235)`), not by the provider's words alone.
pub(super) fn named(key: &str, mut error: ReadinessError) -> ReadinessError {
    match &mut error {
        ReadinessError::Exited { what, .. }
        | ReadinessError::Timeout { what, .. }
        | ReadinessError::Cancelled { what } => *what = format!("{key} ({what})"),
    }
    error
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::provider::local::LocalProvider;
    use crate::provider::{LaunchRequest, LogSink, Provider};
    use crate::shutdown::Shutdown;

    async fn launch(index: usize, commands: &[&str]) -> (String, Box<dyn Instance>) {
        launch_role("decode", index, commands).await
    }

    async fn launch_role(
        role: &str,
        index: usize,
        commands: &[&str],
    ) -> (String, Box<dyn Instance>) {
        let instance = LocalProvider::new(Shutdown::new())
            .with_grace(Duration::from_secs(5))
            .launch(LaunchRequest {
                run_id: "r".into(),
                task: "t".into(),
                deployment: "d1".into(),
                role: role.into(),
                index,
                place: crate::provider::ProcessPlace::default(),
                image: None,
                commands: commands.iter().map(|s| s.to_string()).collect(),
                env: vec![],
                port: 0,
                volumes: vec![],
                resources: Default::default(),
                log: LogSink::memory(),
                container: Default::default(),
            })
            .await
            .unwrap();
        (format!("{role}-{index}"), instance)
    }

    /// Teardown tells every instance to stop before it waits for any: each decode process
    /// takes 0.3 s to end after its SIGTERM, and every process (the router too) has had its
    /// SIGTERM before any decode process has ended.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn teardown_tells_every_instance_to_stop_before_waiting_for_any() {
        let dir = tempfile::tempdir().unwrap();
        let trace = dir.path().join("trace");
        let on_term = |name: &str, linger: &str| {
            format!(
                "trap 'echo term {name} >> {t}; sleep {linger}; echo end {name} >> {t}; exit 0' TERM; echo up {name} >> {t}; while :; do sleep 0.05; done",
                t = trace.display()
            )
        };
        let mut instances: Instances = Vec::new();
        for i in 0..3 {
            let cmd = on_term(&format!("decode{i}"), "0.3");
            instances.push(launch_role("decode", i, &[cmd.as_str()]).await);
        }
        let cmd = on_term("router", "0.3");
        instances.push(launch_role("router", 0, &[cmd.as_str()]).await);
        // Every process has set its trap.
        while std::fs::read_to_string(&trace).map_or(0, |t| t.lines().count()) < 4 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        stop_all(instances).await;
        let text = std::fs::read_to_string(&trace).unwrap();
        let lines: Vec<&str> = text.lines().skip(4).collect();
        assert_eq!(lines.len(), 8, "{text}");
        assert!(
            lines[..4].iter().all(|l| l.starts_with("term ")),
            "every process was told to stop before any ended: {text}"
        );
        assert!(lines[4..].iter().all(|l| l.starts_with("end ")), "{text}");
    }

    /// Rank 1 is killed; rank 0 exits (code 1) because its peer is gone. Looked at once both
    /// have ended, the cause is rank 1, whichever is listed first.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_first_instance_to_exit_is_the_cause_not_the_first_listed() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("rank1.pid");
        let wait_peer = format!(
            "until [ -s {p} ]; do sleep 0.02; done; p=$(cat {p}); while kill -0 $p 2>/dev/null; do sleep 0.02; done; echo peer gone; exit 1",
            p = pid_file.display()
        );
        let rank1 = format!("echo $$ > {}; exec sleep 600", pid_file.display());
        let instances: Instances = vec![
            launch(0, &[wait_peer.as_str()]).await,
            launch(1, &[rank1.as_str()]).await,
        ];
        let order = ExitOrder::watch(&instances);
        let pid: i32 = loop {
            if let Ok(text) = std::fs::read_to_string(&pid_file)
                && let Ok(pid) = text.trim().parse()
            {
                break pid;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        // SAFETY: a plain signal to a process this test started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        for (_, instance) in &instances {
            tokio::time::timeout(Duration::from_secs(10), instance.exited())
                .await
                .expect("both ranks end");
        }
        // Both have ended: a plain race between them names the first listed...
        assert_eq!(any_exit(&instances).await.0, "decode-0");
        // ...the exit order names the rank that died first, with its signal.
        let (key, exit, _) = order.first_exit(&instances).await;
        assert_eq!(key, "decode-1");
        assert_eq!(exit.signal, Some(libc::SIGKILL));
        stop_all(instances).await;
    }
}
