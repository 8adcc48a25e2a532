//! `orchestrate plan` for a role on a Kubernetes cluster: each instance's pod spec as YAML, as
//! the provider will create it, so a user can compare it with their Helm chart. The run id is
//! known at run time only (`<run>`); the environment is in a Secret of the pod's name, so no
//! value shows.

use std::fmt::Write as _;

use crate::plan::{EnvValue, HostPlan, InstancePlan, KubePlace, RolePlan};
use crate::provider::{LaunchRequest, LogSink};

/// The pod of instance `i` of `role`, indented under the instance's line; nothing for an
/// instance not on Kubernetes.
pub(super) fn render_pod(
    o: &mut String,
    task: &str,
    deployment: &str,
    role: &RolePlan,
    i: &InstancePlan,
) {
    let HostPlan::Kubernetes(place) = &i.host else {
        return;
    };
    // The pod's own address becomes `$(POD_IP)` at launch (the runner's replacement); the
    // addresses of other pods stay tokens until those pods run.
    let own = |text: &str| text.replace(&place.address, KubePlace::ADDRESS);
    // Plain values only: what names the pod's own IP goes into the pod spec, the rest into
    // its Secret (not shown).
    let env = i
        .env
        .iter()
        .filter_map(|e| match &e.value {
            EnvValue::Plain(v) => Some((e.name.clone(), own(v))),
            EnvValue::Secret { .. } => None,
        })
        .collect();
    let request = LaunchRequest {
        run_id: "<run>".to_string(),
        task: task.to_string(),
        deployment: deployment.to_string(),
        role: role.name.clone(),
        index: i.index,
        place: i.place(),
        image: role.image.clone(),
        commands: i.commands.iter().map(|c| own(c)).collect(),
        env,
        port: i.port,
        volumes: role.volumes.clone(),
        resources: role.resources_of(i).clone(),
        log: LogSink::memory(),
        container: role.container_of(i).into_owned(),
    };
    let yaml = crate::provider::kubernetes::pod_yaml(&request, &place.cluster);
    let _ = writeln!(
        o,
        "    pod of instance {} (its environment is in the Secret of the same name):",
        i.index
    );
    for line in yaml.lines() {
        let _ = writeln!(o, "      {line}");
    }
}
