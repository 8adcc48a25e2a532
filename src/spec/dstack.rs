//! dstack's task and service files, run unchanged: the table of every key of dstack's
//! configuration reference (honored here, or accepted and ignored because orchestrate runs
//! on the user's own hosts), the dstack-only values (probes, startup order, stop criteria,
//! `model: {name, format}`, volume maps), and the step that turns what a dstack file says
//! into orchestrate's own fields, with one [`Note`] per dstack key for `plan`.
//!
//! Owns: what each dstack key means here. Does not own: parsing the rest of the file (types,
//! load) or running anything (plan, providers).

use std::fmt;
use std::path::Path;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_saphyr::{Location, Spanned};

use super::diagnostic::Diagnostic;
use super::types::{ReadinessSpec, TaskSpec};
use super::values::{NonZeroDurationValue, PortValue};
use crate::load::Backend;

/// What orchestrate does with one key of dstack's reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Treatment {
    /// It means here what it means under dstack (or the nearest thing; the note says).
    Honored,
    /// Accepted and ignored: it chooses cloud capacity or dstack's own services.
    Ignored,
    /// Accepted only in the form that does not change what runs; other values are errors.
    Refused,
}

/// Every top-level key of dstack's task and service reference (dstack 0.20,
/// `TaskConfiguration` and `ServiceConfiguration`), what orchestrate does with it and why.
/// docs/task-file.md's dstack table lists the same keys (a test keeps them equal); `nodes`,
/// `replicas` are the multi-node keys of the topology section.
pub const KEYS: &[(&str, Treatment, &str)] = &[
    (
        "type",
        Treatment::Honored,
        "`task` or `service`; both run and are benchmarked the same way",
    ),
    (
        "name",
        Treatment::Honored,
        "optional: the file name without `.dstack.yml`/`.yaml`",
    ),
    (
        "image",
        Treatment::Honored,
        "the container image (none: commands run as processes on the host)",
    ),
    (
        "commands",
        Treatment::Honored,
        "run in order in one `sh -c`",
    ),
    (
        "env",
        Treatment::Honored,
        "list or map; `- NAME` passes NAME through from orchestrate's environment",
    ),
    (
        "port",
        Treatment::Honored,
        "the server port; `80:8000` listens on 8000",
    ),
    (
        "ports",
        Treatment::Honored,
        "the first is the server port (when `port` is unset); the others are published too (Docker)",
    ),
    (
        "model",
        Treatment::Honored,
        "the model id sent in requests; a string or `{name, format}`",
    ),
    (
        "resources",
        Treatment::Honored,
        "gpu chooses among the hosts; cpu, memory and free disk are pre-flight minimums on remote hosts; shm_size sizes /dev/shm",
    ),
    (
        "volumes",
        Treatment::Honored,
        "instance volumes `/host/path:/container/path` (Docker)",
    ),
    (
        "working_dir",
        Treatment::Honored,
        "the commands start with `cd` into it",
    ),
    (
        "probes",
        Treatment::Honored,
        "the first probe becomes readiness (GET: its url; POST: a test completion)",
    ),
    (
        "startup_order",
        Treatment::Honored,
        "order of a multi-node role's nodes; one node has nothing to order",
    ),
    (
        "stop_criteria",
        Treatment::Honored,
        "validated; servers run until the sweep ends, then every node stops",
    ),
    (
        "shell",
        Treatment::Refused,
        "commands run with `sh -c`; only `sh` is accepted",
    ),
    (
        "privileged",
        Treatment::Refused,
        "containers run unprivileged; only `false` is accepted",
    ),
    (
        "user",
        Treatment::Refused,
        "the image's user runs the commands; set it in the image",
    ),
    (
        "entrypoint",
        Treatment::Refused,
        "the image's entrypoint is replaced by `sh -c` of the commands",
    ),
    (
        "docker",
        Treatment::Refused,
        "Docker-in-Docker is not offered; only `false` is accepted",
    ),
    (
        "groups",
        Treatment::Refused,
        "heterogeneous node and replica groups are written as `roles:` here",
    ),
    (
        "python",
        Treatment::Ignored,
        "chooses dstack's base image; with `image:` it has no effect, without one it is an error",
    ),
    (
        "nvcc",
        Treatment::Ignored,
        "chooses dstack's base image; with `image:` it has no effect, without one it is an error",
    ),
    (
        "repos",
        Treatment::Ignored,
        "nothing is cloned; commands see the image's (or host's) files",
    ),
    (
        "files",
        Treatment::Ignored,
        "nothing is copied; commands see the image's (or host's) files",
    ),
    (
        "registry_auth",
        Treatment::Ignored,
        "images are pulled with the host's own Docker credentials",
    ),
    (
        "single_branch",
        Treatment::Ignored,
        "applies to `repos`, which are not cloned",
    ),
    (
        "setup",
        Treatment::Ignored,
        "deprecated by dstack; it has no effect for tasks and services",
    ),
    (
        "home_dir",
        Treatment::Ignored,
        "deprecated by dstack; it has no effect",
    ),
    (
        "dstack",
        Treatment::Ignored,
        "there is no dstack server to reach",
    ),
    (
        "priority",
        Treatment::Ignored,
        "tasks sharing a host queue in the order given",
    ),
    ("backends", Treatment::Ignored, "cloud provisioning"),
    ("regions", Treatment::Ignored, "cloud provisioning"),
    (
        "availability_zones",
        Treatment::Ignored,
        "cloud provisioning",
    ),
    ("instance_types", Treatment::Ignored, "cloud provisioning"),
    ("reservation", Treatment::Ignored, "cloud provisioning"),
    ("spot_policy", Treatment::Ignored, "cloud provisioning"),
    ("max_price", Treatment::Ignored, "cloud provisioning"),
    ("backend_options", Treatment::Ignored, "cloud provisioning"),
    (
        "creation_policy",
        Treatment::Ignored,
        "fleet instances are the hosts of the hosts file",
    ),
    (
        "fleets",
        Treatment::Ignored,
        "fleet instances are the hosts of the hosts file; use `hosts:`",
    ),
    (
        "instances",
        Treatment::Ignored,
        "fleet instances are the hosts of the hosts file; use `hosts:`",
    ),
    (
        "idle_duration",
        Treatment::Ignored,
        "nothing is provisioned, so nothing idles",
    ),
    (
        "retry",
        Treatment::Ignored,
        "a failed point is recorded; `orchestrate run --resume` finishes a run",
    ),
    (
        "utilization_policy",
        Treatment::Ignored,
        "a benchmark is not stopped for low GPU utilization",
    ),
    (
        "max_duration",
        Treatment::Ignored,
        "a run lasts as long as its sweep",
    ),
    (
        "stop_duration",
        Treatment::Ignored,
        "teardown stops instances at once",
    ),
    (
        "schedule",
        Treatment::Ignored,
        "runs start when `orchestrate run` is called",
    ),
    (
        "tags",
        Treatment::Ignored,
        "cloud resource tags; the run index label is `tag:`",
    ),
    (
        "gateway",
        Treatment::Ignored,
        "the client talks to the server port directly",
    ),
    (
        "strip_prefix",
        Treatment::Ignored,
        "the client talks to the server port directly",
    ),
    (
        "https",
        Treatment::Ignored,
        "the client talks to the server port directly",
    ),
    (
        "auth",
        Treatment::Ignored,
        "the client talks to the server port directly",
    ),
    (
        "rate_limits",
        Treatment::Ignored,
        "the load shape is `benchmark:`'s",
    ),
    (
        "scaling",
        Treatment::Ignored,
        "the replica count is fixed for a benchmark",
    ),
];

