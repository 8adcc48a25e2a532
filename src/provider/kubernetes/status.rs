//! What a pod's status says about the instance (pure): still coming up, running, never going
//! to run (unschedulable, its image cannot be had, evicted) with the reason, or ended.

use k8s_openapi::api::core::v1::{Event, Pod};

use crate::provider::ExitInfo;

/// Container waiting reasons that do not clear by themselves.
const FATAL_WAITING: &[&str] = &[
    "ErrImageNeverPull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
    "CrashLoopBackOff",
];

/// The instance's state, read from its pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum PodState {
    /// Not scheduled, or scheduled with its container not started yet.
    Pending,
    /// Its container runs (ready or not).
    Running,
    /// It will never run: why, in the cluster's words.
    Failed(String),
    /// Its container ended.
    Exited(ExitInfo),
}

/// The state `pod` is in.
pub(super) fn state(pod: &Pod) -> PodState {
    let Some(status) = pod.status.as_ref() else {
        return PodState::Pending;
    };
    for c in status.conditions.iter().flatten() {
        if c.type_ == "PodScheduled"
            && c.status == "False"
            && c.reason.as_deref() == Some("Unschedulable")
        {
            return PodState::Failed(format!(
                "it cannot be scheduled: {}",
                c.message.as_deref().unwrap_or("no node fits")
            ));
        }
    }
    for c in status.container_statuses.iter().flatten() {
        let Some(state) = c.state.as_ref() else {
            continue;
        };
        if let Some(t) = &state.terminated {
            return PodState::Exited(ExitInfo {
                code: Some(t.exit_code),
                signal: t.signal,
            });
        }
        if let Some(w) = &state.waiting {
            let reason = w.reason.as_deref().unwrap_or_default();
            if FATAL_WAITING.contains(&reason) {
                return PodState::Failed(format!(
                    "its container cannot start: {reason}: {}",
                    w.message.as_deref().unwrap_or_default()
                ));
            }
        }
        if state.running.is_some() {
            return PodState::Running;
        }
    }
    if status.phase.as_deref() == Some("Failed") {
        return PodState::Failed(format!(
            "it failed: {}: {}",
            status.reason.as_deref().unwrap_or("Failed"),
            status.message.as_deref().unwrap_or_default()
        ));
    }
    PodState::Pending
}

/// The pod's IP, once it has one.
pub(super) fn pod_ip(pod: &Pod) -> Option<String> {
    pod.status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .filter(|ip| !ip.is_empty())
}

/// Events as lines `Type Reason: message`, oldest first.
pub(super) fn describe_events(events: &[Event]) -> Vec<String> {
    let mut out: Vec<(String, String)> = events
        .iter()
        .map(|e| {
            let when = e
                .last_timestamp
                .as_ref()
                .map(|t| t.0.to_string())
                .unwrap_or_default();
            let line = format!(
                "{} {}: {}",
                e.type_.as_deref().unwrap_or("Normal"),
                e.reason.as_deref().unwrap_or_default(),
                e.message.as_deref().unwrap_or_default()
            );
            (when, line)
        })
        .collect();
    out.sort();
    out.into_iter().map(|(_, line)| line).collect()
}
