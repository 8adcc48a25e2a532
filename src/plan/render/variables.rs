//! The template variables the plan defines, by name: [`VARIABLES`] names and describes them
//! (docs/task-file.md's table is checked against it), [`DEPLOYMENT_FIELD_AXES`] are the axes
//! that set a task field, and [`reserved_names`] are the names an axis may not take.
//!
//! Does not own: the variables' values per instance (plan/build's vars).

/// The built-in template variables: name and what it holds. docs/task-file.md's table of
/// variables lists exactly these, in this order (a test checks it).
pub(in crate::plan) const VARIABLES: &[(&str, &str)] = &[
    ("name", "the task's `name`"),
    ("description", "the task's `description` (empty when unset)"),
    ("backend", "the task's `backend`"),
    (
        "model",
        "the model id: `model` rendered, or the `model` axis' value",
    ),
    (
        "image",
        "the container image: `image` rendered, or the `image` axis' value (when there is one)",
    ),
    ("port", "the server port (after `auto` allocation)"),
    (
        "gpus",
        "the GPU count from `resources.gpu`, else the host's, else 0",
    ),
    (
        "gpu_name",
        "the GPU model name: the host's, else the first of `resources.gpu`, else empty",
    ),
    ("host", "the instance's host name (`local` on this machine)"),
    ("host_address", "the instance's host address"),
    (
        "replica",
        "the replica (one model instance of the role) this process belongs to, from 0",
    ),
    (
        "node_rank",
        "this process's rank within its replica, from 0 (0 is the replica's leader)",
    ),
    (
        "nnodes",
        "the number of nodes per replica of the role: `nodes`, default 1",
    ),
    (
        "proc_rank",
        "this process's index on its node, from 0 (always 0 without `procs`)",
    ),
    (
        "procs",
        "the processes per node of the role: `procs`, default 1",
    ),
    (
        "rank",
        "this process's rank within its replica: `node_rank * procs + proc_rank`",
    ),
    ("world_size", "the processes per replica: `nnodes * procs`"),
    (
        "master_addr",
        "the address of node 0 of this process's replica",
    ),
    ("role", "the role name (`server` for a plain task)"),
    (
        "role_index",
        "this process's index within its role (`(replica * nnodes + node_rank) * procs + proc_rank`)",
    ),
    (
        "roles",
        "per role: `port`, `replicas`, `nodes`, `addresses` (per process), `urls` and `endpoints` (`http://address:port` per process), `leaders` (the URL of node 0 per replica), `servers` (the URL of every process that serves HTTP: the leaders, or with `procs` every process), `procs`",
    ),
    (
        "orchestrate",
        "the absolute path of the running `orchestrate` executable",
    ),
];

/// Axes that set a task field of the same name (and so change the deployment).
pub(in crate::plan) const DEPLOYMENT_FIELD_AXES: &[&str] = &["image", "model"];

/// Names an axis may not take: the variables (but `image` and `model`, which an axis sets)
/// and `secrets`.
pub(in crate::plan) fn reserved_names() -> Vec<&'static str> {
    VARIABLES
        .iter()
        .map(|(name, _)| *name)
        .filter(|name| !DEPLOYMENT_FIELD_AXES.contains(name))
        .chain(["secrets"])
        .collect()
}

/// docs/task-file.md's table of template variables, as [`VARIABLES`] writes it.
#[cfg(test)]
fn variables_table() -> String {
    let mut out = String::from("| variable | value |\n|---|---|\n");
    for (name, meaning) in VARIABLES {
        out.push_str(&format!("| `{name}` | {meaning} |\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docs_list_exactly_the_variables() {
        let doc = include_str!("../../../docs/task-file.md");
        let table = variables_table();
        assert!(
            doc.contains(&table),
            "docs/task-file.md's table of template variables must be, under `## Templates`:\n{table}"
        );
    }

    #[test]
    fn axes_may_set_image_and_model_but_no_other_variable() {
        let reserved = reserved_names();
        assert!(reserved.contains(&"port") && reserved.contains(&"secrets"));
        assert!(!reserved.contains(&"image") && !reserved.contains(&"model"));
    }
}
