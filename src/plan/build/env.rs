//! The environment of one instance: the task's then the role's env rendered with the
//! instance's variables (a role entry replaces a task entry of the same name), secrets put
//! in, and the `DSTACK_*` variables multi-node launchers read (per replica) unless the task
//! sets them.

use minijinja::Value as JValue;

use crate::plan::render::Builder;
use crate::plan::role;
use crate::plan::secrets::{self, EnvTemplate};
use crate::plan::types::{EnvValue, EnvVar, PlanError};
use crate::spec::TASK_SOURCE;

impl Builder<'_> {
    /// The environment of instance `index` of `places`, rendered with `jv`; `gpus` are its
    /// own GPUs, `gang_gpus` those of its whole gang (dstack's `DSTACK_GPUS_PER_NODE` and
    /// `DSTACK_GPUS_NUM`).
    pub(super) fn instance_env(
        &self,
        env: &[EnvTemplate],
        jv: &JValue,
        (gpus, gang_gpus): (u32, u32),
        index: usize,
        places: &[role::Placement],
    ) -> Result<Vec<EnvVar>, PlanError> {
        let t = TASK_SOURCE;
        let mut env_out = Vec::new();
        for e in env {
            let text = self.render(t, &format!("env.{}", e.name), &e.value, jv)?;
            let value = if e.secrets.is_empty() {
                secrets::by_name(&e.name, text)
            } else {
                let mut v = text;
                for (sname, svalue) in &e.secrets {
                    v = v.replace(&secrets::placeholder(sname), svalue);
                }
                let names: Vec<&str> = e.secrets.iter().map(|(n, _)| n.as_str()).collect();
                EnvValue::Secret {
                    name: names.join(","),
                    value: v,
                }
            };
            env_out.push(EnvVar {
                name: e.name.clone(),
                value,
            });
        }
        // A later entry (role env) replaces an earlier one (task env) and takes its place at
        // the end: keep each name's last entry, in order of last entries. Linear, so a long
        // env list does not make planning quadratic.
        let mut seen = std::collections::HashSet::new();
        env_out.reverse();
        env_out.retain(|x: &EnvVar| seen.insert(x.name.clone()));
        env_out.reverse();
        // dstack's variables describe this process's replica (a gang of `nnodes` processes).
        // One entry per node: the first process of each (with `procs`, a node runs several).
        let gang: Vec<&role::Placement> = role::gang(places, &places[index])
            .into_iter()
            .filter(|p| p.proc_rank.unwrap_or(0) == 0)
            .collect();
        let nnodes = gang.len();
        let ips: Vec<&str> = gang.iter().map(|p| p.host.address()).collect();
        // A Kubernetes rank's IP exists only once its pod runs, after its leader's: the list
        // of every rank cannot be given to the leader (docs/kubernetes.md).
        let pods = matches!(places[index].host, crate::plan::HostPlan::Kubernetes(_));
        let all_ips = (!pods || nnodes == 1).then(|| ips.join("\n"));
        let dstack = [
            ("DSTACK_RUN_NAME", self.task.spec.name.value.clone()),
            ("DSTACK_GPUS_NUM", gang_gpus.to_string()),
            ("DSTACK_GPUS_PER_NODE", gpus.to_string()),
            ("DSTACK_NODES_NUM", nnodes.to_string()),
            ("DSTACK_NODE_RANK", places[index].node_rank.to_string()),
            ("DSTACK_MASTER_NODE_IP", ips[0].to_string()),
        ];
        let dstack = dstack
            .into_iter()
            .chain(all_ips.map(|ips| ("DSTACK_NODES_IPS", ips)));
        for (k, v) in dstack {
            if !seen.contains(k) {
                env_out.push(EnvVar {
                    name: k.to_string(),
                    value: EnvValue::Plain(v),
                });
            }
        }
        Ok(env_out)
    }
}
