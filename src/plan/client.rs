//! `client:` resolved: the host the load generator runs on (this machine or a host of the
//! hosts file) and how servers on remote hosts are reached from here (`reach`).

use super::render::Builder;
use super::types::{ClientHost, ClientPlan, DeploymentPlan, HostPlan, PlanError};
use crate::spec::{ClientSpec, TASK_SOURCE};

/// `client:` resolved against the hosts file; a client on a host needs the servers it loads
/// on hosts too (a server on this machine is not reachable from there).
pub(super) fn plan(
    b: &Builder<'_>,
    spec: Option<&ClientSpec>,
    deployments: &[DeploymentPlan],
) -> Result<ClientPlan, PlanError> {
    let Some(spec) = spec else {
        return Ok(ClientPlan::default());
    };
    let reach = spec.reach.unwrap_or_default();
    let host = match &spec.host {
        None => ClientHost::Local,
        Some(h) if h.value == "local" => ClientHost::Local,
        Some(h) => match b.hosts().get(&h.value) {
            Some(facts) => ClientHost::Remote {
                name: h.value.clone(),
                address: facts.address.clone(),
            },
            None => {
                let help = match b.clusters().get(&h.value) {
                    Some(members) => format!(
                        "`{}` is a cluster; the client runs on one host: name one of {}",
                        h.value,
                        members.join(", ")
                    ),
                    None => {
                        let names: Vec<&str> = b.hosts().keys().map(String::as_str).collect();
                        match crate::spec::diagnostic::did_you_mean(&h.value, names.iter().copied())
                        {
                            Some(near) => format!("did you mean `{near}`?"),
                            None if names.is_empty() => {
                                "define it in the hosts file (hosts.yaml or --hosts), or use `local`"
                                    .to_string()
                            }
                            None => format!("`local` or one of: {}", names.join(", ")),
                        }
                    }
                };
                return Err(b
                    .at(
                        TASK_SOURCE,
                        h.referenced,
                        format!("unknown client host `{}`", h.value),
                    )
                    .with_help(help)
                    .into());
            }
        },
    };
    if let (ClientHost::Remote { name, .. }, Some(at)) = (&host, &spec.host) {
        let local_entry = deployments.iter().any(|d| {
            d.roles
                .iter()
                .find(|r| r.name == d.entry_role)
                .and_then(|r| r.instances.first())
                .is_some_and(|i| matches!(i.host, HostPlan::Local))
        });
        if local_entry {
            return Err(b
                .at(
                    TASK_SOURCE,
                    at.referenced,
                    format!("the client runs on `{name}` but the server runs on this machine"),
                )
                .with_help("place the server on a host of the hosts file (`hosts:`), or remove `client.host`")
                .into());
        }
    }
    Ok(ClientPlan { host, reach })
}