/// What a dstack key became, for `plan`: `honored port (line 4): ...`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Note {
    pub key: String,
    /// Where the key is written (0 when it is not written, e.g. an inferred name).
    pub line: u64,
    pub honored: bool,
    pub text: String,
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.honored { "honored" } else { "ignored" };
        if self.line > 0 {
            write!(f, "{what} {} (line {}): {}", self.key, self.line, self.text)
        } else {
            write!(f, "{what} {}: {}", self.key, self.text)
        }
    }
}

/// `startup_order:` of dstack (a role key here too): the order of a gang's processes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StartupOrder {
    /// Every process at once.
    #[default]
    Any,
    /// Node 0 of each replica first; the other ranks once it is up.
    MasterFirst,
    /// The ranks above 0 first; node 0 once they are up.
    WorkersFirst,
}

/// `stop_criteria:` of dstack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StopCriteria {
    AllDone,
    MasterDone,
}

/// One entry of a service's `probes:`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeSpec {
    /// Must be `http`.
    #[serde(rename = "type")]
    pub kind: Spanned<String>,
    /// Path requested (default `/`).
    #[serde(default)]
    pub url: Option<Spanned<String>>,
    /// `get` (default) or `post`, ...
    #[serde(default)]
    pub method: Option<Spanned<String>>,
    /// Headers sent with the probe (not sent by readiness).
    #[serde(default)]
    pub headers: Vec<serde_json::Value>,
    /// Body of a POST probe.
    #[serde(default)]
    pub body: Option<String>,
    /// Timeout of one probe request.
    #[serde(default)]
    pub timeout: Option<serde_json::Value>,
    /// Time between probes.
    #[serde(default)]
    pub interval: Option<Spanned<NonZeroDurationValue>>,
    /// Successes in a row before ready.
    #[serde(default)]
    pub ready_after: Option<u32>,
    /// Stop probing once ready.
    #[serde(default)]
    pub until_ready: Option<bool>,
}

