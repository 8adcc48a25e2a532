//! Template variables the plan defines: the built-in names (an axis may not reuse them)
//! and the `roles` variable that lets any role name any other's addresses.

use std::collections::BTreeMap;

use minijinja::Value as JValue;

use crate::plan::role::{self, RoleDef};

/// Built-in template variables; an axis may not reuse these names.
pub const BUILTIN_VARS: &[&str] = &[
    "name",
    "description",
    "backend",
    "port",
    "gpus",
    "gpu_name",
    "host",
    "host_address",
    "node_rank",
    "nnodes",
    "master_addr",
    "role",
    "role_index",
    "roles",
    "orchestrate",
    "secrets",
];

/// The `roles` template variable: role name -> {port, addresses, urls}.
pub(super) fn roles_variable(defs: &[RoleDef<'_>], placements: &[Vec<role::Placement>]) -> JValue {
    let mut m = BTreeMap::new();
    for (r, places) in defs.iter().zip(placements) {
        let addresses: Vec<String> = places
            .iter()
            .map(|p| p.host.address().to_string())
            .collect();
        let urls: Vec<String> = places
            .iter()
            .map(|p| format!("http://{}:{}", p.host.address(), p.port))
            .collect();
        m.insert(
            r.name.clone(),
            JValue::from_serialize(serde_json::json!({
                "port": places[0].port,
                "addresses": addresses,
                "urls": urls,
            })),
        );
    }
    JValue::from(m)
}
