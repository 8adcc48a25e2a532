//! One pod (and its Secret), owned by a guard: its status watched (a pod that will never run,
//! or whose container ended, ends the instance, the reason and the pod's events written to its
//! log), its container's log streamed into the sink, and its deletion guaranteed — `stop`
//! (deleted with the grace period, waited for), `Drop` as the logged fallback (deletion from a
//! fresh thread), and an emergency kill registered with [`Shutdown`] for a forced exit.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures_util::{AsyncBufReadExt, StreamExt};
use k8s_openapi::api::core::v1::{Event, Pod, Secret};
use kube::Api;
use kube::api::{DeleteParams, ListParams, LogParams};
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::error::{KubeError, is_not_found};
use super::status::{self, PodState};
use crate::provider::{ExitInfo, Instance, LogSink, ProviderError};
use crate::shutdown::{KillRegistration, Shutdown};

/// How often the pod's status is read.
const POLL: Duration = Duration::from_millis(500);
/// How long the log stream may take to deliver the last lines once the pod ended.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a deletion from `Drop` or a forced exit may take.
const BLOCKING_DELETE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `stop` waits for the pod to be gone, beyond its grace period: a container ends
/// within a second, the 1.20 kubelet removes the pod some 12 s later, and under load it was
/// seen to stall a minute.
const GONE_TIMEOUT: Duration = Duration::from_secs(90);

/// Where a pod lives and how to reach the API server again from another runtime.
#[derive(Clone)]
pub(crate) struct PodRef {
    pub config: kube::Config,
    pub pods: Api<Pod>,
    pub secrets: Api<Secret>,
    pub events: Api<Event>,
    pub cluster: String,
    pub namespace: String,
    pub name: String,
}

impl PodRef {
    /// Delete the pod and its Secret now, from a fresh thread and runtime (for `Drop` and a
    /// forced exit, where the caller's runtime may be gone).
    pub(crate) fn delete_blocking(&self, grace_secs: u32) -> Result<(), String> {
        let config = self.config.clone();
        let namespace = self.namespace.clone();
        let name = self.name.clone();
        let worker = std::thread::Builder::new()
            .name("kube-delete".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| format!("no runtime for the deletion: {e}"))?;
                runtime.block_on(async {
                    let client = kube::Client::try_from(config).map_err(|e| e.to_string())?;
                    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
                    let secrets: Api<Secret> = Api::namespaced(client, &namespace);
                    let work = async {
                        let params = DeleteParams::default().grace_period(grace_secs);
                        for result in [
                            pods.delete(&name, &params).await.map(|_| ()),
                            secrets
                                .delete(&name, &DeleteParams::default())
                                .await
                                .map(|_| ()),
                        ] {
                            match result {
                                Ok(()) => {}
                                Err(e) if is_not_found(&e) => {}
                                Err(e) => return Err(e.to_string()),
                            }
                        }
                        Ok(())
                    };
                    tokio::time::timeout(BLOCKING_DELETE_TIMEOUT, work)
                        .await
                        .map_err(|_| {
                            format!(
                                "the API server did not answer within {BLOCKING_DELETE_TIMEOUT:?}"
                            )
                        })?
                })
            })
            .map_err(|e| format!("no thread for the deletion: {e}"))?;
        worker
            .join()
            .map_err(|_| "the deletion thread panicked".to_string())?
    }

    /// The pod's events, as lines.
    pub(crate) async fn events(&self) -> Vec<String> {
        let params = ListParams::default().fields(&format!("involvedObject.name={}", self.name));
        match self.events.list(&params).await {
            Ok(list) => status::describe_events(&list.items),
            Err(e) => vec![format!("(events could not be read: {e})")],
        }
    }

    /// `\n  events:\n    ...` for an error message, empty when there are none.
    pub(crate) async fn events_block(&self) -> String {
        let events = self.events().await;
        if events.is_empty() {
            return String::new();
        }
        let lines: Vec<String> = events.iter().map(|e| format!("    {e}")).collect();
        format!("\n  events:\n{}", lines.join("\n"))
    }
}