/// `model:` as a string, or dstack's `{type: chat, name, format, prefix, ...}`: the name.
pub fn model_name<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Spanned<String>>, D::Error> {
    struct ModelName(String);
    impl<'de> Deserialize<'de> for ModelName {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            model_visit(d).map(ModelName)
        }
    }
    let m: Option<Spanned<ModelName>> = Option::deserialize(d)?;
    Ok(m.map(|m| Spanned {
        value: m.value.0,
        referenced: m.referenced,
        defined: m.defined,
    }))
}

fn model_visit<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = String;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a model id, or {name: ..., format: openai}")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<String, A::Error> {
            const KEYS: &[&str] = &[
                "type",
                "name",
                "format",
                "prefix",
                "chat_template",
                "eos_token",
            ];
            let mut name = None;
            while let Some(k) = map.next_key::<String>()? {
                match k.as_str() {
                    "name" => name = Some(map.next_value::<String>()?),
                    "format" => {
                        let f: String = map.next_value()?;
                        if f != "openai" && f != "tgi" {
                            return Err(de::Error::custom(format!(
                                "`{f}` is not a model format; write openai or tgi"
                            )));
                        }
                    }
                    k if KEYS.contains(&k) => {
                        map.next_value::<de::IgnoredAny>()?;
                    }
                    other => return Err(de::Error::unknown_field(other, KEYS)),
                }
            }
            name.ok_or_else(|| de::Error::missing_field("name"))
        }
    }
    d.deserialize_any(V)
}

/// `volumes:` entries: `host:container[:ro]` strings, or dstack's maps
/// `{instance_path, path, optional}`; a network volume (`{name, path}`) is refused.
pub fn volumes<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Spanned<String>>, D::Error> {
    struct Entry(String);
    impl<'de> Deserialize<'de> for Entry {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            volume_visit(d).map(Entry)
        }
    }
    let list: Option<Vec<Spanned<Entry>>> = Option::deserialize(d)?;
    Ok(list
        .unwrap_or_default()
        .into_iter()
        .map(|e| Spanned {
            value: e.value.0,
            referenced: e.referenced,
            defined: e.defined,
        })
        .collect())
}

fn volume_visit<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = String;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("`/host/path:/container/path` or {instance_path, path}")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<String, A::Error> {
            let (mut host, mut path) = (None, None);
            while let Some(k) = map.next_key::<String>()? {
                match k.as_str() {
                    "instance_path" => host = Some(map.next_value::<String>()?),
                    "path" => path = Some(map.next_value::<String>()?),
                    "optional" => {
                        map.next_value::<bool>()?;
                    }
                    "name" => {
                        return Err(de::Error::custom(
                            "network volumes are dstack cloud volumes; mount a host directory instead: {instance_path: /data, path: /data}",
                        ));
                    }
                    other => {
                        return Err(de::Error::unknown_field(
                            other,
                            &["instance_path", "path", "optional"],
                        ));
                    }
                }
            }
            let host = host.ok_or_else(|| de::Error::missing_field("instance_path"))?;
            let path = path.ok_or_else(|| de::Error::missing_field("path"))?;
            Ok(format!("{host}:{path}"))
        }
        fn visit_seq<A: SeqAccess<'de>>(self, _seq: A) -> Result<String, A::Error> {
            Err(de::Error::custom(
                "write one mount per entry: `/host/path:/container/path`",
            ))
        }
    }
    d.deserialize_any(V)
}

/// The task name a file gives when it has no `name:`: its file name without
/// `.dstack.yml`/`.yaml`/`.yml`, other characters than letters, digits, `-`, `_`, `.` as `-`.
pub fn name_from_path(path: &Path) -> String {
    let file = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = [".dstack.yml", ".dstack.yaml", ".yaml", ".yml"]
        .iter()
        .find_map(|s| file.strip_suffix(s))
        .unwrap_or(&file);
    // `.dstack.yml` alone is dstack's default file name: take the directory's name.
    let stem = if stem.is_empty() {
        path.parent()
            .and_then(|p| p.canonicalize().ok())
            .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "task".to_string())
    } else {
        stem.to_string()
    };
    stem.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// The server dialect a launch command names (`vllm serve`, `sglang.launch_server`,
