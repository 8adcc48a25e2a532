//! The plan's `resolved` (the manifest keeps it): the task as written (profile merged, keys
//! the user did not set dropped) and, under `deployments.<id>`, what each deployment renders
//! it to: the model, the named deployment's name (`deployments:`), and every role with its
//! image and each process's host, replica, rank, port, commands and env. Secrets stay
//! `***`: env values serialize redacted, and known secret values are redacted from the task
//! as written too.

use serde_json::{Map, Value, json};

use crate::plan::render::Builder;
use crate::plan::types::{DeploymentPlan, PlanError};

impl Builder<'_> {
    /// `resolved` for these deployments, each with the model it serves.
    pub(super) fn resolved(
        &self,
        deployments: &[(&DeploymentPlan, &str)],
    ) -> Result<Value, PlanError> {
        let invalid =
            |e: serde_json::Error| PlanError::Invalid(format!("cannot serialize the task: {e}"));
        let mut resolved = serde_json::to_value(&self.task.spec).map_err(invalid)?;
        drop_unset(&mut resolved);
        let mut rendered = Map::new();
        for (d, model) in deployments {
            let roles = serde_json::to_value(&d.roles).map_err(invalid)?;
            let mut entry = json!({"axes": d.axes, "model": model, "roles": roles});
            if let Some(name) = &d.name {
                entry["name"] = json!(name);
            }
            rendered.insert(d.id.clone(), entry);
        }
        if let Value::Object(task) = &mut resolved {
            task.insert("deployments".into(), Value::Object(rendered));
        }
        // The task as written may hold a secret-looking env value in clear.
        crate::plan::secrets::redact_json(&mut resolved);
        Ok(resolved)
    }
}

/// Remove keys the user did not set (null, empty lists/maps, false defaults stay).
fn drop_unset(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, x| {
                !(x.is_null()
                    || x.as_array().is_some_and(|a| a.is_empty())
                    || x.as_object().is_some_and(|o| o.is_empty()))
            });
            m.values_mut().for_each(drop_unset);
        }
        Value::Array(a) => a.iter_mut().for_each(drop_unset),
        _ => {}
    }
}
