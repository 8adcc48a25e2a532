//! The values of the template variables: [`VarsBuilder`] gives each instance exactly the
//! variables [`VARIABLES`] names (plus the matrix axes).
//!
//! Does not own: the variables' names (plan/render), rendering (plan/render) or the axes'
//! values (sweep, matrix).

use std::collections::BTreeMap;

use minijinja::Value as JValue;
use serde_json::Value;

use crate::load::Backend;
use crate::plan::context::HostFacts;
use crate::plan::render::VARIABLES;
use crate::plan::role::{self, RoleDef};
use crate::plan::types::HostPlan;

/// The variables of one deployment's instances: what they share, and per instance the rest.
pub(super) struct VarsBuilder<'a> {
    pub name: &'a str,
    pub description: &'a str,
    pub backend: Backend,
    /// `resources.gpu`'s count; 0 takes the host's.
    pub gpus: u32,
    /// The first GPU name of `resources.gpu`.
    pub gpu_name: Option<&'a str>,
    /// Roles with their own `resources`: role -> GPU count and first GPU name (replacing
    /// the task's; a count of 0 is no GPUs, not the host's).
    pub role_gpus: BTreeMap<String, (u32, Option<String>)>,
    pub hosts: &'a BTreeMap<String, HostFacts>,
    pub executable: String,
    /// The `roles` variable.
    pub roles: JValue,
    /// The deployment axes' values.
    pub axes: &'a BTreeMap<String, Value>,
}

/// One instance's variables, filled by [`VarsBuilder::instance`] and extended with `model`,
/// `image` and a point's axes.
#[derive(Clone)]
pub(super) struct Vars(BTreeMap<String, JValue>);

impl VarsBuilder<'_> {
    /// The variables of instance `index` of role `role` placed at `places`; `model` and
    /// `image` are set by the caller once rendered.
    pub(super) fn instance(&self, role: &str, index: usize, places: &[role::Placement]) -> Vars {
        let place = &places[index];
        let gang = role::gang(places, place);
        let facts = match &place.host {
            HostPlan::Remote { name, .. } => self.hosts.get(name).cloned(),
            HostPlan::Local => None,
            HostPlan::Slurm(slurm) => Some(HostFacts {
                address: slurm.address.clone(),
                gpus: Some(slurm.cluster.gpus_per_node),
                gpu_name: None,
            }),
            HostPlan::Kubernetes(_) => Some(HostFacts {
                address: place.host.address().to_string(),
                gpus: None,
                gpu_name: None,
            }),
        };
        let facts = facts.as_ref();
        let (gpus, gpu_name) = match self.role_gpus.get(role) {
            Some((count, name)) => (*count, name.clone()),
            None if self.gpus == 0 => (
                facts.and_then(|f| f.gpus).unwrap_or(0),
                self.gpu_name.map(str::to_string),
            ),
            None => (self.gpus, self.gpu_name.map(str::to_string)),
        };
        let gpu_name = facts
            .and_then(|f| f.gpu_name.clone())
            .or(gpu_name)
            .unwrap_or_default();
        let host_name = match &place.host {
            HostPlan::Local => "local".to_string(),
            HostPlan::Remote { name, .. } => name.clone(),
            HostPlan::Slurm(slurm) => slurm.name.clone(),
            HostPlan::Kubernetes(place) => place.cluster.name.clone(),
        };
        let mut v = Vars(BTreeMap::new());
        v.set("name", self.name);
        v.set("description", self.description);
        v.set("backend", JValue::from_serialize(self.backend));
        v.set("port", place.port);
        v.set("gpus", gpus);
        v.set("gpu_name", gpu_name);
        v.set("host", host_name);
        v.set("host_address", place.host.address());
        let per_node = gang.iter().filter(|p| p.node_rank == 0).count();
        let proc_rank = place.proc_rank.unwrap_or(0);
        v.set("replica", place.replica);
        v.set("node_rank", place.node_rank);
        v.set("nnodes", gang.len() / per_node.max(1));
        v.set("proc_rank", proc_rank);
        v.set("procs", per_node);
        v.set("rank", place.node_rank * per_node + proc_rank);
        v.set("world_size", gang.len());
        v.set("master_addr", gang[0].host.address());
        v.set("role", role);
        v.set("role_index", index);
        v.set("roles", self.roles.clone());
        v.set("orchestrate", self.executable.as_str());
        v.axes(self.axes);
        v
    }
}

impl Vars {
    /// Set a built-in variable (one of [`VARIABLES`]).
    pub(super) fn set(&mut self, name: &'static str, value: impl Into<JValue>) {
        debug_assert!(
            VARIABLES.iter().any(|(n, _)| *n == name),
            "`{name}` is not in VARIABLES"
        );
        self.0.insert(name.to_string(), value.into());
    }

    /// Add matrix axes' values.
    pub(super) fn axes<'v>(&mut self, axes: impl IntoIterator<Item = (&'v String, &'v Value)>) {
        for (k, v) in axes {
            self.0.insert(k.clone(), JValue::from_serialize(v));
        }
    }

    /// The variables as the renderer takes them.
    pub(super) fn value(&self) -> JValue {
        JValue::from(self.0.clone())
    }
}