/// Where a pod is reached: by the other pods at its IP (`peer_url`), and from here at the same
/// URL or through a port-forward.
pub(crate) struct Addresses {
    pub peer_url: String,
    pub forward: Option<super::forward::PortForward>,
}

/// A pod started by [`super::KubeProvider`]. Dropping it without `stop` deletes the pod anyway
/// (logged as a warning).
pub struct KubeInstance {
    pod: PodRef,
    /// Set once the log pump has written a line of the container's.
    streamed: Arc<AtomicBool>,
    base_url: String,
    peer_url: String,
    /// Held for the pod's life: the port-forward its `base_url` goes through, if any.
    _forward: Option<super::forward::PortForward>,
    log: LogSink,
    facts: Value,
    stop_grace: Duration,
    exit: watch::Receiver<Option<ExitInfo>>,
    drained: watch::Receiver<bool>,
    tasks: Vec<JoinHandle<()>>,
    removed: bool,
    _kill: KillRegistration,
}

impl KubeInstance {
    /// Register the emergency deletion of the pod `pod` names, before it is even created.
    pub(crate) fn register_kill(pod: &PodRef, shutdown: &Shutdown) -> KillRegistration {
        let target = pod.clone();
        shutdown.register(format!("pod {}", pod.name), move || {
            if let Err(e) = target.delete_blocking(0) {
                tracing::error!("could not delete pod {}: {e}", target.name);
            }
        })
    }

    /// Own a created pod: from here on, every path deletes it. Starts the status watch and
    /// the log pump.
    pub(crate) fn own(
        pod: PodRef,
        addresses: Addresses,
        log: LogSink,
        facts: Value,
        stop_grace: Duration,
        kill: KillRegistration,
    ) -> Self {
        let streamed = Arc::new(AtomicBool::new(false));
        let (exit_tx, exit) = watch::channel(None);
        let (drained_tx, drained) = watch::channel(false);
        let tasks = vec![
            tokio::spawn(pump_logs(
                streamed.clone(),
                pod.clone(),
                log.clone(),
                exit.clone(),
                drained_tx,
            )),
            tokio::spawn(watch_status(
                pod.clone(),
                log.clone(),
                drained.clone(),
                exit_tx,
            )),
        ];
        let base_url = match &addresses.forward {
            Some(forward) => format!("http://{}", forward.local_addr()),
            None => addresses.peer_url.clone(),
        };
        Self {
            pod,
            base_url,
            peer_url: addresses.peer_url,
            _forward: addresses.forward,
            log,
            facts,
            stop_grace,
            exit,
            drained,
            tasks,
            removed: false,
            streamed,
            _kill: kill,
        }
    }

    /// The pod's name.
    pub fn name(&self) -> &str {
        &self.pod.name
    }
}

