//! The step that turns what a dstack file says into orchestrate's own fields (ports,
//! probes, working directory, backend and model from the launch command), with one
//! [`Note`] per dstack key for `plan`.

use std::path::Path;

use serde_saphyr::{Location, Spanned};

use super::container::container;
use super::keys::Note;
use super::launch::{infer_from, name_from_path};
use super::node_groups::node_groups;
use super::ranges::ranges;
use super::replica_groups;
use super::unsupported::ignored;
use crate::spec::diagnostic::Diagnostic;
use crate::spec::types::{ReadinessSpec, TaskSpec};
use crate::spec::values::PortValue;

/// Turn what a dstack file says into orchestrate's fields and note what each dstack key
/// became. `path` and `text` are the task file's (errors point into it).
pub fn normalize(spec: &mut TaskSpec, path: &Path, text: &str) -> Result<Vec<Note>, Diagnostic> {
    let mut notes = Vec::new();
    let at = |loc: Location, msg: String| Diagnostic::at(path, text, loc, msg);
    check_kind(spec, &at)?;
    if spec.name.value.is_empty() && spec.name.referenced.line() == 0 {
        spec.name.value = name_from_path(path);
        notes.push(Note {
            key: "name".into(),
            line: 0,
            honored: true,
            text: format!("not written; `{}` from the file name", spec.name.value),
        });
    }
    let replica_groups = replica_groups::take(spec, &at)?;
    node_groups(spec, &at, &mut notes)?;
    container(spec, &at, &mut notes)?;
    ports(spec, &mut notes);
    service_port(spec, &at)?;
    probes(spec, &at, &mut notes)?;
    if let Some(taken) = replica_groups {
        replica_groups::roles(spec, taken, &at, &mut notes)?;
    }
    working_dir(spec, &mut notes);
    network_volumes(spec, &at)?;
    if spec.kind.is_some() {
        infer(spec, &mut notes);
    }
    ranges(spec, &at, &mut notes)?;
    ordering(spec, &mut notes);
    unchecked_resources(spec, &mut notes);
    ignored(spec, &mut notes);
    notes.sort_by_key(|n| n.line);
    Ok(notes)
}

fn check_kind(
    spec: &TaskSpec,
    at: &impl Fn(Location, String) -> Diagnostic,
) -> Result<(), Diagnostic> {
    if let Some(kind) = &spec.kind
        && kind.value != "task"
        && kind.value != "service"
    {
        let help = if kind.value == "dev-environment" {
            "a dev environment is interactive; write `type: task` or `type: service` to benchmark a server"
        } else {
            "orchestrate runs dstack `type: task` and `type: service` files"
        };
        return Err(at(
            kind.referenced,
            format!("`type: {}` is not supported", kind.value),
        )
        .with_help(help));
    }
    Ok(())
}

/// A dstack service must say its port (dstack requires `port`): without one there is no
/// telling where the server listens, and guessing the engine's default would benchmark
/// whatever else answers there.
fn service_port(
    spec: &TaskSpec,
    at: &impl Fn(Location, String) -> Diagnostic,
) -> Result<(), Diagnostic> {
    let Some(kind) = spec.kind.as_ref().filter(|k| k.value == "service") else {
        return Ok(());
    };
    if spec.port.is_some() || spec.roles.is_some() || spec.deployments.is_some() {
        return Ok(());
    }
    Err(at(
        kind.referenced,
        "a service without `port`: dstack requires it, and orchestrate must know where the server listens".into(),
    )
    .with_help("add `port:` with the port the launch command listens on, e.g. `port: 8000` for `vllm serve`, `port: 30000` for SGLang"))
}

/// `ports:` of a task: the first is the server port unless `port` is set.
fn ports(spec: &mut TaskSpec, notes: &mut Vec<Note>) {
    let Some(first) = spec.ports.first() else {
        return;
    };
    let line = first.referenced.line();
    let list: Vec<String> = spec.ports.iter().map(|p| port_text(p.value)).collect();
    let text = if spec.port.is_none() {
        spec.port = Some(first.clone());
        if list.len() > 1 {
            format!(
                "{} is the server port; {} published as well",
                list[0],
                list[1..].join(", ")
            )
        } else {
            format!("{} is the server port", list[0])
        }
    } else {
        format!("{} published besides `port`", list.join(", "))
    };
    notes.push(Note {
        key: "ports".into(),
        line,
        honored: true,
        text,
    });
}

fn port_text(p: PortValue) -> String {
    match p {
        PortValue::Fixed(n) => n.to_string(),
        PortValue::Auto => "auto".to_string(),
    }
}

