//! The dstack keys that do not apply here, noted as accepted and ignored (with [`KEYS`]'
//! reason).

use serde_saphyr::Spanned;

use super::keys::{KEYS, Note, Treatment};
use crate::spec::types::TaskSpec;

/// A YAML value on one line, strings without quotes.
fn compact(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The accepted-and-ignored (and refused) dstack keys of `spec` that are written.
fn written(spec: &TaskSpec) -> Vec<(&'static str, &Spanned<serde_json::Value>)> {
    let TaskSpec {
        shell,
        privileged,
        user,
        entrypoint,
        docker,
        python,
        nvcc,
        repos,
        files,
        registry_auth,
        single_branch,
        setup,
        home_dir,
        dstack,
        priority,
        backends,
        regions,
        availability_zones,
        instance_types,
        reservation,
        spot_policy,
        max_price,
        backend_options,
        creation_policy,
        fleets,
        instances,
        idle_duration,
        retry,
        utilization_policy,
        max_duration,
        stop_duration,
        schedule,
        tags,
        gateway,
        strip_prefix,
        https,
        auth,
        rate_limits,
        ..
    } = spec;
    let all = [
        ("shell", shell),
        ("privileged", privileged),
        ("user", user),
        ("entrypoint", entrypoint),
        ("docker", docker),
        ("python", python),
        ("nvcc", nvcc),
        ("repos", repos),
        ("files", files),
        ("registry_auth", registry_auth),
        ("single_branch", single_branch),
        ("setup", setup),
        ("home_dir", home_dir),
        ("dstack", dstack),
        ("priority", priority),
        ("backends", backends),
        ("regions", regions),
        ("availability_zones", availability_zones),
        ("instance_types", instance_types),
        ("reservation", reservation),
        ("spot_policy", spot_policy),
        ("max_price", max_price),
        ("backend_options", backend_options),
        ("creation_policy", creation_policy),
        ("fleets", fleets),
        ("instances", instances),
        ("idle_duration", idle_duration),
        ("retry", retry),
        ("utilization_policy", utilization_policy),
        ("max_duration", max_duration),
        ("stop_duration", stop_duration),
        ("schedule", schedule),
        ("tags", tags),
        ("gateway", gateway),
        ("strip_prefix", strip_prefix),
        ("https", https),
        ("auth", auth),
        ("rate_limits", rate_limits),
    ];
    all.into_iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| (k, v)))
        .collect()
}

/// One note per accepted-and-ignored key that is written.
pub(super) fn ignored(spec: &TaskSpec, notes: &mut Vec<Note>) {
    for (key, value) in written(spec) {
        let Some((_, treatment, why)) = KEYS.iter().find(|(k, _, _)| *k == key) else {
            continue;
        };
        if *treatment == Treatment::Honored {
            continue;
        }
        let text = if *treatment == Treatment::Refused {
            format!("`{}` changes nothing here; {why}", compact(&value.value))
        } else {
            format!("orchestrate runs on your own hosts; {why}")
        };
        notes.push(Note {
            key: key.to_string(),
            line: value.referenced.line(),
            honored: false,
            text,
        });
    }
}