/// Follow the container's log into `sink` once it has started, until the pod ends.
async fn pump_logs(
    streamed: Arc<AtomicBool>,
    pod: PodRef,
    sink: LogSink,
    mut exit: watch::Receiver<Option<ExitInfo>>,
    drained: watch::Sender<bool>,
) {
    // Lines come with the kubelet's timestamps. A follow that ends before its first line while
    // the container runs (seen under load: the log came back empty) is opened again from the
    // last line's second, skipping lines already written. A line without a timestamp is the
    // kubelet's own ("unable to retrieve container logs ...": the container is gone): the end.
    let mut last: Option<chrono::DateTime<chrono::Utc>> = None;
    'streams: loop {
        let params = LogParams {
            follow: true,
            timestamps: true,
            since_time: last,
            container: Some(super::pod::CONTAINER.to_string()),
            ..LogParams::default()
        };
        match pod.pods.log_stream(&pod.name, &params).await {
            Ok(stream) => {
                let mut lines = stream.lines();
                let mut got = false;
                while let Some(line) = lines.next().await {
                    match line {
                        Ok(line) => {
                            let (Some(at), text) = stamped(&line) else {
                                tracing::debug!("log of pod {}: {line}", pod.name);
                                break 'streams;
                            };
                            got = true;
                            if last.is_some_and(|l| at <= l) {
                                continue;
                            }
                            sink.line(text);
                            streamed.store(true, Ordering::Relaxed);
                            last = Some(at);
                        }
                        Err(e) => {
                            tracing::debug!("log stream of pod {} ended: {e}", pod.name);
                            break;
                        }
                    }
                }
                if got || exit.borrow().is_some() {
                    break;
                }
                let _ = tokio::time::timeout(POLL, exit.changed()).await;
            }
            // The pod is gone.
            Err(e) if is_not_found(&e) => break,
            // The container has not started yet (400).
            Err(e) => {
                tracing::debug!("log of pod {} not available yet: {e}", pod.name);
                if exit.borrow().is_some() {
                    break;
                }
                let _ = tokio::time::timeout(POLL, exit.changed()).await;
            }
        }
    }
    sink.flush();
    let _ = drained.send(true);
}

/// A log line the kubelet stamped (`2026-11-27T08:00:00.123456789Z text`): its time and
/// text; an unstamped line is all text.
fn stamped(line: &str) -> (Option<chrono::DateTime<chrono::Utc>>, &str) {
    match line.split_once(' ') {
        Some((at, text)) => match chrono::DateTime::parse_from_rfc3339(at) {
            Ok(at) => (Some(at.with_timezone(&chrono::Utc)), text),
            Err(_) => (None, line),
        },
        None => match chrono::DateTime::parse_from_rfc3339(line) {
            Ok(at) => (Some(at.with_timezone(&chrono::Utc)), ""),
            Err(_) => (None, line),
        },
    }
}

/// Read the pod's status until it ends; then publish the exit (after the log drained).
async fn watch_status(
    pod: PodRef,
    sink: LogSink,
    mut drained: watch::Receiver<bool>,
    exit: watch::Sender<Option<ExitInfo>>,
) {
    let unknown = ExitInfo {
        code: None,
        signal: None,
    };
    let info = loop {
        match pod.pods.get(&pod.name).await {
            Ok(p) => match status::state(&p) {
                PodState::Pending | PodState::Running => {}
                PodState::Exited(info) => break info,
                PodState::Failed(reason) => {
                    sink.line(&format!("orchestrate: pod {} failed: {reason}", pod.name));
                    for event in pod.events().await {
                        sink.line(&format!("orchestrate: event: {event}"));
                    }
                    break unknown;
                }
            },
            Err(e) if is_not_found(&e) => {
                sink.line(&format!("orchestrate: pod {} was deleted", pod.name));
                break unknown;
            }
            Err(e) => tracing::debug!("reading pod {}: {e}", pod.name),
        }
        tokio::time::sleep(POLL).await;
    };
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, drained.wait_for(|d| *d)).await;
    tracing::debug!("pod {} ended: {info}", pod.name);
    let _ = exit.send(Some(info));
}

#[async_trait]
impl Instance for KubeInstance {
    fn describe(&self) -> String {
        format!("pod {} (namespace {})", self.pod.name, self.pod.namespace)
    }

    fn base_url(&self) -> String {
        self.base_url.clone()
    }

    fn peer_url(&self) -> String {
        self.peer_url.clone()
    }

    fn log(&self) -> &LogSink {
        &self.log
    }

    async fn exited(&self) -> ExitInfo {
        let mut exit = self.exit.clone();
        match exit.wait_for(Option::is_some).await {
            Ok(value) => value.clone().unwrap_or(ExitInfo {
                code: None,
                signal: None,
            }),
            Err(_) => ExitInfo {
                code: None,
                signal: None,
            },
        }
    }