/// The `roles` template variable: role name -> {port, replicas, nodes, procs, addresses,
/// urls, endpoints, leaders, servers}.
pub(super) fn roles_variable(defs: &[RoleDef<'_>], placements: &[Vec<role::Placement>]) -> JValue {
    let named: Vec<(&str, Vec<role::Placement>)> = defs
        .iter()
        .zip(placements)
        .map(|(r, p)| (r.name.as_str(), p.clone()))
        .collect();
    JValue::from_serialize(roles_variable_of(&named))
}

/// [`roles_variable`] of roles given by name, as JSON.
fn roles_variable_of(roles: &[(&str, Vec<role::Placement>)]) -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    for (name, places) in roles {
        let addresses: Vec<String> = places
            .iter()
            .map(|p| p.host.address().to_string())
            .collect();
        let urls: Vec<String> = places.iter().map(role::Placement::url).collect();
        let leaders: Vec<String> = places
            .iter()
            .filter(|p| p.is_leader())
            .map(role::Placement::url)
            .collect();
        let servers: Vec<String> = places
            .iter()
            .filter(|p| p.serves())
            .map(role::Placement::url)
            .collect();
        let procs = places
            .iter()
            .filter(|p| p.replica == 0 && p.node_rank == 0)
            .count()
            .max(1);
        m.insert(
            name.to_string(),
            serde_json::json!({
                "port": places[0].port,
                "replicas": leaders.len(),
                "nodes": places.len() / leaders.len().max(1) / procs,
                "procs": procs,
                "addresses": addresses,
                "urls": urls,
                "endpoints": urls,
                "leaders": leaders,
                "servers": servers,
            }),
        );
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::role::Placement;

    #[test]
    fn an_instance_gets_exactly_the_variables_and_its_axes() {
        let axes = BTreeMap::from([("tp".to_string(), serde_json::json!(8))]);
        let builder = VarsBuilder {
            name: "t",
            description: "",
            backend: Backend::Vllm,
            gpus: 0,
            gpu_name: None,
            role_gpus: BTreeMap::new(),
            hosts: &BTreeMap::new(),
            executable: "/bin/orchestrate".into(),
            roles: JValue::from(()),
            axes: &axes,
        };
        let places = [Placement {
            host: HostPlan::Local,
            port: 8000,
            replica: 0,
            node_rank: 0,
            proc_rank: None,
        }];
        let mut vars = builder.instance("server", 0, &places);
        vars.set("model", "m");
        vars.set("image", "i");
        let names: Vec<&str> = vars.0.keys().map(String::as_str).collect();
        let mut expected: Vec<&str> = VARIABLES.iter().map(|(n, _)| *n).collect();
        expected.push("tp");
        expected.sort_unstable();
        assert_eq!(names, expected);
        assert_eq!(vars.0["port"], JValue::from(8000));
        assert_eq!(vars.0["host"], JValue::from("local"));
    }

    /// Two replicas of two nodes on hosts 10.0.0.1..4, port 9000.
    fn gangs() -> Vec<Placement> {
        (0..4)
            .map(|i| Placement {
                host: HostPlan::Remote {
                    name: format!("h{i}"),
                    address: format!("10.0.0.{}", i + 1),
                },
                port: 9000,
                replica: i / 2,
                node_rank: i % 2,
                proc_rank: None,
            })
            .collect()
    }

    #[test]
    fn a_process_sees_its_replica_and_its_replicas_master() {
        let builder = VarsBuilder {
            name: "t",
            description: "",
            backend: Backend::Vllm,
            gpus: 8,
            gpu_name: None,
            role_gpus: BTreeMap::from([("router".to_string(), (0, None))]),
            hosts: &BTreeMap::new(),
            executable: "/bin/orchestrate".into(),
            roles: JValue::from(()),
            axes: &BTreeMap::new(),
        };
        let places = gangs();
        let vars = builder.instance("worker", 3, &places);
        assert_eq!(vars.0["replica"], JValue::from(1));
        assert_eq!(vars.0["node_rank"], JValue::from(1));
        assert_eq!(vars.0["nnodes"], JValue::from(2));
        assert_eq!(vars.0["master_addr"], JValue::from("10.0.0.3"));
        assert_eq!(vars.0["role_index"], JValue::from(3));
        assert_eq!(vars.0["gpus"], JValue::from(8));
        // A role with its own resources: `gpu: 0` is no GPUs, not the host's.
        let router = builder.instance("router", 0, &places[..1]);
        assert_eq!(router.0["gpus"], JValue::from(0));
    }

    #[test]
    fn roles_list_leaders_per_replica_and_every_endpoint() {
        let roles = roles_variable_of(&[("worker", gangs())]);
        let worker = &roles["worker"];
        assert_eq!(
            worker["leaders"],
            serde_json::json!(["http://10.0.0.1:9000", "http://10.0.0.3:9000"])
        );
        assert_eq!(worker["endpoints"].as_array().unwrap().len(), 4);
        assert_eq!(worker["urls"], worker["endpoints"]);
        assert_eq!(
            (worker["replicas"].clone(), worker["nodes"].clone()),
            (2.into(), 2.into())
        );
    }
}