/// A service's `probes:` become readiness.
fn probes(
    spec: &mut TaskSpec,
    at: &impl Fn(Location, String) -> Diagnostic,
    notes: &mut Vec<Note>,
) -> Result<(), Diagnostic> {
    let Some(first) = spec.probes.first() else {
        return Ok(());
    };
    let loc = first.kind.referenced;
    if first.kind.value != "http" {
        return Err(at(
            loc,
            format!("probe type `{}` is not supported", first.kind.value),
        )
        .with_help("write `type: http`"));
    }
    if spec.readiness.is_some() {
        return Err(at(
            loc,
            "both `probes` and `readiness` say when the server is ready".into(),
        )
        .with_help("keep one of them"));
    }
    let method = first
        .method
        .as_ref()
        .map_or("get".to_string(), |m| m.value.to_ascii_lowercase());
    let url = first.url.clone().unwrap_or(Spanned {
        value: "/".to_string(),
        referenced: loc,
        defined: loc,
    });
    let (readiness, what) = match method.as_str() {
        "get" | "head" => (
            ReadinessSpec {
                http: Some(url.clone()),
                tcp: false,
                status: None,
                interval: first.interval.clone(),
                timeout: None,
                generate: false,
                workers: None,
                ray: None,
            },
            format!("readiness is GET {} answering 200", url.value),
        ),
        "post" => (
            ReadinessSpec {
                http: None,
                tcp: false,
                status: None,
                interval: first.interval.clone(),
                timeout: None,
                generate: true,
                workers: None,
                ray: None,
            },
            format!(
                "POST {}: readiness is GET /health answering 200, then one test completion",
                url.value
            ),
        ),
        other => {
            let mloc = first.method.as_ref().map_or(loc, |m| m.referenced);
            return Err(at(mloc, format!("probe method `{other}` is not supported"))
                .with_help("write `method: get` (or `post` for a completion probe)"));
        }
    };
    spec.readiness = Some(readiness);
    let mut text = what;
    if spec.probes.len() > 1 {
        text.push_str("; only the first probe is used");
    }
    if !first.headers.is_empty() || first.ready_after.is_some_and(|n| n > 1) {
        text.push_str("; headers and ready_after are not used");
    }
    notes.push(Note {
        key: "probes".into(),
        line: loc.line(),
        honored: true,
        text,
    });
    Ok(())
}

/// `working_dir:` becomes a `cd` before the commands.
fn working_dir(spec: &mut TaskSpec, notes: &mut Vec<Note>) {
    let Some(dir) = spec.working_dir.clone() else {
        return;
    };
    let cd = Spanned {
        value: format!("cd {}", sh_quote(&dir.value)),
        referenced: dir.referenced,
        defined: dir.defined,
    };
    if !spec.commands.is_empty() {
        spec.commands.insert(0, cd.clone());
    }
    if let Some(roles) = &mut spec.roles {
        for (_, role) in &mut roles.0 {
            if !role.commands.is_empty() {
                role.commands.insert(0, cd.clone());
            }
        }
    }
    notes.push(Note {
        key: "working_dir".into(),
        line: dir.referenced.line(),
        honored: true,
        text: format!("the commands start with `{}`", cd.value),
    });
}

/// `text` as one sh word.
fn sh_quote(text: &str) -> String {
    if !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-~+@%:".contains(c))
    {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

/// A short-form network volume (`name:/path`, no `/` in the source) needs dstack's cloud.
fn network_volumes(
    spec: &TaskSpec,
    at: &impl Fn(Location, String) -> Diagnostic,
) -> Result<(), Diagnostic> {
    for v in &spec.volumes {
        let Some((src, _)) = v.value.split_once(':') else {
            continue;
        };
        if !src.contains('/') && !src.contains("{{") && !src.starts_with('~') {
            return Err(at(
                v.referenced,
                format!("`{src}` is a dstack network volume, which needs dstack's cloud backends"),
            )
            .with_help("mount a host directory instead: `/data/hf:/root/.cache/huggingface`"));
        }
    }
    Ok(())
}

/// A dstack file need not say `backend:` or `model:`: both follow from the launch command.
fn infer(spec: &mut TaskSpec, notes: &mut Vec<Note>) {
    let commands = spec.commands.clone();
    infer_from(spec, &commands, "commands", "the launch command", notes);
}

fn ordering(spec: &TaskSpec, notes: &mut Vec<Note>) {
    if let Some(o) = &spec.startup_order {
        notes.push(Note {
            key: "startup_order".into(),
            line: o.referenced.line(),
            honored: true,
            text: "a multi-node role starts its nodes in this order; one node has nothing to order"
                .into(),
        });
    }
    if let Some(c) = &spec.stop_criteria {
        notes.push(Note {
            key: "stop_criteria".into(),
            line: c.referenced.line(),
            honored: true,
            text: "servers run until the sweep ends, then every node is stopped".into(),
        });
    }
}

/// `resources.cpu` and `resources.memory` are checked on remote hosts only: say so.
fn unchecked_resources(spec: &TaskSpec, notes: &mut Vec<Note>) {
    let Some(r) = &spec.resources else {
        return;
    };
    let lines = [
        ("resources.cpu", r.cpu.as_ref().map(|c| c.referenced.line())),
        (
            "resources.memory",
            r.memory.as_ref().map(|m| m.referenced.line()),
        ),
    ];
    for (key, line) in lines {
        if let Some(line) = line {
            notes.push(Note {
                key: key.into(),
                line,
                honored: true,
                text:
                    "its minimum is a pre-flight check on remote hosts; this machine is not checked"
                        .into(),
            });
        }
    }
}