/// `trtllm-serve`), for dstack files that do not say `backend:`.
pub fn backend_from_commands(commands: &[Spanned<String>]) -> Option<Backend> {
    commands.iter().find_map(|c| {
        let c = c.value.as_str();
        if c.contains("sglang.launch_server") || c.contains("sglang serve") {
            Some(Backend::Sglang)
        } else if c.contains("vllm serve") || c.contains("vllm.entrypoints") {
            Some(Backend::Vllm)
        } else if c.contains("trtllm-serve") {
            Some(Backend::Trtllm)
        } else {
            None
        }
    })
}

/// The model a launch command serves: `--model X`, `--model-path X`, `vllm serve X`,
/// `trtllm-serve [flags] X`, with `$VAR`/`${VAR}` taken from the file's env.
pub fn model_from_commands(
    commands: &[Spanned<String>],
    env: &[super::values::EnvEntry],
) -> Option<(String, Location)> {
    for c in commands {
        let words: Vec<&str> = c.value.split_whitespace().collect();
        let found = words.iter().enumerate().find_map(|(i, w)| {
            if let Some(v) = ["--model=", "--model-path=", "--model_path="]
                .iter()
                .find_map(|p| w.strip_prefix(p))
            {
                return Some(v.to_string());
            }
            let next = words.get(i + 1).copied();
            match *w {
                "--model" | "--model-path" | "--model_path" => next.map(str::to_string),
                "serve" if i > 0 && words[i - 1].ends_with("vllm") => {
                    next.filter(|n| !n.starts_with('-')).map(str::to_string)
                }
                "trtllm-serve" => positional(&words[i + 1..]),
                _ => None,
            }
        });
        if let Some(m) = found.and_then(|m| expand(&m, env)) {
            return Some((m, c.referenced));
        }
    }
    None
}

/// The first word of `args` that is neither a flag nor a flag's value.
fn positional(args: &[&str]) -> Option<String> {
    let mut i = 0;
    while i < args.len() {
        let w = args[i];
        if w.starts_with("--") {
            i += if w.contains('=') { 1 } else { 2 };
        } else if w.starts_with('-') || w.contains('=') || w == "\\" {
            i += 1;
        } else {
            return Some(w.to_string());
        }
    }
    None
}

/// `$NAME`/`${NAME}` from the file's env; `None` when the value is not known here.
fn expand(word: &str, env: &[super::values::EnvEntry]) -> Option<String> {
    let word = word.trim_matches(|c| c == '"' || c == '\'');
    let Some(var) = word.strip_prefix('$') else {
        return (!word.contains('$') && !word.contains("{{")).then(|| word.to_string());
    };
    let var = var.trim_start_matches('{').trim_end_matches('}');
    env.iter()
        .find(|e| e.name == var && !e.value.value.contains("${{"))
        .map(|e| e.value.value.clone())
}

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
    refuse(spec, &at)?;
    ports(spec, &mut notes);
    probes(spec, &at, &mut notes)?;
    working_dir(spec, &mut notes);
    network_volumes(spec, &at)?;
    if spec.kind.is_some() {
        infer(spec, &mut notes);
    }
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

/// A value that asks for something (not null, not `false`).
fn truthy(v: &Option<Spanned<serde_json::Value>>) -> Option<&Spanned<serde_json::Value>> {
    v.as_ref().filter(|v| {
        !matches!(
            v.value,
            serde_json::Value::Null | serde_json::Value::Bool(false)
        )
    })
}