    fn exit_watch(&self) -> Option<crate::provider::ExitWatch> {
        Some(self.exit.clone())
    }

    fn facts(&self) -> Value {
        self.facts.clone()
    }

    async fn stop(mut self: Box<Self>) -> Result<(), ProviderError> {
        // A follow that never delivered (seen under load): take the log as it is now, once,
        // before the pod and its log are gone.
        if !self.streamed.load(Ordering::Relaxed) {
            let params = LogParams {
                container: Some(super::pod::CONTAINER.to_string()),
                ..LogParams::default()
            };
            if let Ok(text) = self.pod.pods.logs(&self.pod.name, &params).await {
                for line in text.lines() {
                    self.log.line(line);
                }
            }
        }
        let grace = u32::try_from(self.stop_grace.as_secs()).unwrap_or(u32::MAX);
        match self
            .pod
            .pods
            .delete(&self.pod.name, &DeleteParams::default().grace_period(grace))
            .await
        {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => {
                return Err(KubeError::api(
                    format!("delete pod {}", self.pod.name),
                    &self.pod.cluster,
                )(e)
                .into());
            }
        }
        let mut drained = self.drained.clone();
        let _ = tokio::time::timeout(DRAIN_TIMEOUT, drained.wait_for(|d| *d)).await;
        self.log.flush();
        match self
            .pod
            .secrets
            .delete(&self.pod.name, &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => {
                return Err(KubeError::api(
                    format!("delete secret {}", self.pod.name),
                    &self.pod.cluster,
                )(e)
                .into());
            }
        }
        // Gone means gone: the next point may reuse the port on the node.
        let deadline = Instant::now() + self.stop_grace + GONE_TIMEOUT;
        loop {
            match self.pod.pods.get_opt(&self.pod.name).await {
                Ok(None) => break,
                Ok(Some(_)) | Err(_) if Instant::now() < deadline => {
                    tokio::time::sleep(POLL).await;
                }
                Ok(Some(_)) => {
                    tracing::warn!("pod {} still exists after its deletion", self.pod.name);
                    break;
                }
                Err(e) => {
                    return Err(KubeError::api(
                        format!("read pod {}", self.pod.name),
                        &self.pod.cluster,
                    )(e)
                    .into());
                }
            }
        }
        self.removed = true;
        tracing::debug!("pod {} deleted", self.pod.name);
        Ok(())
    }

    async fn exec(
        &self,
        _request: crate::provider::ExecRequest,
    ) -> Result<crate::provider::ExecOutput, ProviderError> {
        Err(KubeError::Unsupported {
            what: "running a command next to a pod (`exec`)".to_string(),
        }
        .into())
    }
}

impl Drop for KubeInstance {
    fn drop(&mut self) {
        if !self.removed {
            tracing::warn!(
                "pod {} was not stopped explicitly; deleting it",
                self.pod.name
            );
            if let Err(e) = self.pod.delete_blocking(0) {
                tracing::error!("could not delete pod {}: {e}", self.pod.name);
            }
            self.log.flush();
        }
        for task in &self.tasks {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::stamped;

    #[test]
    fn a_stamped_line_gives_its_time_and_text_and_times_order_by_value() {
        let (at, text) = stamped("2026-11-27T08:00:12.5Z listening on http://0.0.0.0:8000");
        assert_eq!(text, "listening on http://0.0.0.0:8000");
        // Nanoseconds are trimmed of trailing zeros: compared as times, not as text.
        let (later, _) = stamped("2026-11-27T08:00:12.50001Z x");
        assert!(at.unwrap() < later.unwrap());
        let (empty, text) = stamped("2026-11-27T08:00:13Z");
        assert!(empty.is_some());
        assert_eq!(text, "");
        assert_eq!(stamped("no stamp here"), (None, "no stamp here"));
    }
}
