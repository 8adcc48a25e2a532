//! What a role placed on a Kubernetes cluster (`hosts: [k8s]`, a `kubernetes:` cluster of the
//! hosts file) must satisfy: the cluster is the role's only `hosts` entry, the role has an
//! image, and a gang (`nodes` > 1) starts its leader first (`startup_order` `any` or
//! `master-first`), because its ranks learn the leader pod's IP only once that pod runs.

use serde_saphyr::{Location, Spanned};

use super::render::Builder;
use super::types::{HostPlan, PlanError};
use crate::spec::TASK_SOURCE;
use crate::spec::dstack::StartupOrder;

/// A role as this check reads it.
pub(super) struct RoleShape<'a> {
    pub name: &'a str,
    pub loc: Location,
    /// `hosts` as written (for the place of an error).
    pub written: &'a [Spanned<String>],
    pub has_image: bool,
    /// `startup_order` as written.
    pub startup_order: Option<&'a Spanned<StartupOrder>>,
}

/// Refuse what pods cannot run yet; `hosts` are the role's resolved hosts.
pub(super) fn check_role(
    b: &Builder<'_>,
    role: &RoleShape<'_>,
    hosts: &[HostPlan],
    nodes: usize,
) -> Result<(), PlanError> {
    let Some(at) = hosts
        .iter()
        .position(|h| matches!(h, HostPlan::Kubernetes(_)))
    else {
        return Ok(());
    };
    let HostPlan::Kubernetes(place) = &hosts[at] else {
        return Ok(());
    };
    let cluster = &place.cluster.name;
    let loc = role.written.get(at).map_or(role.loc, |h| h.referenced);
    if hosts.len() > 1 {
        return Err(b
            .at(
                TASK_SOURCE,
                loc,
                format!(
                    "role `{}` names the Kubernetes cluster `{cluster}` among other hosts",
                    role.name
                ),
            )
            .with_help("a Kubernetes cluster must be the role's only `hosts` entry")
            .into());
    }
    if !role.has_image {
        return Err(b
            .at(
                TASK_SOURCE,
                loc,
                format!(
                    "role `{}` runs on the Kubernetes cluster `{cluster}` but has no `image`: every instance is a pod",
                    role.name
                ),
            )
            .with_help("add `image:` to the role (the pod's container image)")
            .into());
    }
    if let Some(order) = role
        .startup_order
        .filter(|o| nodes > 1 && o.value == StartupOrder::WorkersFirst)
    {
        return Err(b
            .at(
                TASK_SOURCE,
                order.referenced,
                format!(
                    "role `{}` is a gang of {nodes} nodes on the Kubernetes cluster `{cluster}` with `startup_order: workers-first`: its ranks need the leader pod's IP, known only once the leader runs",
                    role.name
                ),
            )
            .with_help("use `startup_order: master-first` (or leave it out) for gangs on Kubernetes")
            .into());
    }
    Ok(())
}

/// Each instance on `host` has an address of its own (a pod on the pod network), so two of
/// them may use the same port.
pub(super) fn own_address(host: &HostPlan) -> bool {
    matches!(host, HostPlan::Kubernetes(place) if !place.cluster.host_network)
}