/// Keys whose dstack meaning would change what runs if ignored: only harmless values pass.
fn refuse(spec: &TaskSpec, at: &impl Fn(Location, String) -> Diagnostic) -> Result<(), Diagnostic> {
    let d = spec;
    if spec.image.is_none() {
        for (key, v) in [("python", &d.python), ("nvcc", &d.nvcc)] {
            if let Some(v) = truthy(v) {
                return Err(at(
                    v.referenced,
                    format!("`{key}` chooses dstack's base image, which orchestrate does not have"),
                )
                .with_help(
                    "add `image:` with the Python/CUDA your commands need (e.g. `image: python:3.12` or `nvcr.io/nvidia/pytorch:25.01-py3`), or remove the key to run the commands on the host",
                ));
            }
        }
    }
    let refused: [(&str, &Option<Spanned<serde_json::Value>>, &str); 5] = [
        (
            "docker",
            &d.docker,
            "Docker-in-Docker is not offered; run the inner containers as `roles:`",
        ),
        (
            "privileged",
            &d.privileged,
            "containers run unprivileged; remove `privileged`",
        ),
        (
            "user",
            &d.user,
            "the image's user runs the commands; set `USER` in the image",
        ),
        (
            "entrypoint",
            &d.entrypoint,
            "the commands replace the entrypoint; put the entrypoint's command first in `commands`",
        ),
        (
            "groups",
            &d.groups,
            "write each group as a role under `roles:` (docs/task-file.md#roles)",
        ),
    ];
    for (key, v, help) in refused {
        if let Some(v) = truthy(v) {
            return Err(at(v.referenced, format!("`{key}` is not supported")).with_help(help));
        }
    }
    if let Some(v) = &d.shell {
        let sh = matches!(v.value.as_str(), Some("sh" | "/bin/sh"));
        if !sh {
            return Err(at(v.referenced, format!("`shell: {}` is not supported", compact(&v.value)))
                .with_help("commands run with `sh -c`; write them for sh or call `bash -c '...'` in one command"));
        }
    }
    Ok(())
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
    if spec.backend.is_none()
        && let Some(b) = backend_from_commands(&spec.commands)
    {
        spec.backend = Some(b);
        let name = serde_json::to_value(b)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        notes.push(Note {
            key: "commands".into(),
            line: spec.commands.first().map_or(0, |c| c.referenced.line()),
            honored: true,
            text: format!("the launch command is {name}'s: `backend: {name}`"),
        });
    }
    if spec.model.is_none()
        && spec.benchmark.model.is_none()
        && let Some((model, loc)) = model_from_commands(&spec.commands, &spec.env.0)
    {
        notes.push(Note {
            key: "commands".into(),
            line: loc.line(),
            honored: true,
            text: format!("the launch command serves `{model}`: `model: {model}`"),
        });
        spec.model = Some(Spanned {
            value: model,
            referenced: loc,
            defined: loc,
        });
    }
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

/// A YAML value on one line, strings without quotes.
fn compact(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
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

/// The accepted-and-ignored (and refused) dstack keys of `spec` that are written.
fn written(spec: &TaskSpec) -> Vec<(&'static str, &Spanned<serde_json::Value>)> {
    let TaskSpec {
        shell,
        privileged,
        user,
        entrypoint,
        docker,
        groups,
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
        scaling,
        ..
    } = spec;
    let all = [
        ("shell", shell),
        ("privileged", privileged),
        ("user", user),
        ("entrypoint", entrypoint),
        ("docker", docker),
        ("groups", groups),
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
        ("scaling", scaling),
    ];
    all.into_iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| (k, v)))
        .collect()
}

/// One note per accepted-and-ignored key that is written.
fn ignored(spec: &TaskSpec, notes: &mut Vec<Note>) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn words(c: &str) -> Vec<Spanned<String>> {
        vec![Spanned {
            value: c.to_string(),
            referenced: Location::UNKNOWN,
            defined: Location::UNKNOWN,
        }]
    }

    #[test]
    fn the_model_follows_from_the_launch_command() {
        let m = |c: &str| model_from_commands(&words(c), &[]).map(|m| m.0);
        assert_eq!(
            m("python3 -m sglang.launch_server --model deepseek-ai/DeepSeek-R1 --tp 8").as_deref(),
            Some("deepseek-ai/DeepSeek-R1")
        );
        assert_eq!(m("vllm serve org/m --tp 8").as_deref(), Some("org/m"));
        assert_eq!(
            m("trtllm-serve --backend pytorch --tp_size $N --pp_size 1 deepseek").as_deref(),
            Some("deepseek")
        );
        assert_eq!(
            m("python3 -m sglang.launch_server --model-path $MODEL_ID"),
            None
        );
        assert_eq!(m("echo hello"), None);
    }

    #[test]
    fn the_backend_follows_from_the_launch_command() {
        assert_eq!(
            backend_from_commands(&words("vllm serve m")),
            Some(Backend::Vllm)
        );
        assert_eq!(
            backend_from_commands(&words("python3 -m sglang.launch_server --model m")),
            Some(Backend::Sglang)
        );
        assert_eq!(
            backend_from_commands(&words("trtllm-serve m")),
            Some(Backend::Trtllm)
        );
        assert_eq!(backend_from_commands(&words("sleep 1")), None);
    }

    #[test]
    fn names_come_from_the_file_name() {
        assert_eq!(
            name_from_path(Path::new("a/vllm-h200.dstack.yml")),
            "vllm-h200"
        );
        assert_eq!(name_from_path(Path::new("serve me.yaml")), "serve-me");
    }
}
